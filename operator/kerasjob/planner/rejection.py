"""Children the API server refuses to create, and what that means for the job.

Pods are created with ``fieldValidation=Strict`` (a template typo such as ``resorces`` is an
error, not silently dropped). A 4xx on a create is about the job, not the operator, so it
must not just be retried in a loop while the job sits Pending with no word of why:

* 400 Bad Request, 413, 422 Invalid (an invalid quantity, a 300 KB annotation, no container,
  no image, an unknown field): the same template will be refused again. The job fails with
  reason ``PodRejected`` (``ServiceRejected``) and the API server's own message.
* 403 Forbidden (a ResourceQuota exceeded, Pod Security admission, a policy webhook): it may
  pass later (quota freed, namespace relabelled). The job waits, condition ``Created`` False
  with reason ``CreateForbidden`` and the API's message, retrying with a growing delay.

Any other error (401, 404 of a terminating namespace, 409, 429, 5xx, network) is the
controller's to retry as before.

A prerequisite the job names that is missing waits the same way, before any Pod is made:
the Secret of its bucket's credentials (spec.checkpoint.credentials) not found, or without a
key its scheme needs (`missing`: reason ``CheckpointSecretMissing``, the message says which
Secret and what it lacks). Nothing watches Secrets: the retry's timer looks again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kerasjob.api import Reason

#: Create refusals that retrying the same spec cannot fix.
PERMANENT_STATUSES = frozenset({400, 413, 415, 422})
#: Create refusals that may pass later.
WAITING_STATUSES = frozenset({403})

#: The reason a job fails with when the API server rejects its child of this kind.
REJECTED = {
    "Pod": Reason.POD_REJECTED.value,
    "Service": Reason.SERVICE_REJECTED.value,
    "NetworkPolicy": Reason.NETWORK_POLICY_REJECTED.value,
}
#: Seconds before the n-th retry of a forbidden create (capped).
MAX_RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class Rejection:
    """The API server refused to create one child of a job (at one generation)."""

    kind: str
    """Pod or Service."""
    name: str
    status: int
    message: str
    """The API server's own message."""
    generation: int | None
    attempts: int = 1
    waiting_reason: str | None = None
    """Set for a missing prerequisite (`missing`), not the API server's refusal: the
    condition's reason, and ``message`` says it all."""

    @property
    def permanent(self) -> bool:
        return self.waiting_reason is None and self.status in PERMANENT_STATUSES

    @property
    def reason(self) -> str:
        if self.waiting_reason is not None:
            return self.waiting_reason
        return REJECTED[self.kind] if self.permanent else Reason.CREATE_FORBIDDEN.value

    def describe(self) -> str:
        if self.waiting_reason is not None:
            return self.message
        verb = "rejected" if self.permanent else "refused"
        return f"the API server {verb} {self.kind} {self.name} (HTTP {self.status}): {self.message}"

    @property
    def retry_after(self) -> float:
        return min(2.0**self.attempts, MAX_RETRY_SECONDS)

    def again(self, previous: Rejection | None) -> Rejection:
        """This rejection, counted as one more attempt when it repeats ``previous``."""
        if previous is None or previous.generation != self.generation:
            return self
        return replace(self, attempts=previous.attempts + 1)


def from_error(
    status: int, body: object, *, kind: str, name: str, generation: int | None
) -> Rejection | None:
    """A `Rejection` for an API error of creating child ``kind``/``name``, or None when the
    error is not about the child (the controller retries those)."""
    if status not in PERMANENT_STATUSES | WAITING_STATUSES:
        return None
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or body or "")
    if status == 403 and "being terminated" in text:
        return None  # the namespace is going away, and the job with it
    return Rejection(kind, name, status, text[:4000], generation)


def missing(
    kind: str, name: str, message: str, *, reason: str, generation: int | None
) -> Rejection:
    """A prerequisite the job names (``kind``/``name``, e.g. its checkpoint Secret) that is
    missing or incomplete: no Pods until it is there; ``message`` says what is missing."""
    return Rejection(kind, name, 404, message, generation, waiting_reason=reason)

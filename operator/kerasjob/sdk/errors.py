"""The SDK's exceptions: one class per thing a caller (or the CLI) reacts to differently.

Every error of talking to the cluster is a `KerasJobError`; `from_response` turns an API
server answer (status code + body) into the right one, so the SDK, the CLI and the dev
tools tell a missing job from a missing CRD (both HTTP 404) in one place.
"""

from __future__ import annotations

import json
from typing import Any


class KerasJobError(Exception):
    """Base class of every SDK error. ``exit_code`` is what the CLI exits with: 1 any error,
    (2 a usage error, from argparse), 3 not found, 4 forbidden, 5 the job failed, 6 a wait
    timed out."""

    exit_code = 1


class ConfigurationError(KerasJobError):
    """No usable kubeconfig (or in-cluster credentials)."""


class UnreachableError(KerasJobError):
    """The API server could not be reached (connection refused, DNS, TLS, timeout)."""


class ApiError(KerasJobError):
    """The API server answered with an error status; ``status``, ``reason`` and ``body``."""

    def __init__(self, status: int, message: str, body: Any = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.reason = reason


class CRDNotFoundError(ApiError):
    """The cluster has no kerasjobs.kerasjob.dev CRD (install the operator's chart or CRDs)."""


class NotFoundError(ApiError):
    """The object (a KerasJob, a Pod ...) does not exist."""

    exit_code = 3


class ForbiddenError(ApiError):
    """RBAC refused the request (namespace or verb not allowed)."""

    exit_code = 4


class AlreadyExistsError(ApiError):
    """Create of an object that already exists."""


class InvalidError(ApiError):
    """The API server rejected the object (schema, CEL rules); ``causes`` lists the fields."""

    @property
    def causes(self) -> list[str]:
        details = (self.body or {}).get("details") if isinstance(self.body, dict) else None
        return [
            f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
            for c in (details or {}).get("causes") or []
        ]


class WaitTimeoutError(KerasJobError):
    """`wait` gave up; ``job`` is the last KerasJob seen (or None)."""

    exit_code = 6

    def __init__(self, message: str, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class JobFailedError(KerasJobError):
    """The job ended Failed while it was waited for; ``reason`` and ``message`` say why."""

    exit_code = 5

    def __init__(self, name: str, reason: str, message: str, job: Any = None) -> None:
        super().__init__(f"KerasJob {name!r} failed: {reason}: {message}".rstrip(": "))
        self.name = name
        self.reason = reason
        self.message = message
        self.job = job


#: details.kind of a 404 (the resource, plural) -> the kind a message names.
_KINDS = {"kerasjobs": "KerasJob", "pods": "Pod", "configmaps": "ConfigMap", "events": "Event"}


def _decode(body: Any) -> Any:
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body


def from_response(
    status: int, body: Any, *, kind: str = "KerasJob", namespace: str | None = None
) -> ApiError:
    """The typed error for an API server answer with ``status`` >= 400.

    A 404 whose body names the object is a missing object; any other 404 (the plain
    "404 page not found" of an unknown resource path) means the resource type is not served.
    """
    decoded = _decode(body)
    obj = decoded if isinstance(decoded, dict) else {}
    message = str(obj.get("message") or (decoded if isinstance(decoded, str) else "") or "")
    reason = str(obj.get("reason") or "")
    details = obj.get("details") or {}
    where = f" in namespace {namespace!r}" if namespace else ""
    if status == 404 and details.get("name"):
        what = _KINDS.get(str(details.get("kind") or ""), kind)
        return NotFoundError(
            404, f"{what} {details['name']!r} not found{where}", decoded, reason or "NotFound"
        )
    if status == 404:
        if kind == "KerasJob":
            return CRDNotFoundError(
                404,
                "the KerasJob API is not in this cluster (no kerasjobs.kerasjob.dev CRD)",
                decoded,
                "NotFound",
            )
        return NotFoundError(404, f"{kind} not found{where}: {message}", decoded, "NotFound")
    text = f"the API server refused: {message or reason} (HTTP {status})"
    if status == 403:
        return ForbiddenError(status, text, decoded, reason or "Forbidden")
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExistsError(status, message, decoded, reason)
    if status == 422:
        return InvalidError(status, message or text, decoded, reason or "Invalid")
    return ApiError(status, text, decoded, reason)

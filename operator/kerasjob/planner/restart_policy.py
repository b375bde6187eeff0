"""The restart policy: what a Pod's exit or loss means, and what the job does about it.

Two pure steps, each a small function with tests (tests/unit/test_restart_policy.py):

1. *Classify* an event of one Pod into an `Outcome`:
   - `Success`     -- the trainer exited 0.
   - `Disruption`  -- not the program's fault: the Pod was deleted or evicted by someone
     else, carries a ``DisruptionTarget`` condition, was failed by the node (Evicted,
     Preempting, NodeLost, Shutdown ...), its container was killed by SIGKILL/SIGTERM (exit
     137/143, not OOMKilled), or the trainer said so (exit 42 preempted-and-saved, 43 peer
     lost; see `kerasjob_contract`).
   - `Permanent`   -- retrying cannot help (exit 78, invalid configuration: the trainer's
     reason, from its termination message, goes into the job's condition and event).
   - `Failure`     -- any other error exit.
2. *Decide*, from the job's ``restartPolicy`` and ``backoffLimit``, whether the job goes on
   (the Pod is restarted in place by the kubelet or re-created by the operator) or fails.

Disruptions never count against ``backoffLimit``, under every policy. The exit-code rules live
here and only here (as TFJob keeps them in ``train_util.go``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from kerasjob.api import Reason
from kerasjob.planner.podview import PodView, Termination
from kerasjob_contract import (
    DISRUPTION_EXIT_CODES,
    PERMANENT_EXIT_CODES,
    ExitCode,
    invalid_config_reason,
)

#: Containers killed by these signals were stopped from outside (node drain, preemption,
#: kubelet eviction, peer teardown): 128 + SIGKILL(9), 128 + SIGTERM(15).
SIGNAL_EXIT_CODES: frozenset[int] = frozenset({137, 143})

#: Pod-level status.reason values set when the node, not the program, ended the Pod.
DISRUPTION_POD_REASONS: frozenset[str] = frozenset(
    {
        "Evicted",
        "Preempting",
        "NodeLost",
        "Shutdown",
        "NodeShutdown",
        "Terminated",
        "DeletionByTaintManager",
        "UnexpectedAdmissionError",
    }
)


#: The reasons of the trainer's own disruption exits (`classify_exit`).
PREEMPTED, PEER_LOST, TRAINER_DISRUPTION = "Preempted", "PeerLost", "TrainerDisruption"


@dataclass(frozen=True)
class Success:
    pass


@dataclass(frozen=True)
class Disruption:
    reason: str
    exit_code: int | None = None


@dataclass(frozen=True)
class Failure:
    reason: str
    exit_code: int | None = None


@dataclass(frozen=True)
class Permanent:
    reason: str
    exit_code: int | None = None
    message: str = ""
    """Why retrying cannot help (empty: the trainer rejected its configuration)."""
    cause: str = ""
    """The trainer's own reason for rejecting its configuration (exit 78), from its
    termination message (`kerasjob_contract.invalid_config_reason`); '' when it left none."""


#: The DisruptionTarget reason of a Pod the Pod garbage collector deleted (its node is gone).
DELETION_BY_POD_GC = "DeletionByPodGC"


def node_never_existed(pod: PodView) -> Permanent | None:
    """A Pod bound by its own spec.nodeName (never by the scheduler) that the Pod garbage
    collector deleted: that node does not exist, and every new Pod would go the same way."""
    if pod.disruption_reason != DELETION_BY_POD_GC or not pod.node_name:
        return None
    if pod.scheduled_since is not None or pod.termination is not None:
        return None  # placed by the scheduler, or it ran: a node that went away
    return Permanent(
        Reason.NODE_NOT_FOUND.value,
        message=f"Pod {pod.name} names node {pod.node_name!r} (spec.nodeName), which does "
        "not exist: the Pod garbage collector deleted it; retrying cannot help",
    )


Outcome = Success | Disruption | Failure | Permanent


def classify_exit(term: Termination) -> Outcome:
    """What a container's termination means, from its exit code and reason alone."""
    code = term.exit_code
    if code == ExitCode.SUCCESS:
        return Success()
    if code in PERMANENT_EXIT_CODES:
        return Permanent(
            Reason.INVALID_CONFIG.value, code, cause=invalid_config_reason(term.message) or ""
        )
    if code == ExitCode.PREEMPTED_SAVED:
        return Disruption(PREEMPTED, code)
    if code == ExitCode.PEER_LOST:
        return Disruption(PEER_LOST, code)
    if code in DISRUPTION_EXIT_CODES:  # pragma: no cover - future contract codes
        return Disruption(TRAINER_DISRUPTION, code)
    if code in SIGNAL_EXIT_CODES and term.reason != "OOMKilled":
        return Disruption("Killed" if code == 137 else "Terminated", code)
    return Failure(term.reason or "Error", code)


#: The trainer's own disruption exits: it left because its group broke (43, a peer was
#: lost) or the group agreed to stop (42, a peer got SIGTERM). Without a supervisor to restart
#: it in place, every survivor's Pod ends with one of these after a single loss.
GROUP_EXIT_REASONS: frozenset[str] = frozenset({PREEMPTED, PEER_LOST, TRAINER_DISRUPTION})


def is_group_exit(outcome: Outcome) -> TypeGuard[Disruption]:
    """Whether `outcome` is a trainer leaving with its group (42/43 of a Pod that was not
    itself deleted, evicted or failed by its node): a consequence of another Pod's loss
    when one is counted in the same round (`accounting`), else the round's only trace."""
    return isinstance(outcome, Disruption) and outcome.reason in GROUP_EXIT_REASONS


def classify_in_place_restart(pod: PodView) -> Outcome:
    """Why the kubelet restarted the trainer container in place (restartCount went up)."""
    if pod.last_termination is None:
        # The kubelet always records lastState; without it assume the worst, an error.
        return Failure("Error")
    return classify_exit(pod.last_termination)


def classify_finished(pod: PodView) -> Outcome:
    """What a Pod in phase Succeeded or Failed means."""
    if pod.phase == "Succeeded":
        return Success()
    if (missing_node := node_never_existed(pod)) is not None:
        return missing_node
    if pod.disruption_reason:
        code = pod.termination.exit_code if pod.termination else None
        return Disruption(pod.disruption_reason, code)
    if pod.status_reason in DISRUPTION_POD_REASONS:
        code = pod.termination.exit_code if pod.termination else None
        return Disruption(pod.status_reason, code)
    if pod.termination is not None:
        outcome = classify_exit(pod.termination)
        # A Failed Pod whose trainer exited 0 (a sidecar failed): still an error of the Pod.
        return Failure("Error", 0) if isinstance(outcome, Success) else outcome
    return Failure(pod.status_reason or "PodFailed")


def classify_lost(pod: PodView | None) -> Disruption | Permanent:
    """A Pod the job still wants was deleted (or vanished) without the operator asking."""
    if pod is not None and (missing_node := node_never_existed(pod)) is not None:
        return missing_node
    if pod is not None and pod.disruption_reason:
        return Disruption(pod.disruption_reason)
    if pod is not None and pod.status_reason in DISRUPTION_POD_REASONS:
        return Disruption(pod.status_reason)
    return Disruption("PodDeleted")


@dataclass(frozen=True)
class Verdict:
    """What the job does after an outcome: go on (restart) or fail with a reason."""

    fail: bool
    reason: str = ""
    message: str = ""
    count_failure: bool = False
    count_disruption: bool = False


def is_retryable_exit_code(code: int | None) -> bool:
    """ExitCode policy: signals (>= 128) and the trainer's disruption codes are retryable."""
    return code is not None and (code >= 128 or code in DISRUPTION_EXIT_CODES)


def decide(
    policy: str,
    outcome: Outcome,
    *,
    pod: str,
    failures_before: int,
    backoff_limit: int,
) -> Verdict:
    """The job's reaction to one outcome of one Pod under ``policy``.

    ``failures_before`` is ``status.restarts.failures`` before this outcome. A failure that
    brings the count above ``backoff_limit`` fails the job (reason BackoffLimitExceeded):
    the job survives exactly ``backoff_limit`` failures.
    """
    if isinstance(outcome, Success):
        return Verdict(fail=False)
    if isinstance(outcome, Disruption):
        return Verdict(fail=False, count_disruption=True)
    code = outcome.exit_code
    if isinstance(outcome, Permanent):
        why = (
            f"invalid configuration: {outcome.cause}"
            if outcome.cause
            else "the trainer rejected its configuration"
        )
        return Verdict(
            fail=True,
            reason=outcome.reason,
            message=outcome.message or f"Pod {pod} exited with {code}: {why}; retrying cannot help",
            count_failure=True,
        )
    # A Failure.
    if policy == "Never":
        return Verdict(
            fail=True,
            reason=Reason.POD_FAILED.value,
            message=f"Pod {pod} failed ({_describe(outcome)}) and restartPolicy is Never",
            count_failure=True,
        )
    if policy == "ExitCode" and not is_retryable_exit_code(code):
        return Verdict(
            fail=True,
            reason=Reason.NON_RETRYABLE_EXIT_CODE.value,
            message=f"Pod {pod} failed ({_describe(outcome)}), not retryable under "
            "restartPolicy ExitCode",
            count_failure=True,
        )
    if failures_before + 1 > backoff_limit:
        return Verdict(
            fail=True,
            reason=Reason.BACKOFF_LIMIT_EXCEEDED.value,
            message=f"Pod {pod} failed ({_describe(outcome)}); {failures_before + 1} failures "
            f"exceed backoffLimit {backoff_limit}",
            count_failure=True,
        )
    return Verdict(fail=False, count_failure=True)


def _describe(outcome: Failure) -> str:
    if outcome.exit_code is None:
        return outcome.reason
    return f"exit code {outcome.exit_code}, {outcome.reason}"

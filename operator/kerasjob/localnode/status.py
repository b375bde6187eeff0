"""Pod status as a kubelet reports it, computed from what the agent knows of its container.

Everything here is pure: the agent keeps a `ContainerRecord` per Pod and turns it into the
`status` stanza it patches onto `pods/status`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

#: Backoff between in-place restarts (kubelet uses 10 s doubling to 5 min; a local node
#: running short training jobs wants quicker restarts).
BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 10.0
#: A container that ran this long without failing gets its backoff reset.
BACKOFF_RESET_AFTER_S = 60.0


def now() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(t: datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Terminated:
    """One finished run of a container."""

    exit_code: int
    started_at: datetime
    finished_at: datetime
    signal: int | None = None
    message: str = ""

    @property
    def reason(self) -> str:
        return "Completed" if self.exit_code == 0 else "Error"

    def as_state(self) -> dict:
        state: dict = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": rfc3339(self.started_at),
            "finishedAt": rfc3339(self.finished_at),
        }
        if self.signal is not None:
            state["signal"] = self.signal
        if self.message:
            state["message"] = self.message
        return {"terminated": state}


def exit_info(returncode: int) -> tuple[int, int | None]:
    """(exitCode, signal) from a Popen returncode; a signal N is reported as 128+N."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


@dataclass
class ContainerRecord:
    """What the agent knows about the single (main) container of a Pod."""

    name: str
    restart_count: int = 0
    running_since: datetime | None = None
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str = ""
    terminated: Terminated | None = None
    """The current state when the container is done for good (no restart coming)."""
    last_terminated: Terminated | None = None
    """The previous run, reported as lastState."""

    def state(self) -> dict:
        if self.running_since is not None:
            return {"running": {"startedAt": rfc3339(self.running_since)}}
        if self.terminated is not None:
            return self.terminated.as_state()
        waiting: dict = {"reason": self.waiting_reason or "ContainerCreating"}
        if self.waiting_message:
            waiting["message"] = self.waiting_message
        return {"waiting": waiting}


def next_action(restart_policy: str, exit_code: int) -> str:
    """'restart', 'Succeeded' or 'Failed' after the container exited with `exit_code`."""
    if restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0):
        return "restart"
    return "Succeeded" if exit_code == 0 else "Failed"


def restart_delay(consecutive_failures: int) -> float:
    """Backoff before the n-th consecutive restart (1-based): 1 s, 2 s, 4 s ... 10 s."""
    exponent = max(consecutive_failures - 1, 0)
    return min(BACKOFF_INITIAL_S * 2**exponent, BACKOFF_MAX_S)


@dataclass
class PodView:
    """Inputs of a Pod's status besides its container."""

    container: ContainerRecord
    image: str = ""
    phase: str = "Pending"
    pod_ip: str | None = None
    host_ip: str | None = None
    start_time: datetime | None = None
    previous_conditions: list[dict] = field(default_factory=list)
    message: str = ""
    reason: str = ""


def _condition(cond_type: str, ok: bool, previous: list[dict], at: datetime, reason: str = ""):
    status = "True" if ok else "False"
    for old in previous:
        # Keep lastTransitionTime unless the status actually changes, as the API expects.
        if old.get("type") == cond_type and old.get("status") == status:
            at_str = old.get("lastTransitionTime") or rfc3339(at)
            break
    else:
        at_str = rfc3339(at)
    cond = {"type": cond_type, "status": status, "lastTransitionTime": at_str}
    if reason:
        cond["reason"] = reason
    return cond


def build_status(view: PodView, at: datetime | None = None) -> dict:
    """The `status` of a Pod (for a strategic-merge patch of pods/status).

    Conditions are merged by type by the API server, so conditions set by others (for
    instance DisruptionTarget, set by the Eviction API) survive our patches.
    """
    at = at or now()
    c = view.container
    running = c.running_since is not None
    done = view.phase in ("Succeeded", "Failed")
    not_ready_reason = "PodCompleted" if done else ("" if running else "ContainersNotReady")
    conditions = [
        _condition(
            "PodReadyToStartContainers", view.pod_ip is not None, view.previous_conditions, at
        ),
        _condition("Initialized", True, view.previous_conditions, at),
        _condition("ContainersReady", running, view.previous_conditions, at, not_ready_reason),
        _condition("Ready", running, view.previous_conditions, at, not_ready_reason),
        _condition("PodScheduled", True, view.previous_conditions, at),
    ]
    container_status: dict = {
        "name": c.name,
        "image": view.image,
        "imageID": "",
        "ready": running,
        "started": running,
        "restartCount": c.restart_count,
        "state": c.state(),
        "lastState": c.last_terminated.as_state() if c.last_terminated else {},
    }
    status: dict = {
        "phase": view.phase,
        "conditions": conditions,
        "containerStatuses": [container_status],
        "hostIP": view.host_ip,
        "startTime": rfc3339(view.start_time),
    }
    if view.host_ip:
        status["hostIPs"] = [{"ip": view.host_ip}]
    if view.pod_ip:
        status["podIP"] = view.pod_ip
        status["podIPs"] = [{"ip": view.pod_ip}]
    if view.message:
        status["message"] = view.message
    if view.reason:
        status["reason"] = view.reason
    return status

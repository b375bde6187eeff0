"""A compact, immutable summary of one child Pod: what the controller needs, nothing more.

The Pod index (see `handlers`) stores a `PodView` per Pod instead of the whole object, so the
operator's memory stays small with thousands of Pods and the pure decision functions
(`restart_policy`, `reconcile`) never touch raw Kubernetes dictionaries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kerasjob import KIND
from kerasjob.api import labels
from kerasjob.planner.conditions import condition_if, condition_true
from kerasjob_contract import TERMINATION_MESSAGE_BYTES, TRAINER_CONTAINER, Env
from kerasjob_contract.times import parse_time

#: Pod condition types and the PodScheduled reason the controller reads (k8s.io/api core/v1).
READY = "Ready"
POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True)
class Termination:
    """How a container's process ended (containerStatus state.terminated)."""

    exit_code: int
    reason: str = ""
    signal: int | None = None
    message: str = ""
    """What the process left in its termination message (the chief: its last progress)."""
    finished_at: datetime | None = None
    """When it ended, as the kubelet recorded it (whole seconds)."""


@dataclass(frozen=True)
class PodView:
    """What the controller knows about a child Pod."""

    name: str
    namespace: str
    uid: str
    job_name: str
    owner_uid: str | None
    role: str
    index: int
    resource_version: int = 0
    """metadata.resourceVersion: the newest of two incarnations of a name has the larger one."""
    phase: str = "Pending"
    ready: bool = False
    pod_ip: str | None = None
    deletion_timestamp: datetime | None = None
    restart_count: int = 0
    """restartCount of the trainer container: in-place restarts by the kubelet."""
    last_termination: Termination | None = None
    """The trainer container's lastState.terminated: why it was last restarted in place."""
    termination: Termination | None = None
    """The trainer container's state.terminated: how it ended (Pod Succeeded or Failed)."""
    metrics_port: int | None = None
    """The trainer's KERASJOB_METRICS_PORT (its progress endpoint), when set in its env."""
    status_reason: str = ""
    """status.reason, e.g. Evicted, Preempting, NodeLost, Shutdown."""
    disruption_reason: str = ""
    """Reason of a True DisruptionTarget condition (EvictionByEvictionAPI, ...), else ''."""
    node_name: str = ""
    """spec.nodeName: the node it is bound to ('' while unscheduled)."""
    scheduled_since: datetime | None = None
    """When its PodScheduled condition turned True (bound to a node)."""
    unschedulable_since: datetime | None = None
    """When its PodScheduled condition turned False with reason Unschedulable (no node
    fits), while it still is; else None."""
    waiting: str = ""
    """Why it cannot start, "<Reason>: <message>": not schedulable (a missing claim, no node
    fits), or its trainer's image or config cannot be had; else ''."""
    priority: int = 0
    """spec.priority (its PriorityClass's value, set at admission)."""
    requests: frozenset[str] = frozenset()
    """The resources it asks for (requests or limits of any container, or the Pod's own)."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """spec.nodeSelector, sorted."""
    claims: bool = False
    """Whether it asks for devices through resource claims (DRA)."""

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def ended(self) -> bool:
        """Finished, or its trainer exited non-zero: our Pods' restartPolicy is Never, so
        nothing runs the trainer again, yet the kubelet marks the Pod Failed only once it
        has torn the Pod's sandbox down (1.1 s after the exit on the real node, measured
        2026-11-26): the planner need not wait for that to re-create it."""
        return self.finished or (self.termination is not None and self.termination.exit_code != 0)

    @property
    def running_ready(self) -> bool:
        return self.phase == "Running" and self.ready and not self.deleting

    @property
    def exited_ok(self) -> bool:
        """Its trainer has exited 0 and the kubelet has not yet marked the Pod Succeeded
        (its Ready condition turns False first; our Pods' restartPolicy is Never, so it
        will): finishing, not restarting."""
        return (
            self.phase == "Running"
            and not self.deleting
            and self.termination is not None
            and self.termination.exit_code == 0
        )


def _termination(state: Mapping[str, Any] | None) -> Termination | None:
    terminated = (state or {}).get("terminated")
    if not terminated:
        return None
    signal = terminated.get("signal")
    return Termination(
        exit_code=int(terminated.get("exitCode", 0)),
        reason=str(terminated.get("reason") or ""),
        signal=int(signal) if signal is not None else None,
        message=str(terminated.get("message") or "")[:TERMINATION_MESSAGE_BYTES],
        finished_at=parse_time(terminated.get("finishedAt")),
    )


def _trainer_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses: list[Mapping[str, Any]] = (pod.get("status") or {}).get("containerStatuses") or []
    containers: list[Mapping[str, Any]] = (pod.get("spec") or {}).get("containers") or []
    names = [c.get("name") for c in containers]
    wanted = TRAINER_CONTAINER if TRAINER_CONTAINER in names else (names[0] if names else None)
    for status in statuses:
        if status.get("name") == wanted:
            return status
    return statuses[0] if statuses else {}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _metrics_port(pod: Mapping[str, Any]) -> int | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    trainer = next((c for c in containers if c.get("name") == TRAINER_CONTAINER), None)
    trainer = trainer or (containers[0] if containers else {})
    for env in trainer.get("env") or []:
        if env.get("name") == Env.METRICS_PORT.value:
            value = _int(env.get("value"))
            return value or None
    return None


#: Container waiting reasons that mean the Pod will not start without a change.
STUCK_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def _waiting(conditions: list[Mapping[str, Any]], trainer: Mapping[str, Any]) -> str:
    c = condition_if(conditions, POD_SCHEDULED, "False")
    if c is not None:
        return f"{c.get('reason') or UNSCHEDULABLE}: {c.get('message') or ''}".strip()
    waiting = (trainer.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in STUCK_WAITING_REASONS:
        return f"{waiting['reason']}: {waiting.get('message') or ''}".strip()
    return ""


def _unschedulable_since(conditions: list[Mapping[str, Any]]) -> datetime | None:
    c = condition_if(conditions, POD_SCHEDULED, "False")
    if c is None or c.get("reason") != UNSCHEDULABLE:
        return None
    return parse_time(c.get("lastTransitionTime"))


def _owner_uid(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("controller"):
            return str(ref.get("uid"))
    return None


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """Summarise a Pod; None when it is not a KerasJob child (no job/role labels)."""
    meta = pod.get("metadata") or {}
    pod_labels = meta.get("labels") or {}
    job_name = pod_labels.get(labels.JOB_NAME)
    role = pod_labels.get(labels.REPLICA_TYPE)
    if not job_name or not role:
        return None
    try:
        index = int(pod_labels.get(labels.REPLICA_INDEX, "0"))
    except ValueError:
        return None
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    disruption = condition_if(conditions, DISRUPTION_TARGET, "True")
    trainer = _trainer_status(pod)
    return PodView(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        job_name=str(job_name),
        owner_uid=_owner_uid(meta),
        role=str(role),
        index=index,
        resource_version=_int(meta.get("resourceVersion")),
        phase=str(status.get("phase") or "Pending"),
        ready=condition_true(conditions, READY),
        pod_ip=status.get("podIP") or None,
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        restart_count=int(trainer.get("restartCount") or 0),
        last_termination=_termination(trainer.get("lastState")),
        termination=_termination(trainer.get("state")),
        metrics_port=_metrics_port(pod),
        status_reason=str(status.get("reason") or ""),
        disruption_reason=(
            str(disruption.get("reason") or DISRUPTION_TARGET) if disruption else ""
        ),
        node_name=str((pod.get("spec") or {}).get("nodeName") or ""),
        scheduled_since=parse_time(
            (condition_if(conditions, POD_SCHEDULED, "True") or {}).get("lastTransitionTime")
        ),
        unschedulable_since=_unschedulable_since(conditions),
        waiting=_waiting(conditions, trainer)[:1024],
        **_placement(pod.get("spec") or {}),
    )


def _requests(spec: Mapping[str, Any]) -> frozenset[str]:
    """The resource names any container (or the Pod itself) asks a non-zero amount of."""
    names: set[str] = set()
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    for resources in [spec.get("resources"), *(c.get("resources") for c in containers)]:
        for kind in ("requests", "limits"):
            for name, amount in ((resources or {}).get(kind) or {}).items():
                if str(amount).strip() not in ("0", "0m", ""):
                    names.add(str(name))
    return frozenset(names)


def _placement(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a Pod's spec says where it can go and what it takes there."""
    selector = spec.get("nodeSelector") or {}
    return {
        "priority": _int(spec.get("priority")),
        "requests": _requests(spec),
        "node_selector": tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        "claims": bool(spec.get("resourceClaims")),
    }

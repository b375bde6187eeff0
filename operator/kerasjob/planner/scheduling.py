"""What the scheduling integrations (Kueue, native gang scheduling) tell the planner: plain
values, below the planner's vocabulary (`planning`) and the integrations alike, so that the
planner never imports a feature.

* `Gate` -- Kueue's word on running the job now (`kueue.gate` makes it);
* `Gang`, `PodGroupState`, `GangView` -- the job's gang and its PodGroups as indexed
  (`gang.view` makes the view, the planner picks the `Gang`: `gang_for`), and what the
  PodGroup's verdict means for the job's Running condition (`explain`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kerasjob.api import Reason

#: The PodGroup condition reason for a gang that does not fit (k8s.io/api scheduling/v1alpha2).
UNSCHEDULABLE = "Unschedulable"
#: The job's reason while its gang cannot be placed.
REASON = Reason.GANG_UNSCHEDULABLE.value


@dataclass(frozen=True)
class Gate:
    """What Kueue says about running a job now: the planner's input."""

    admitted: bool
    reason: str
    """Queued (never admitted yet, or waiting again), Admitted, or Evicted."""
    message: str
    workers: int | None = None
    """An elastic job's workers Kueue admitted (its current slice; `admitted_workers`):
    the job never runs more."""
    recheck_after: float | None = None
    """Look again after this many seconds even if nothing changes (`gate_of`)."""


@dataclass(frozen=True)
class Gang:
    """The PodGroup (and Workload, same name) a job's Pods must be created in."""

    name: str
    min_count: int


@dataclass(frozen=True)
class PodGroupState:
    """What the controller knows of one of a job's PodGroups (from its index)."""

    name: str
    uid: str
    min_count: int | None
    scheduled: bool | None
    """PodGroupScheduled: True, False, or None (not written yet)."""
    reason: str = ""
    message: str = ""
    deleting: bool = False


@dataclass(frozen=True)
class GangView:
    """The job's gang objects as indexed (the planner's input, set when gang scheduling is
    on): PodGroups and Workloads owned by this incarnation of the job, by name."""

    pod_groups: tuple[PodGroupState, ...] = ()
    workloads: tuple[str, ...] = ()

    def pod_group(self, name: str) -> PodGroupState | None:
        return next((p for p in self.pod_groups if p.name == name), None)


def gang_for(job_name: str, job_uid: str, min_count: int, epoch: int = 0) -> Gang:
    """The gang of a job running ``min_count`` Pods; ``epoch``: its resize count (an elastic
    job's new size is a new PodGroup: the spec is immutable, and the old one may still be
    held by its finalizer). ``<job>-gang-<uid prefix>[-<epoch>]``: at most 253 characters."""
    name = f"{job_name[:230]}-gang-{job_uid[:8]}"
    return Gang(f"{name}-{epoch}" if epoch else name, min_count)


def shortage(pod_messages: Iterable[str]) -> str:
    """Of the scheduler's messages on a gang's waiting Pods, the one that says what is short
    (``0/4 nodes are available: 4 Insufficient cpu``); the others only say that they wait
    for the rest of the gang. '' when there is none."""
    messages = [m for m in pod_messages if m]
    return next(
        (m for m in messages if "nodes are available" in m), messages[0] if messages else ""
    )


def explain(
    view_: GangView | None, gang: Gang | None, pod_message: str = ""
) -> tuple[str, str] | None:
    """Why the job's Pods wait, when its gang cannot be placed: (reason, message) for the
    job's Running condition; None when the PodGroup does not say so. ``pod_message``: what
    the scheduler says of one of its waiting Pods (which resource is short)."""
    if view_ is None or gang is None:
        return None
    group = view_.pod_group(gang.name)
    if group is None or group.scheduled is not False:
        return None
    why = group.message or group.reason
    message = (
        f"the gang of {gang.min_count} Pods cannot be placed together "
        f"(PodGroup {gang.name}: {group.reason or UNSCHEDULABLE}: {why}); no Pod is bound "
        "until all fit"
    )
    if pod_message:
        message += f": {pod_message}"
    return REASON, message

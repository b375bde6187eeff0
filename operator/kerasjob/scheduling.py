"""What the scheduling integrations (Kueue, native gang scheduling) tell the planner: plain
values, below the planner's vocabulary (`planning`) and the integrations alike, so that the
planner never imports a feature.

* `Gate` -- Kueue's word on running the job now (`kueue.gate` makes it);
* `Gang`, `PodGroupState`, `GangView` -- the job's gang and its PodGroups as indexed
  (`gang.view` makes the view, the planner picks the `Gang`).
"""

from __future__ import annotations

from dataclasses import dataclass


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

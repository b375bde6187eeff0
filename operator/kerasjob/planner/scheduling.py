"""What the scheduling integrations tell the planner, and what it tells them back: plain
values and one protocol, below the planner's vocabulary (`planning`) and the integrations
alike, so that the planner never names an integration. An integration's `view`
(`integrations.integration`) puts them into the `JobView`:

* `Gate` (``JobView.gate``) -- an admission integration's word on running the job now: a
  queue that holds the job until it admits it (Kueue: `kueue.gate`), and how many workers
  of an elastic job it admitted;
* `Placement` (``JobView.placement``) -- an integration that places the job's Pods all at
  once (native gang scheduling: `gang.GangView`): the planner asks it for the `PodGroup` its
  Pods are created in (``Plan.pod_group``) and why they wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Gate:
    """An admission integration's word on running a job now: the planner's input."""

    admitted: bool
    reason: str
    """Queued (never admitted yet, or waiting again), Admitted, or Evicted."""
    message: str
    workers: int | None = None
    """An elastic job's workers admitted (its current slice): the job never runs more."""
    recheck_after: float | None = None
    """Look again after this many seconds even if nothing changes."""
    by: str = field(kw_only=True)
    """Who admits, for the messages (``Kueue``)."""


@dataclass(frozen=True)
class PodGroup:
    """The group an active job's Pods are created in, placed all at once or not at all."""

    name: str
    min_count: int


class Placement(Protocol):
    """An integration that places a job's Pods as one group."""

    def pod_group_for(self, min_count: int, epoch: int) -> PodGroup:
        """The group of ``min_count`` Pods; ``epoch``: the job's resize count (each size
        of an elastic job is a group of its own)."""
        ...

    def explain(
        self, group: PodGroup | None, pod_messages: Sequence[str]
    ) -> tuple[str, str] | None:
        """Why the Pods of ``group`` wait, as (reason, message) for the job's Running
        condition; None when the integration does not say. ``pod_messages``: what the
        scheduler says of the job's waiting Pods."""
        ...

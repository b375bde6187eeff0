"""What one run of the planner (`reconcile.plan`) works on: `PlanState`, the accumulator its
step functions share, and its small helpers (set a condition, post an Event, ask to be
looked at again, delete a Pod).

Every step (`accounting`, `elastic`, `running`, `finishing`, `suspension`, `housekeeping`)
is a plain function taking the state as its first argument: what a step reads and writes is
a declared, typed field here, never an attribute another step happens to set.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from kerasjob.api import ConditionType, wire
from kerasjob.planner import conditions, scheduling
from kerasjob.planner import restart_policy as rp
from kerasjob.planner.planning import Action, DeletePod, Event, JobView, newest_incarnations
from kerasjob.planner.podview import PodView
from kerasjob.planner.rejection import Rejection


@dataclass
class PlanState:
    """One plan in the making: the inputs, the status being built, what to do."""

    job: JobView
    """The job; an elastic job's ``tasks`` narrowed to its current size (`elastic`)."""
    now: datetime
    force_delete_after: float
    """Seconds past a Pod's deletionTimestamp before it is deleted with grace period 0."""
    rejection: Rejection | None
    """The API server's last refusal to create a child of this generation of the job."""
    old: wire.Status
    """The stored status, as given (read only)."""
    status: wire.Status
    """The new status: a deep copy of the old one, changed by the steps. It is the only copy
    of its fields: `conditions`, `tracked`, `disruptions` and `failures` below read and write
    it in place."""
    owned: dict[str, PodView]
    """The job's Pods by name (the newest incarnation of each)."""
    stale: list[PodView]
    """Pods of an older job of the same name."""
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeues: list[float] = field(default_factory=list)
    fail_verdict: rp.Verdict | None = None
    """The first outcome that failed the job (`accounting`)."""
    pod_group: scheduling.PodGroup | None = None
    """With a placement integration: the group of the active job's Pods (Plan.pod_group)."""
    size: int | None = None
    """An elastic job's current size (None: not elastic)."""
    resized_now: bool = False
    """A resize was decided in this plan: its Pods are going, none counts as ready."""
    grow_to: int | None = None
    """Under an admission gate: a grow waiting to be admitted this many workers (Plan.grow_to)."""

    @classmethod
    def start(
        cls,
        job: JobView,
        old_status: Mapping[str, Any],
        pods: Iterable[PodView],
        now: datetime,
        force_delete_after: float,
        rejection: Rejection | None,
    ) -> PlanState:
        """The state before any step: the stored status copied, the Pods sorted out."""
        old = cast(wire.Status, old_status)
        status = cast(wire.Status, copy.deepcopy(dict(old_status)))
        restarts = status.get("restarts") or {}
        status["restarts"] = {
            "disruptions": int(restarts.get("disruptions", 0)),
            "failures": int(restarts.get("failures", 0)),
        }
        newest = newest_incarnations(pods)
        return cls(
            job=job,
            now=now,
            force_delete_after=force_delete_after,
            # A refusal of an older generation's child says nothing about this one.
            rejection=(
                rejection
                if rejection is not None and rejection.generation == job.generation
                else None
            ),
            old=old,
            status=status,
            owned={p.name: p for p in newest if p.owner_uid == job.uid},
            stale=[p for p in newest if p.owner_uid is not None and p.owner_uid != job.uid],
        )

    @property
    def prev_phase(self) -> str | None:
        """The stored status's phase."""
        return self.old.get("phase")

    @property
    def conditions(self) -> list[wire.Condition]:
        """status.conditions (an empty list is dropped by `housekeeping.complete_status`)."""
        return self.status.setdefault("conditions", [])

    @conditions.setter
    def conditions(self, value: list[wire.Condition]) -> None:
        self.status["conditions"] = value

    @property
    def tracked(self) -> dict[str, wire.TrackedPod]:
        """status.trackedPods (kept for wanted tasks only by `housekeeping.complete_status`)."""
        return self.status.setdefault("trackedPods", {})

    @tracked.setter
    def tracked(self, value: dict[str, wire.TrackedPod]) -> None:
        self.status["trackedPods"] = value

    @property
    def disruptions(self) -> int:
        """status.restarts.disruptions."""
        return self.status["restarts"]["disruptions"]

    @disruptions.setter
    def disruptions(self, value: int) -> None:
        self.status["restarts"]["disruptions"] = value

    @property
    def failures(self) -> int:
        """status.restarts.failures."""
        return self.status["restarts"]["failures"]

    @failures.setter
    def failures(self, value: int) -> None:
        self.status["restarts"]["failures"] = value

    def cond(
        self,
        type_: ConditionType,
        status: bool,
        reason: str,
        message: str,
        *,
        add_false: bool = False,
    ) -> None:
        """Set condition ``type_`` (`conditions.set_condition`, typed over plain dicts)."""
        self.conditions = conditions.set_condition(
            self.conditions,
            type_.value,
            status,
            reason,
            message,
            now=self.now,
            generation=self.job.generation,
            add_false=add_false,
        )

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def requeue(self, seconds: float) -> None:
        """Look at the job again within ``seconds`` (the plan keeps the soonest)."""
        self.requeues.append(max(0.0, seconds))

    def delete(self, pod: PodView, *, force: bool = False) -> None:
        """Delete ``pod`` unless it is already going; ``force`` (grace period 0): also one
        that is going with its grace period."""
        if force or not pod.deleting:
            self.actions.append(DeletePod(pod.name, pod.uid, force=force))

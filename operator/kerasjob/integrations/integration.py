"""The one shape every integration with a scheduler (Kueue, native gang scheduling) has:
the controller holds a list of `Integration`s and calls the same hooks on each, instead of
branching per feature.

Modelled on Kueue's job framework (pkg/controller/jobframework): there a `GenericJob` adapts
one job to the reconciler, and optional interfaces (``JobWithManagedBy``,
``JobWithReclaimablePods`` ...) add capabilities the reconciler checks for. Here:

* `Integration.view` -- before planning, given the job's body and model (None: invalid):
  the integration's word in the job's `JobView` (Kueue's gate, the gang's PodGroups) from
  its own indices, and a `JobIntegration`: its part of this one snapshot of the job (None:
  the job is none of its business);
* `JobIntegration.before_pods` -- after the status write, before the plan's Pods are
  created: what has to exist first (the gang's PodGroup) or be read (Kueue's flavors);
  returns the `PodUpdate` applied to each Pod manifest;
* `JobIntegration.after_plan` -- after the status write: the integration's own objects
  follow the plan (Workloads, PodGroups); returns the `Event`s to post;
* `ManagedElsewhere` (optional) -- for a job whose spec.managedBy names another
  controller: what the integration still does for it (Kueue: the Workload MultiKueue
  dispatches).

Each integration decides with pure functions (`kueue.decisions`, `gang`) and does its I/O
in one place (`kueue.sync`, `gang.sync`): one package per integration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from kerasjob.api import KerasJob
from kerasjob.k8s.workqueue import Key
from kerasjob.planner.planning import Action, Event, JobView, Plan


class PodUpdate(Protocol):
    """What an integration adds to a Pod manifest before it is created (in place).
    ``probe``: an elastic job's probe Pod (``role`` is then the worker's)."""

    def __call__(self, pod: dict[str, Any], role: str, *, probe: bool) -> None: ...


class JobIntegration(Protocol):
    """One integration's part of one snapshot of one job."""

    async def before_pods(self, plan: Plan, actions: Sequence[Action]) -> PodUpdate | None: ...

    async def after_plan(self, plan: Plan, pods_left: int, now: datetime) -> list[Event]: ...


@runtime_checkable
class ManagedElsewhere(Protocol):
    """Optional: what the integration does for a job another controller runs."""

    async def managed_elsewhere(self, plan: Plan, now: datetime) -> list[Event]: ...


class Integration(Protocol):
    """A scheduler integration the controller is started with."""

    def view(
        self, key: Key, body: Mapping[str, Any], model: KerasJob | None, job: JobView
    ) -> tuple[JobView, JobIntegration | None]: ...


async def pod_updates(
    parts: Sequence[JobIntegration], plan: Plan, actions: Sequence[Action]
) -> list[PodUpdate]:
    """Every integration's `before_pods`, in order: the updates to apply to each Pod."""
    updates = [await p.before_pods(plan, actions) for p in parts]
    return [u for u in updates if u is not None]

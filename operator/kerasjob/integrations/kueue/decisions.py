"""What the operator writes to a job's Kueue Workloads, decided purely: `decide` returns the
`WorkloadAction`s due, in order, each with the Event to post once it went through; the I/O
(`kueue.sync`) carries them out.

Per reconcile, after the job's status is written: create its Workload if there is none,
give the quota back after an eviction once the job's Pods are gone, keep PodsReady, mark
the Workload Finished when the job ended, replace it when the job's shape changed.

An elastic job's Workload slices (`slices`): the current one follows a shrink (its worker
count lowered in place, or, when Kueue refuses that, the workers given back through
reclaimablePods); a grow the planner cannot make yet (``Plan.grow_to``) gets a slice of
that size replacing the current one, withdrawn when the grow is no longer wanted; an older
slice still holding quota once a newer one is admitted is finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kerasjob.api import Reason
from kerasjob.integrations.kueue.admission import gate_of
from kerasjob.integrations.kueue.names import (
    WORKER,
    admitted_workers,
    finished,
    pod_set_counts,
    reclaimable,
    reserved,
    slice_name,
    slice_serial,
    workload_name,
)
from kerasjob.integrations.kueue.slicing import Slices
from kerasjob.integrations.kueue.statuses import (
    finished_status,
    pods_ready_status,
    reclaimable_status,
    release_status,
    replaced_status,
)
from kerasjob.integrations.kueue.workloads import matches, same_shape
from kerasjob.planner.planning import Event
from kerasjob.planner.status import RUNNING, SUCCEEDED, TERMINAL_PHASES

Workload = Mapping[str, Any]


def _normal(reason: Reason, message: str) -> Event:
    return Event("Normal", reason.value, message)


@dataclass(frozen=True)
class CreateWorkload:
    """Create the job's Workload (an elastic job's: a slice of ``size`` workers)."""

    name: str
    size: int | None
    replaces: Workload | None
    """A grow slice: the slice it replaces once admitted."""
    need_priority: bool
    """A WorkloadPriorityClass named by the job but missing stops it (else: made without)."""
    event: Event


@dataclass(frozen=True)
class DeleteWorkload:
    workload: Workload
    event: Event | None = None


@dataclass(frozen=True)
class PatchWorkloadStatus:
    """A merge patch of the Workload's status, conditional on its resourceVersion."""

    workload: Workload
    patch: Mapping[str, Any]
    event: Event | None = None


@dataclass(frozen=True)
class ResizeWorkload:
    """Set the worker podSet's count; ``refused``: what to do when Kueue's webhook refuses."""

    workload: Workload
    workers: int
    have: int
    event: Event
    refused: tuple[WorkloadAction, ...] = ()


WorkloadAction = CreateWorkload | DeleteWorkload | PatchWorkloadStatus | ResizeWorkload


@dataclass(frozen=True)
class JobFacts:
    """What the decisions read of the job and its plan."""

    name: str
    uid: str
    queue: str
    phase: str | None
    message: str
    """The job's terminal condition's message (for Finished)."""
    counts: Mapping[str, int] | None
    """Replicas per role (an elastic job's at ``size``); None: the job is invalid."""
    size: int | None = None
    """An elastic job's current size; None: not elastic."""
    grow_to: int | None = None
    pods_left: int = 0

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


def decide(
    job: JobFacts, workload: Workload | None, found: Slices | None, now: datetime
) -> list[WorkloadAction]:
    """The Workload writes due (an elastic job: from its ``found`` slices)."""
    if job.size is not None and found is not None:
        workload = found.current
        if found.replacing is not None and gate_of("", found, now).recheck_after:
            return []  # Kueue is admitting the current slice: its next write wakes us
    if workload is None:
        if job.terminal or job.counts is None:
            return []
        name = workload_name(job.name, job.uid)
        created = f"Kueue Workload {name} created in LocalQueue {job.queue}"
        return [
            CreateWorkload(name, job.size, None, True, _normal(Reason.WORKLOAD_CREATED, created))
        ]
    actions: list[WorkloadAction] = []
    if job.size is not None and found is not None:
        actions, written = slice_actions(job, found, now)
        if written:  # the current slice changed: its next version wakes the job
            return actions
    return actions + workload_actions(job, workload, now)


def workload_actions(job: JobFacts, workload: Workload, now: datetime) -> list[WorkloadAction]:
    """The job's (or its current slice's) own Workload: Finished, replaced, quota given back
    after an eviction, PodsReady."""
    if job.terminal:
        assert job.phase is not None
        patch = finished_status(workload, job.phase == SUCCEEDED, job.message or job.phase, now)
        return [PatchWorkloadStatus(workload, patch)] if patch is not None else []
    if job.counts is not None and not (
        same_shape(workload, job.counts) if job.size is not None else matches(workload, job.counts)
    ):
        # Its podSets are immutable: a new one is made on the next reconcile.
        name = workload["metadata"]["name"]
        msg = f"the job's roles or replicas changed: Workload {name} replaced"
        return [DeleteWorkload(workload, _normal(Reason.WORKLOAD_REPLACED, msg))]
    if job.pods_left == 0:
        patch = release_status(workload, now)
        if patch is not None:
            name = workload["metadata"]["name"]
            msg = f"Pods stopped after the eviction; Workload {name} gives its quota back"
            return [PatchWorkloadStatus(workload, patch, _normal(Reason.QUOTA_RELEASED, msg))]
    patch = pods_ready_status(workload, job.phase == RUNNING, now)
    return [PatchWorkloadStatus(workload, patch)] if patch is not None else []


def slice_actions(job: JobFacts, found: Slices, now: datetime) -> tuple[list[WorkloadAction], bool]:
    """An elastic job's slices follow its size: the actions, and whether they write the
    current slice (its next version wakes the job)."""
    current = found.current
    assert current is not None and job.size is not None
    cur_name = current["metadata"]["name"]
    actions: list[WorkloadAction] = []
    for old in found.replaced:  # the scheduler did not finish it (the gate off)
        patch = replaced_status(old, current, now)
        if patch is not None:
            msg = (
                f"Workload slice {old['metadata']['name']} finished: replaced by {cur_name}, "
                "admitted by Kueue"
            )
            actions.append(
                PatchWorkloadStatus(old, patch, _normal(Reason.WORKLOAD_SLICE_REPLACED, msg))
            )
    want = None if job.terminal else job.grow_to
    actions += [DeleteWorkload(extra) for extra in found.extra]
    actions += _grow(job, found, want)
    if job.terminal or job.counts is None:
        return actions, False
    follow, written = _follow_size(current, job.size, want)
    return actions + follow, written


def _grow(job: JobFacts, found: Slices, want: int | None) -> list[WorkloadAction]:
    """Withdraw a pending grow slice no longer wanted, or ask for one."""
    current, pending = found.current, found.pending
    assert current is not None
    if pending is not None and (want is None or pod_set_counts(pending).get(WORKER) != want):
        why = "the grow is no longer wanted" if want is None else f"{want} workers wanted"
        msg = (
            f"Workload slice {pending['metadata']['name']} withdrawn before Kueue admitted "
            f"it: {why}"
        )
        return [DeleteWorkload(pending, _normal(Reason.WORKLOAD_SLICE_WITHDRAWN, msg))]
    if (
        pending is None
        and want is not None
        and reserved(current)
        and want > admitted_workers(current)
    ):
        name = slice_name(job.name, job.uid, slice_serial(current) + 1)
        msg = (
            f"Growing to {want} workers waits for Kueue to admit Workload slice {name} "
            f"(replacing {current['metadata']['name']}, {admitted_workers(current)} workers)"
        )
        event = _normal(Reason.GROW_WAITING_FOR_KUEUE, msg)
        return [CreateWorkload(name, want, current, False, event)]
    return []


def _follow_size(
    current: Workload, size: int, want: int | None
) -> tuple[list[WorkloadAction], bool]:
    """The current slice's worker count follows the job's ``size``."""
    name = current["metadata"]["name"]
    have = pod_set_counts(current).get(WORKER, 0)
    if reserved(current):
        admitted = admitted_workers(current)
        if admitted <= size or want is not None:
            return [], False
        # Kueue refuses an admitted Workload's smaller count (its gate
        # ElasticJobsViaWorkloadSlices off): give the workers back as reclaimable.
        fallback: list[WorkloadAction] = []
        patch = reclaimable_status(current, size)
        if patch is not None:
            msg = (
                f"Kueue refused to lower Workload {name}'s worker count (feature gate "
                f"ElasticJobsViaWorkloadSlices off?): {have - size} workers' quota given "
                "back through status.reclaimablePods; a grow needs a new admission of the "
                "bigger size"
            )
            event = Event("Warning", Reason.WORKLOAD_SHRINK_REFUSED.value, msg)
            fallback.append(PatchWorkloadStatus(current, patch, event))
        if reclaimable(current):
            return fallback, True
        msg = (
            f"Workload {name} follows the shrink: {admitted} -> {size} workers, Kueue "
            "charges the smaller size"
        )
        event = _normal(Reason.WORKLOAD_RESIZED, msg)
        return [ResizeWorkload(current, size, admitted, event, tuple(fallback))], True
    if have != size and not finished(current):
        msg = f"Workload {name} (not admitted) follows the job's size: {have} -> {size} workers"
        refused = (
            f"Kueue refused to change Workload {name}'s worker count: replaced by one of "
            f"{size} workers"
        )
        # Not expected unadmitted: a new one is made on the next reconcile.
        delete = DeleteWorkload(current, _normal(Reason.WORKLOAD_REPLACED, refused))
        return [
            ResizeWorkload(current, size, have, _normal(Reason.WORKLOAD_RESIZED, msg), (delete,))
        ], True
    return [], False

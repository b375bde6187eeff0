"""Elastic jobs (spec.elastic): shrink when a worker's capacity is gone, grow when it returns.

The current size is ``status.elastic.workers`` (the preferred size, spec.workers, until the
first resize): the planner's tasks and every Pod's TF_CONFIG have that many workers.

- **Shrink**: a worker's Pod unschedulable (PodScheduled False, Unschedulable) for
  ``shrinkAfterSeconds`` → the job shrinks by the number of such workers, not below
  ``minWorkers``. Survivors of a lost worker are by then waiting for their group (they exited
  43 and were re-created, or block in the collective), so their state is the last backup.
- **Grow**: while the job runs below its preferred size, with every Pod running and ready,
  it keeps one probe Pod per missing worker: the worker's Pod spec (resources, node
  selector, affinity, tolerations, volumes) with a sleeping container. The scheduler retries
  a pending Pod whenever the cluster changes (a node added, uncordoned, Pods gone), and a
  cluster autoscaler scales up for it; no other component can say whether a Pod of exactly
  this shape fits. Probes have the lowest priority (-1): a Pod of default priority pre-empts
  one that holds its place. A probe bound for PROBE_SETTLE_SECONDS means capacity: after
  ``resizeCooldownSeconds`` since the last resize the job grows by the bound probes. The
  grow deletes every Pod with its grace period: SIGTERM makes the group save at one step and
  exit 42, so nothing is redone (a safe point).
- **An admission gate** (``JobView.gate``, e.g. a queue's): the job never runs more workers
  than were admitted (``Gate.workers``). A grow first asks the admitting integration for
  the bigger size (``Plan.grow_to``) and happens once it is admitted; a shrink is followed
  by the integration (which then charges the smaller size).
- A resize deletes every Pod of the job and marks them counted (like a suspension: neither a
  failure nor a disruption), records itself in ``status.elastic`` (workers, resizes, the last
  10 resizes), posts a ``Resized`` Event, and the Pods come back together at the new size.

The planner's steps here (`init_size`, `shrink_if_capacity_lost`, `grow_if_capacity_returned`
and their helpers) are functions over `planstate.PlanState`, composed by `reconcile.plan` and
`running.active`; `waiting_jobs`/`WaitingJobs` are the controller's, `probe_name` the
children's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from kerasjob.api import Reason, wire
from kerasjob.planner import contention
from kerasjob.planner.planning import CreateProbe, DeletePod, ElasticPolicy, Task
from kerasjob.planner.planstate import PlanState
from kerasjob.planner.podview import PodView
from kerasjob_contract.times import format_time, parse_time

#: The replica-type label value of probe Pods (never a TF_CONFIG role).
PROBE_ROLE = "probe"
#: Resizes kept in status.elastic.history.
HISTORY = 10
#: The grace period of the Pods a shrink deletes. A group short of a worker trains no step:
#: its workers wait inside TensorFlow's collective set-up, where a SIGTERM is not acted on
#: until the call returns, so their own grace period (60 s) would pass in full (measured on
#: the real node: the Pods at the smaller size came 60 s after the shrink). Their state is
#: the last backup either way.
SHRINK_GRACE_SECONDS = 1
#: How long a probe must stay bound before it counts as capacity. Probes have the lowest
#: priority (`acting.PROBE_PRIORITY`): one bound to a place that another job's restarting
#: worker needs is pre-empted within moments, and must not make its job grow.
PROBE_SETTLE_SECONDS = 5.0
WORKER = "worker"
#: The longest another job's waiting Pod holds an elastic job's growth back. The scheduler
#: retries a Pod it could not place at the latest after 5 minutes
#: (podMaxInUnschedulablePodsDuration), so by then the waiting Pod has been tried with the
#: probes' places taken; a probe has the lowest priority, and that Pod pre-empts it when it
#: fits there: its claim is kept. A Pod that still waits waits for something growth does
#: not take.
GIVE_WAY_SECONDS = 300.0


def waiting_jobs(pods: Mapping[Any, Iterable[PodView]]) -> dict[Any, tuple[PodView, ...]]:
    """Per job, its Pods (not probes, not going) that no node fits now. Whether one holds
    an elastic job's growth back is `contention.competes`' to say: while one could use the
    place a probe would take, probes give theirs back (the scheduler's own pre-emption of a
    bound probe by a pending Pod may wait minutes, as a Pod that failed to schedule is
    retried only on cluster events that can help it, or after 5 minutes)."""
    waiting: dict[Any, tuple[PodView, ...]] = {}
    for key, views in pods.items():
        stuck = tuple(
            p
            for p in views
            if p.unschedulable_since is not None and p.role != PROBE_ROLE and not p.deleting
        )
        if stuck:
            waiting[key] = stuck
    return waiting


class WaitingJobs:
    """The jobs that had a Pod no node fits within the last PROBE_SETTLE_SECONDS, with the
    last such Pods seen (the controller's, for elastic jobs): a job between the two Pods of
    a restart is not waiting at that moment, so one look would let a probe take its place.
    The Pod index is scanned at most every 0.5 s."""

    def __init__(self) -> None:
        self.scanned = float("-inf")
        self.seen: dict[Any, tuple[float, tuple[PodView, ...]]] = {}

    def get(
        self, pods: Mapping[Any, Iterable[PodView]], now: float
    ) -> Mapping[Any, tuple[PodView, ...]]:
        if now - self.scanned > 0.5:
            self.scanned = now
            for key, stuck in waiting_jobs(pods).items():
                self.seen[key] = (now, stuck)
            horizon = now - PROBE_SETTLE_SECONDS
            self.seen = {k: v for k, v in self.seen.items() if v[0] >= horizon}
        return {k: stuck for k, (_, stuck) in self.seen.items()}

    def others(
        self, pods: Mapping[Any, Iterable[PodView]], now: float, key: Any
    ) -> tuple[PodView, ...]:
        """The waiting Pods of every job but ``key``."""
        return tuple(p for k, stuck in self.get(pods, now).items() if k != key for p in stuck)


def probe_name(job_name: str, index: int) -> str:
    return f"{job_name}-{PROBE_ROLE}-{index}"


def tasks_at(tasks: tuple[Task, ...], workers: int) -> tuple[Task, ...]:
    """The job's tasks with only the first ``workers`` workers."""
    return tuple(t for t in tasks if t.role != WORKER or t.index < workers)


# -- the size ---------------------------------------------------------------------------------


def init_size(s: PlanState) -> None:
    """Narrow the job's tasks to its current size (once, before any other step)."""
    policy = s.job.elastic
    if policy is None:
        return
    recorded = (s.status.get("elastic") or {}).get("workers")
    size = recorded if isinstance(recorded, int) else policy.preferred
    s.size = min(max(size, policy.min_workers), policy.preferred)
    s.job = dataclasses.replace(s.job, tasks=tasks_at(s.job.tasks, s.size))


def admitted_workers(s: PlanState) -> int | None:
    """The workers admitted for this elastic job (None: no admission gate, or not
    admitted)."""
    gate = s.job.gate
    return None if gate is None or not gate.admitted else gate.workers


def last_resize(s: PlanState) -> wire.Resize | None:
    history = (s.status.get("elastic") or {}).get("history") or []
    return history[-1] if history else None


def resize(s: PlanState, to: int, reason: Reason, message: str) -> None:
    """Every Pod goes (counted: no failure, no disruption); they come back at ``to``.
    A grow lets them save (their own grace period); a shrink does not wait."""
    assert s.size is not None
    grace = SHRINK_GRACE_SECONDS if to < s.size else None
    for pod in s.owned.values():
        if not pod.deleting:
            s.actions.append(DeletePod(pod.name, pod.uid, grace_seconds=grace))
    for name, rec in s.tracked.items():
        current = s.owned.get(name)
        if current is not None:
            rec["uid"] = current.uid
        rec["counted"] = True
    elastic = wire.ElasticStatus(**(s.status.get("elastic") or {}))
    history = list(elastic.get("history") or [])
    history.append(
        {
            "time": format_time(s.now),
            "fromWorkers": s.size,
            "toWorkers": to,
            "reason": reason.value,
            "message": message,
        }
    )
    elastic["workers"] = to
    elastic["resizes"] = int(elastic.get("resizes") or 0) + 1
    elastic["history"] = history[-HISTORY:]
    s.status["elastic"] = elastic
    s.event("Normal", Reason.RESIZED.value, message)
    s.resized_now = True
    s.size = to
    s.job = dataclasses.replace(s.job, tasks=tasks_at(s.job.tasks, to))


def resized_since(s: PlanState, when: str | None) -> wire.Resize | None:
    """The last resize when it is newer than ``when`` (e.g. the last restart's time)."""
    last = last_resize(s)
    if last is None:
        return None
    at, other = parse_time(last.get("time")), parse_time(when)
    return last if at is not None and (other is None or at >= other) else None


# -- shrink -----------------------------------------------------------------------------------


def shrink_if_capacity_lost(s: PlanState) -> None:
    """Shrink to what was admitted, or without the workers unschedulable for
    shrinkAfterSeconds (not below minWorkers)."""
    policy = s.job.elastic
    if policy is None or s.size is None:
        return
    size_status(s)
    # Workers above the current size (a resize the operator did not see through).
    for extra in s.owned.values():
        if extra.role == WORKER and extra.index >= s.size:
            s.delete(extra)
    admitted = admitted_workers(s)
    if admitted is not None and admitted < s.size and s.job.gate is not None:
        to = max(admitted, policy.min_workers)
        if to < s.size:
            resize(
                s,
                to,
                Reason.CAPACITY_LOST,
                f"Shrinking from {s.size} to {to} workers: {s.job.gate.by} admitted {admitted}",
            )
            return
    stuck = _stuck_workers(s, policy)
    # Placed as one group, every Pod waits when one does not fit: shrink one at a time.
    lost = 1 if stuck and s.job.placement is not None else len(stuck)
    to = max(policy.min_workers, s.size - lost)
    if not stuck or to == s.size:
        return  # nothing lost, or already at minWorkers: wait (the status says why)
    why = stuck[0].waiting.partition(":")[2].strip() or "no node fits"
    resize(
        s,
        to,
        Reason.CAPACITY_LOST,
        f"Shrinking from {s.size} to {to} workers: Pod {stuck[0].name} has been "
        f"unschedulable for over {policy.shrink_after_seconds:g}s ({why})",
    )


def _stuck_workers(s: PlanState, policy: ElasticPolicy) -> list[PodView]:
    """Workers unschedulable for shrinkAfterSeconds (a look again when the next would be)."""
    after = timedelta(seconds=policy.shrink_after_seconds)
    stuck: list[PodView] = []
    for task in s.job.tasks:
        pod = s.owned.get(task.name)
        if task.role != WORKER or pod is None or pod.deleting:
            continue
        if pod.unschedulable_since is None:
            continue
        due = pod.unschedulable_since + after
        if s.now >= due:
            stuck.append(pod)
        else:
            s.requeue((due - s.now).total_seconds())
    return stuck


def size_status(s: PlanState) -> None:
    """status.elastic.workers: the current size."""
    elastic = wire.ElasticStatus(**(s.status.get("elastic") or {}))
    if elastic.get("workers") != s.size:
        assert s.size is not None
        elastic["workers"] = s.size
        elastic.setdefault("resizes", 0)
        s.status["elastic"] = elastic


# -- grow -------------------------------------------------------------------------------------


def grow_if_capacity_returned(s: PlanState, running: bool) -> bool:
    """Probe while running short; grow when probes are bound and the cool-down passed.
    True when it resized. status.elastic.growth says where a grow stands."""
    policy = s.job.elastic
    if policy is None or s.size is None:
        return False
    grew, growth = _grow(s, policy, running)
    elastic = wire.ElasticStatus(**(s.status.get("elastic") or {}))
    if elastic.get("growth") != growth:
        if growth:
            elastic["growth"] = growth
        else:
            elastic.pop("growth", None)
        s.status["elastic"] = elastic
    return grew


def _grow(s: PlanState, policy: ElasticPolicy, running: bool) -> tuple[bool, str]:
    """(resized, where a grow stands in words: '' at the preferred size or while the
    job is not running)."""
    assert s.size is not None
    probes = {p.index: p for p in s.owned.values() if p.role == PROBE_ROLE}
    # Short, running, and no other job waiting for the place a probe would take: probe.
    giving_way = _giving_way(s) if running and s.size < policy.preferred else ""
    wanted = running and not giving_way
    missing = policy.preferred - s.size if wanted else 0
    if running and s.size < policy.preferred and not wanted:
        s.requeue(PROBE_SETTLE_SECONDS)  # look again: other jobs' Pods wake no one
    for index, pod in probes.items():
        # A probe that ended was no place: the kubelet refused it (OutOf<resource>, its
        # view of the node behind the scheduler's) or something stopped it. It goes,
        # and a fresh one looks again.
        if (index >= missing or pod.finished) and not pod.deleting:
            s.actions.append(DeletePod(pod.name, pod.uid, force=True))
    if missing <= 0:
        return False, giving_way
    for index in range(missing):
        if index not in probes:
            s.actions.append(CreateProbe(probe_name(s.job.name, index), index))
    settled, growth = _settled_probes(s, probes, missing)
    if not settled:
        return False, growth
    return _grow_by(s, policy, settled)


def _giving_way(s: PlanState) -> str:
    """Why probing waits ('' when it need not): another job's Pod that could use the place
    growth would take (`contention.competes`), waiting for less than GIVE_WAY_SECONDS."""
    worker = next(
        (p for p in s.owned.values() if p.role == WORKER and not p.deleting and p.node_name),
        None,
    )
    bound = timedelta(seconds=GIVE_WAY_SECONDS)
    waiters = sorted(s.job.others_waiting, key=lambda p: (p.namespace, p.job_name, p.name))
    for waiter in waiters:
        since = waiter.unschedulable_since
        lacks = contention.competes(waiter, worker)
        if lacks is None or since is None or s.now >= since + bound:
            continue
        s.requeue((since + bound - s.now).total_seconds())
        return (
            f"Not probing: {waiter.namespace}/{waiter.job_name} waits for a place that "
            f"growth would take ({lacks}) since {format_time(since)}; probing from "
            f"{format_time(since + bound)} at the latest"
        )
    return ""


def _settled_probes(
    s: PlanState, probes: Mapping[int, PodView], missing: int
) -> tuple[list[PodView], str]:
    """The wanted probes bound to a node for PROBE_SETTLE_SECONDS; when there are none,
    where the probing stands in words."""
    live = [
        p for i, p in sorted(probes.items()) if i < missing and not p.deleting and not p.finished
    ]
    settle = timedelta(seconds=PROBE_SETTLE_SECONDS)
    placed = [
        (p, since + settle)
        for p in live
        if p.node_name and (since := p.scheduled_since) is not None
    ]
    unsettled = [(p, counts) for p, counts in placed if counts > s.now]
    if unsettled:
        s.requeue((min(c for _, c in unsettled) - s.now).total_seconds())
    settled = [p for p, counts in placed if counts <= s.now]
    if settled:
        return settled, ""
    if unsettled:
        first = unsettled[0][0]
        return [], (
            f"Probe Pod {first.name} was scheduled on node {first.node_name}: counted as a "
            f"place once it has stayed {PROBE_SETTLE_SECONDS:g}s"
        )
    if live and live[0].waiting:
        return [], f"Probe Pod {live[0].name} waits for a place: {live[0].waiting}"
    return [], f"Probing for a place for {missing} more worker{'s' if missing > 1 else ''}"


def _grow_by(s: PlanState, policy: ElasticPolicy, settled: list[PodView]) -> tuple[bool, str]:
    """Grow by the settled probes once the cool-down passed, as far as was admitted."""
    assert s.size is not None
    last = last_resize(s)
    at = parse_time(last.get("time")) if last else None
    where = f"probe Pod {settled[0].name} was scheduled on node {settled[0].node_name}"
    if at is not None:
        due = at + timedelta(seconds=policy.resize_cooldown_seconds)
        if s.now < due:
            s.requeue((due - s.now).total_seconds())
            return False, (
                f"Capacity returned ({where}); growing after the cool-down "
                f"(resizeCooldownSeconds), at {format_time(due)}"
            )
    to = s.size + len(settled)
    why = where
    gate = s.job.gate
    if gate is not None and gate.workers is not None:
        if gate.workers < to:
            s.grow_to = to  # the admission of that many first (its events wake us)
            if gate.workers <= s.size:
                return False, (
                    f"Capacity returned ({where}); waiting for {gate.by} to admit {to} workers"
                )
            to = gate.workers  # admitted already: as far as that
        why += f"; {gate.by} admitted {to} workers"
    resize(s, to, Reason.CAPACITY_RETURNED, f"Growing from {s.size} to {to} workers: {why}")
    return True, ""

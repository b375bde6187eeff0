"""Builders shared by the planner's unit tests: jobs, Pods, plans and what a plan does.

One place (as JobSet's `pkg/util/testing/wrappers.go`): test modules import from here,
never from each other.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from kerasjob.planner import planning
from kerasjob.planner import reconcile as rc
from kerasjob.planner.planning import CreateProbe, ElasticPolicy
from kerasjob.planner.podview import PodView

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
JOB_UID = "job-uid"


def job(workers: int = 3, **kw: Any) -> planning.JobView:
    tasks = tuple(planning.Task(f"j-worker-{i}", "worker", i) for i in range(workers))
    base: dict[str, Any] = dict(
        name="j", namespace="ns", uid=JOB_UID, generation=1, tasks=tasks, chief="j-worker-0"
    )
    base.update(kw)
    return planning.JobView(**base)


def pod(i: int, uid: str | None = None, **kw: Any) -> PodView:
    base: dict[str, Any] = dict(
        name=f"j-worker-{i}",
        namespace="ns",
        uid=uid or f"u{i}",
        job_name="j",
        owner_uid=JOB_UID,
        role="worker",
        index=i,
        phase="Running",
        ready=True,
    )
    base.update(kw)
    return PodView(**base)


def run(
    j: planning.JobView, status: dict[str, Any], pods: list[PodView], now: datetime = NOW
) -> planning.Plan:
    return rc.plan(j, status, pods, now)


def creates(p: planning.Plan) -> list[str]:
    return [a.task.name for a in p.actions if isinstance(a, planning.CreatePod)]


def deletes(p: planning.Plan) -> list[str]:
    return [a.name for a in p.actions if isinstance(a, planning.DeletePod)]


def settle(j: planning.JobView, pods: list[PodView], status: dict[str, Any] | None = None) -> dict:
    """Status after the controller has seen ``pods``."""
    return run(j, status or {}, pods).status


POLICY = ElasticPolicy(
    min_workers=2, preferred=3, shrink_after_seconds=60, resize_cooldown_seconds=120
)
UNSCHEDULABLE = "Unschedulable: 0/4 nodes are available: 4 Insufficient example.com/slot."


def ejob(**kw: Any) -> planning.JobView:
    return job(3, elastic=POLICY, **kw)


def stuck(i: int, since: timedelta, uid: str | None = None) -> PodView:
    return pod(
        i, uid, phase="Pending", ready=False, unschedulable_since=NOW - since, waiting=UNSCHEDULABLE
    )


def probe(i: int, node: str = "", uid: str | None = None, bound_for: float = 10.0) -> PodView:
    return pod(
        i,
        uid or f"p{i}",
        name=f"j-probe-{i}",
        role="probe",
        phase="Pending",
        ready=False,
        node_name=node,
        scheduled_since=NOW - timedelta(seconds=bound_for) if node else None,
    )


def probes(p: planning.Plan) -> list[str]:
    return [a.name for a in p.actions if isinstance(a, CreateProbe)]

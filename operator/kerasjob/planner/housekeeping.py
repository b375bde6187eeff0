"""The planner's steps every plan of a job it runs takes, first (`housekeeping`: stale and
stuck Pods) and last (`chief_exit_progress`, `complete_status`: the status written back
whole). Steps over `planstate.PlanState`, composed by `reconcile.plan`.
"""

from __future__ import annotations

from datetime import timedelta

from kerasjob.planner import goodput, progress
from kerasjob.planner import status as st
from kerasjob.planner.planning import DeletePod
from kerasjob.planner.planstate import PlanState


def housekeeping(s: PlanState) -> None:
    """Pods of an older job of the same name go; Pods stuck terminating are forced."""
    for pod in s.stale:
        s.delete(pod)
    for pod in [*s.owned.values(), *s.stale]:
        if pod.deletion_timestamp is None:
            continue
        due = pod.deletion_timestamp + timedelta(seconds=s.force_delete_after)
        if s.now >= due:
            s.actions.append(DeletePod(pod.name, pod.uid, force=True))
            # Look again in case the force delete did not take.
            s.requeue(s.force_delete_after)
        else:
            s.requeue((due - s.now).total_seconds())


def chief_exit_progress(s: PlanState) -> None:
    """status.progress from the chief's termination message: where training really
    ended (the scraper reads only a running chief, seconds apart)."""
    pod = s.owned.get(s.job.chief)
    if pod is None or pod.termination is None or not pod.termination.message:
        return
    old = s.status.get("progress") or {}
    new = progress.from_termination(
        old, pod.termination.message, total_steps=s.job.total_steps, now=s.now
    )
    if new is None:
        return
    s.status["progress"] = new
    for reason, message in goodput.goodput_events(old.get("goodput"), new.get("goodput") or {}):
        s.event("Normal", reason, message)


def complete_status(s: PlanState) -> None:
    """Complete the status: trackedPods of wanted tasks only (none: no key), no empty
    conditions, replicaStatuses, and phase Pending if none was decided."""
    names = {t.name for t in s.job.tasks}
    tracked = {n: r for n, r in s.tracked.items() if n in names}
    if tracked:
        s.tracked = tracked
    else:
        s.status.pop("trackedPods", None)
    if not s.conditions:
        s.status.pop("conditions", None)
    succeeded = [t.role for t in s.job.tasks if tracked.get(t.name, {}).get("succeeded")]
    owned = [p for p in s.owned.values() if p.name in names]
    stopped = {
        name
        for name, rec in tracked.items()
        if rec.get("stopped") and (p := s.owned.get(name)) is not None and p.uid == rec.get("uid")
    }
    s.status["replicaStatuses"] = st.replica_statuses(
        s.job.roles, owned, succeeded, stopped=stopped
    )
    if not s.status.get("phase"):
        s.status["phase"] = st.PENDING

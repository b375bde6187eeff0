"""The planner's steps every plan of a job it runs takes, first (`housekeeping`: stale and
stuck Pods; `restore_children`: a changed Service or NetworkPolicy) and last
(`chief_exit_progress`, `complete_status`: the status written back whole). Steps over
`planstate.PlanState`, composed by `reconcile.plan`.
"""

from __future__ import annotations

from datetime import timedelta

from kerasjob.api import Reason
from kerasjob.planner import goodput, progress
from kerasjob.planner import status as st
from kerasjob.planner.planning import DeletePod, Event, JobView, RestoreChild
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


def restore_children(s: PlanState) -> None:
    """The job's Service or NetworkPolicy whose spec someone changed (a policy loosened to
    admit everyone, a selector edited) is patched back; whatever the job's phase, as long
    as the operator runs it (a finished job's kept Pods are still behind the policy). Its
    Warning (`child_restored`) is posted once the patch went through: a patch that found
    the object changed again, or was refused, restored nothing."""
    for drift in s.job.drifted_children:
        s.actions.append(RestoreChild(drift.kind, drift.fields))


def child_restored(job: JobView, restored: RestoreChild) -> Event:
    """The Warning that the job's ``restored.kind`` had another spec and was given its own
    back."""
    fields = ", ".join(f"spec.{f}" for f in restored.fields)
    return Event(
        "Warning",
        Reason.CHILD_RESTORED.value,
        f"{restored.kind} {job.namespace}/{job.name} had been changed ({fields}); "
        "restored to the job's",
    )


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

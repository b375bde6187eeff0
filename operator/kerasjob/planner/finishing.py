"""The planner's steps for a job's end: deciding it (`concluded`, `finish`) and what
follows (`finished`: Pods cleaned up per cleanPodPolicy, the job deleted after its TTL).
Steps over `planstate.PlanState`, composed by `reconcile.plan` and `running.active`.
"""

from __future__ import annotations

from datetime import timedelta

from kerasjob.api import ConditionType, Reason
from kerasjob.planner import restart_policy as rp
from kerasjob.planner import status as st
from kerasjob.planner.elastic import PROBE_ROLE
from kerasjob.planner.planning import DeleteJob
from kerasjob.planner.planstate import PlanState
from kerasjob_contract.times import format_time, parse_time

#: Seconds a Succeeded job leaves its still-running Pods (other workers finishing the same
#: step, the evaluator's final evaluation) to end on their own before cleanPodPolicy stops
#: them: a worker that exits 0 a moment after the chief is counted succeeded, not stopped.
CLEANUP_GRACE_SECONDS = 10.0


def finish(s: PlanState, phase: str, reason: str, message: str) -> None:
    """Phase Succeeded or Failed, its condition, and an Event."""
    s.status["phase"] = phase
    s.status["completionTime"] = format_time(s.now)
    s.cond(
        ConditionType.SUCCEEDED if phase == st.SUCCEEDED else ConditionType.FAILED,
        True,
        reason,
        message,
    )
    for other in (ConditionType.RUNNING, ConditionType.RESTARTING):
        s.cond(other, False, reason, message)
    s.event("Normal" if phase == st.SUCCEEDED else "Warning", reason, message)


def concluded(s: PlanState) -> bool:
    """After `accounting.count_outcomes`: finish the job if an outcome decided it; True if
    it did."""
    if s.fail_verdict is not None:
        finish(s, st.FAILED, s.fail_verdict.reason, s.fail_verdict.message)
    elif s.tracked.get(s.job.chief, {}).get("succeeded"):
        chief = s.job.chief
        finish(s, st.SUCCEEDED, Reason.SUCCEEDED.value, f"{chief} completed successfully")
    else:
        return False
    finished(s)
    return True


def finished(s: PlanState) -> None:
    """A finished job: clean Pods up per cleanPodPolicy, delete it after its TTL."""
    late_successes(s)
    clean_up(s)
    ttl = s.job.ttl_seconds_after_finished
    done = parse_time(s.status.get("completionTime"))
    if ttl is not None and done is not None:
        left = (done + timedelta(seconds=ttl) - s.now).total_seconds()
        if left <= 0:
            s.actions.append(DeleteJob())
        else:
            s.requeue(left)


def clean_up(s: PlanState) -> None:
    """The finished job's Pods per cleanPodPolicy (an elastic job's probes always go).

    Pods still running when a job succeeded get `CLEANUP_GRACE_SECONDS` to end on their
    own; a Pod the operator then stops is marked ``stopped``: its exit is no failure.
    """
    policy = s.job.clean_pod_policy
    done = parse_time(s.status.get("completionTime"))
    grace_left = 0.0
    if s.status.get("phase") == st.SUCCEEDED and done is not None:
        grace_left = (done + timedelta(seconds=CLEANUP_GRACE_SECONDS) - s.now).total_seconds()
    for pod in s.owned.values():
        if pod.role == PROBE_ROLE:
            s.delete(pod)
            continue
        if not (policy == "All" or (policy == "Running" and not pod.finished)):
            continue
        if not pod.finished and not pod.deleting:
            if grace_left > 0:
                s.requeue(grace_left)
                continue
            rec = s.tracked.get(pod.name)
            if rec is not None and rec.get("uid") == pod.uid:
                rec["stopped"] = True
        s.delete(pod)


def late_successes(s: PlanState) -> None:
    """After the job finished: a tracked Pod that has since exited 0 still counts as
    succeeded (it exited in the same instant as the chief, or in the cleanup grace)."""
    for task in s.job.tasks:
        pod = s.owned.get(task.name)
        rec = s.tracked.get(task.name)
        if pod is None or rec is None or rec.get("uid") != pod.uid or rec.get("succeeded"):
            continue
        if pod.finished and isinstance(rp.classify_finished(pod), rp.Success):
            rec["succeeded"] = True
            rec["counted"] = True

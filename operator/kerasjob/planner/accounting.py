"""The planner's counting step: what happened to a job's Pods since the planner last looked.

Each lost, finished or restarted incarnation is classified by the restart policy
(`restart_policy`) and counted exactly once; its record in ``status.trackedPods`` says so.
Steps over `planstate.PlanState`, composed by `reconcile.plan`.
"""

from __future__ import annotations

from kerasjob.api import Reason, ReplicaRole, wire
from kerasjob.planner import restart_loop
from kerasjob.planner import restart_policy as rp
from kerasjob.planner import status as st
from kerasjob.planner.planning import Task
from kerasjob.planner.planstate import PlanState
from kerasjob.planner.podview import PodView
from kerasjob_contract.times import format_time


def count_outcomes(s: PlanState) -> None:
    """Count what happened to every wanted Pod since the last look."""
    for task in s.job.tasks:
        pod = s.owned.get(task.name)
        rec = _record(s, task, pod)
        if rec is None:
            continue
        if pod is None:
            if rec.get("uid") and not rec.get("counted"):
                account(s, task, rp.classify_lost(None))
                rec["counted"] = True
            continue
        _count_in_place_restarts(s, task, pod, rec)
        if rec.get("counted"):
            continue
        if pod.finished:
            outcome = rp.classify_finished(pod)
            if isinstance(outcome, rp.Success):
                rec["succeeded"] = True
                s.event("Normal", Reason.TASK_SUCCEEDED.value, f"Pod {task.name} completed")
            else:
                account(s, task, outcome)
            rec["counted"] = True
        elif pod.deleting:
            account(s, task, rp.classify_lost(pod))
            rec["counted"] = True
        elif pod.ended:  # its trainer exited non-zero; the kubelet marks it Failed soon
            account(s, task, rp.classify_finished(pod))
            rec["counted"] = True


def _record(s: PlanState, task: Task, pod: PodView | None) -> wire.TrackedPod | None:
    """The task's record; a new one for a new incarnation (the previous one, if it
    vanished while nobody was looking, counted lost)."""
    rec = s.tracked.get(task.name)
    if pod is None or (rec is not None and rec.get("uid") == pod.uid):
        return rec
    if rec is not None and rec.get("uid") and not rec.get("counted"):
        account(s, task, rp.classify_lost(None))
    new: wire.TrackedPod = {
        "uid": pod.uid,
        "restartCount": 0,
        "counted": False,
        "succeeded": bool(rec and rec.get("succeeded")),
    }
    s.tracked[task.name] = new
    return new


def _count_in_place_restarts(s: PlanState, task: Task, pod: PodView, rec: wire.TrackedPod) -> None:
    """Container restarts of the same Pod (the kubelet's, restartPolicy OnFailure)."""
    counted = int(rec.get("restartCount", 0))
    if pod.restart_count > counted:
        outcome = rp.classify_in_place_restart(pod)
        for _ in range(pod.restart_count - counted):
            account(s, task, outcome)
        rec["restartCount"] = pod.restart_count


def account(s: PlanState, task: Task, outcome: rp.Outcome) -> None:
    """Count one outcome of one Pod: counters, lastRestart, an event, maybe a verdict."""
    verdict = rp.decide(
        s.job.restart_policy,
        outcome,
        pod=task.name,
        failures_before=s.failures,
        backoff_limit=s.job.backoff_limit,
    )
    if not (verdict.count_failure or verdict.count_disruption):
        return
    if verdict.count_failure:
        s.failures += 1
    else:
        s.disruptions += 1
    reason = getattr(outcome, "reason", "")
    code = getattr(outcome, "exit_code", None)
    in_place = _restarting_in_place(s, task)
    s.status["lastRestart"] = _last_restart(s, task, reason, code, verdict)
    if in_place:
        s.status["lastRestart"]["restartedInPlace"] = in_place
    exit_text = f" (exit code {code})" if code is not None else ""
    others = f"; {', '.join(in_place)} restart in place" if in_place else ""
    if verdict.count_disruption:
        s.event(
            "Normal",
            Reason.POD_DISRUPTED.value,
            f"Pod {task.name}: {reason}{exit_text}; restarting it (disruption "
            f"{s.disruptions}, not counted against backoffLimit){others}",
        )
    elif not verdict.fail:
        s.event(
            "Warning",
            Reason.POD_FAILED.value,
            f"Pod {task.name}: {reason}{exit_text}; restarting it (failure "
            f"{s.failures} of backoffLimit {s.job.backoff_limit}){others}",
        )
    if verdict.fail and s.fail_verdict is None:
        s.fail_verdict = verdict


def _group_peers(s: PlanState, task: Task) -> list[Task]:
    """The other tasks of ``task``'s training group (none for the evaluator, which is not
    in it)."""
    if task.role == ReplicaRole.EVALUATOR.value:
        return []
    return [t for t in s.job.tasks if t.name != task.name and t.role != ReplicaRole.EVALUATOR.value]


def _restarting_in_place(s: PlanState, task: Task) -> list[str]:
    """The other training Pods that keep running when ``task``'s trainer restarts: their
    trainers lose the peer and restart inside their own Pods (the container's supervisor),
    so they keep their UID, node, IP and claims and are not counted again."""
    return [
        t.name
        for t in _group_peers(s, task)
        if (pod := s.owned.get(t.name)) is not None and not pod.ended and not pod.deleting
    ]


def _group_broken(s: PlanState, task: Task) -> bool:
    """Another training Pod's loss was counted already and that Pod is not back yet (gone,
    finished or going): ``task``'s restart is part of the same round."""
    for t in _group_peers(s, task):
        rec = s.tracked.get(t.name) or {}
        pod = s.owned.get(t.name)
        back = pod is not None and pod.uid != rec.get("uid")
        gone = pod is None or pod.ended or pod.deleting
        if rec.get("counted") and not rec.get("succeeded") and not back and gone:
            return True
    return False


def _last_restart(
    s: PlanState, task: Task, reason: str, code: int | None, verdict: rp.Verdict
) -> wire.LastRestart:
    """status.lastRestart for this restart (a disruption's with its loop count)."""
    last: wire.LastRestart = {
        "time": format_time(s.now),
        "reason": reason,
        "pod": task.name,
        "disruption": verdict.count_disruption,
    }
    if code is not None:
        last["exitCode"] = code
    if verdict.count_disruption:
        last.update(
            restart_loop.record(
                s.status.get("lastRestart"),
                reason,
                s.status,
                was_running=s.prev_phase == st.RUNNING,
                same_round=_group_broken(s, task),
            )
        )
    return last

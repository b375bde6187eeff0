"""The planner's counting step: what happened to a job's Pods since the planner last looked.

Each lost, finished or restarted incarnation is classified by the restart policy
(`restart_policy`) and counted exactly once; its record in ``status.trackedPods`` says so.
Steps over `planstate.PlanState`, composed by `reconcile.plan`.
"""

from __future__ import annotations

from datetime import datetime

from kerasjob.api import Reason, wire
from kerasjob.planner import restart_loop
from kerasjob.planner import restart_policy as rp
from kerasjob.planner import status as st
from kerasjob.planner.planning import Task
from kerasjob.planner.planstate import PlanState
from kerasjob.planner.podview import PodView
from kerasjob_contract.times import format_time, parse_time


def count_outcomes(s: PlanState) -> None:
    """Count what happened to every wanted Pod since the last look: losses first, then the
    trainers that left with their group (`_count_group_exits`), so that a loss and its
    consequences seen in one look are one restart."""
    group_exits: list[tuple[Task, wire.TrackedPod, rp.Disruption, datetime]] = []
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
        if pod.deleting and not pod.finished:
            account(s, task, rp.classify_lost(pod))
        elif pod.finished or pod.ended:  # ended: trainer exited non-zero, Failed soon
            outcome = rp.classify_finished(pod)
            if isinstance(outcome, rp.Success):
                rec["succeeded"] = True
                s.event("Normal", Reason.TASK_SUCCEEDED.value, f"Pod {task.name} completed")
            elif rp.is_group_exit(outcome) and not pod.deleting and _in_a_group(s, task):
                ended_at = pod.termination.finished_at if pod.termination else None
                group_exits.append((task, rec, outcome, ended_at or s.now))
                continue
            else:
                account(s, task, outcome)
        else:
            continue
        rec["counted"] = True
    _count_group_exits(s, group_exits)


def _count_group_exits(
    s: PlanState, exits: list[tuple[Task, wire.TrackedPod, rp.Disruption, datetime]]
) -> None:
    """Trainers that left because their group broke (exit 42/43 of a Pod nobody deleted:
    a trainer without the container's supervisor, or with in-place restarts off or used
    up). While the round of a counted loss is open (`_round_open`) such an exit is that
    loss's consequence and is not counted again (one deleted worker of 8 is one
    disruption, not 8). Otherwise it is the round's first trace and counted, standing in
    (``lastRestart.standIn``) for the loss not seen yet, which then takes the count over."""
    for task, rec, outcome, ended_at in exits:
        rec["counted"] = True
        last = s.status.get("lastRestart") or {}
        if _round_open(s, ended_at):
            s.event(
                "Normal",
                Reason.POD_DISRUPTED.value,
                f"Pod {task.name}: {outcome.reason} (exit code {outcome.exit_code}), "
                f"its group's restart after Pod {last.get('pod')}'s "
                f"{last.get('reason')}; restarting it (not counted again)",
            )
            continue
        account(s, task, outcome)  # a disruption: always counted, lastRestart its own
        s.status["lastRestart"]["standIn"] = True


#: How long after a counted loss the group's exits (42/43) are that loss's round: the
#: survivors leave within a collective or two (about 0.1-2 s measured; a peer that hangs
#: instead of leaving is caught by the collective timeout, 60 s by default).
ROUND_SECONDS = 60.0


def _round_open(s: PlanState, at: datetime | None = None) -> bool:
    """A restart was counted in this look, or the last one (`s.old`) was counted less than
    ROUND_SECONDS before `at` (when the exit happened, as its kubelet recorded it; default:
    now) and the job has not been running since: the group is still broken by it.
    (Job-level, from the status: it holds across Pod re-creations and operator restarts,
    and an operator that sees the exit late does not count it.)"""
    before = s.old.get("restarts") or {}
    if s.disruptions + s.failures > int(before.get("disruptions", 0)) + int(
        before.get("failures", 0)
    ):
        return True
    when = parse_time((s.old.get("lastRestart") or {}).get("time"))
    return (
        s.prev_phase != st.RUNNING
        and when is not None
        and ((at or s.now) - when).total_seconds() <= ROUND_SECONDS
    )


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
    takes_over = _takes_over_stand_in(s, verdict)
    if verdict.count_failure:
        s.failures += 1
    elif not takes_over:
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
        counted = (
            f"disruption {s.disruptions}, counted when Pod {takes_over}'s trainer left "
            "with the group"
            if takes_over
            else f"disruption {s.disruptions}"
        )
        s.event(
            "Normal",
            Reason.POD_DISRUPTED.value,
            f"Pod {task.name}: {reason}{exit_text}; restarting it ({counted}, not counted "
            f"against backoffLimit){others}",
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


def _takes_over_stand_in(s: PlanState, verdict: rp.Verdict) -> str | None:
    """The Pod whose group exit stands in for this disruption (counted before it was seen,
    in the round still open): this disruption takes its count over. Once only."""
    last = s.status.get("lastRestart") or {}  # replaced by the first restart counted now
    if not (verdict.count_disruption and last.get("standIn") and _round_open(s)):
        return None
    return str(last.get("pod", ""))


def _group_peers(s: PlanState, task: Task) -> list[Task]:
    """The other tasks whose trainers leave when ``task`` is lost (`GroupPolicy`): its
    training group's, or none (the evaluator; a parameter-server job's worker)."""
    stopped = s.job.group.stopped_with(task.role)
    return [t for t in s.job.tasks if t.name != task.name and t.role in stopped]


def _in_a_group(s: PlanState, task: Task) -> bool:
    """Whether ``task``'s trainer leaves with a group that breaks (it has one, with others)."""
    members = s.job.group.members
    return task.role in members and any(
        t.name != task.name and t.role in members for t in s.job.tasks
    )


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
    finished or going): ``task``'s restart is part of the same round (for the loop count).
    Not `_round_open`, whose window restarts with every counted restart: a Pod evicted
    again and again before the job runs would stay in one round, and never back off."""
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

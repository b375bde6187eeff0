"""The planner's step for an active job (`active`): Pods (re-)created together, the phase and
the conditions that say how it runs.

`active` runs when the job is neither finished, invalid, rejected, suspended nor queued (an
admission `Gate`); it is composed of the named steps below, each a function over
`planstate.PlanState`, and uses the counting (`accounting`), the end (`finishing`) and the
elastic resizes (`elastic`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from kerasjob.api import ConditionType, Reason
from kerasjob.planner import accounting, conditions, elastic, finishing, restart_loop
from kerasjob.planner import status as st
from kerasjob.planner.planning import Action, CreatePod, CreateService, Event, JobView, Task
from kerasjob.planner.planstate import PlanState
from kerasjob_contract.times import format_time, parse_time

#: While old Pods of a job are still going, look again this often (their deletion events
#: normally wake the controller first).
REGROUP_RECHECK_SECONDS = 2.0
CREATED = ConditionType.CREATED


def active(s: PlanState) -> None:
    """Count, then end the job or run it: create what is missing, and say how it runs."""
    admitted_and_resumed(s)
    if not s.status.get("startTime"):
        s.status["startTime"] = format_time(s.now)
    accounting.count_outcomes(s)
    if finishing.concluded(s) or past_deadline(s):
        return
    elastic.shrink_if_capacity_lost(s)  # s.job: an elastic job's tasks at its (new) size
    succeeded = regroup_finished(s, {n for n, r in s.tracked.items() if r.get("succeeded")})
    creates = held_back(s, missing_pods(s, succeeded), succeeded)
    if creates:
        create(s, creates)
    elif conditions.get_condition(s.conditions, ConditionType.CREATED) is not None and not (
        conditions.condition_true(s.conditions, ConditionType.CREATED)
    ):
        s.cond(ConditionType.CREATED, True, Reason.CREATED.value, "The Pods were created")
    recreate_children(s)
    wanted = [t for t in s.job.tasks if t.name not in succeeded]
    all_ready = readiness(s, wanted)
    if s.job.placement is not None and not succeeded:
        # Every Pod of its current size, one group. Once a task has finished for good (an
        # evaluator done early), the group's minCount would never be met again: any
        # further Pod is made outside it.
        epoch = int((s.status.get("elastic") or {}).get("resizes") or 0)
        s.pod_group = s.job.placement.pod_group_for(len(s.job.tasks), epoch)
    without = [] if all_ready else trains_without(s, wanted)
    phase_and_conditions(s, wanted, all_ready or bool(without), without)


def admitted_and_resumed(s: PlanState) -> None:
    """The admission gate's word as condition Admitted; a job back from Suspended or Queued
    says it resumes."""
    gate = s.job.gate
    if gate is not None:
        s.cond(ConditionType.ADMITTED, True, gate.reason, gate.message)
        if gate.recheck_after is not None:
            s.requeue(gate.recheck_after)
    if s.prev_phase in (st.SUSPENDED, st.QUEUED):
        message = "spec.suspend is false: Pods re-created, resuming from the last backup"
        if gate is not None:
            message = f"{gate.message}: Pods created, resuming from the last backup if any"
        s.cond(ConditionType.SUSPENDED, False, Reason.RESUMED.value, message)
        s.event("Normal", Reason.RESUMED.value, message)


def past_deadline(s: PlanState) -> bool:
    """Fail the job once it ran activeDeadlineSeconds (True); else look again then."""
    deadline = s.job.active_deadline_seconds
    if deadline is None:
        return False
    start = parse_time(s.status.get("startTime")) or s.now
    left = (start + timedelta(seconds=deadline) - s.now).total_seconds()
    if left > 0:
        s.requeue(left)
        return False
    finishing.finish(
        s,
        st.FAILED,
        Reason.DEADLINE_EXCEEDED.value,
        f"the job ran longer than activeDeadlineSeconds ({deadline}s)",
    )
    finishing.finished(s)
    return True


def regroup_finished(s: PlanState, succeeded: set[str]) -> set[str]:
    """A training group restarts whole. When a training Pod must be (re-)created while
    others had already finished training (exit 0, e.g. the chief failed or was evicted
    while saving the final model), those join again: TensorFlow forms the cluster only
    with every worker, so a restarted chief alone would wait for them forever. Their
    success is forgotten; they resume from the backup with the others. Only a loss that
    breaks the group (`GroupPolicy`) regroups: a parameter-server job's worker rejoins."""
    group = s.job.group
    training = [t for t in s.job.tasks if t.role in group.members]
    restarting = [
        t.name
        for t in training
        if t.role in group.breaks_group
        and t.name not in succeeded
        and ((p := s.owned.get(t.name)) is None or p.ended or p.deleting)
    ]
    done = [t.name for t in training if t.name in succeeded]
    if not restarting or not done:
        return succeeded
    for name in done:  # their finished Pods go with the others' (`missing_pods`)
        s.tracked[name]["succeeded"] = False  # the old Pod's exit stays counted
    s.event(
        "Normal",
        Reason.REGROUPING.value,
        f"{', '.join(done)} had finished training; re-created with "
        f"{', '.join(restarting)} (TensorFlow forms the cluster only with every "
        f"worker): resuming from the last backup",
    )
    return succeeded - set(done)


def missing_pods(s: PlanState, succeeded: set[str]) -> list[Action]:
    """A CreatePod per wanted task without a Pod; finished Pods deleted (re-created once
    gone)."""
    creates: list[Action] = []
    for task in s.job.tasks:
        if task.name in succeeded:
            continue
        pod = s.owned.get(task.name)
        if pod is None:
            creates.append(CreatePod(task, s.size))
        elif pod.ended:
            # Counted already; re-created once it is gone. Its trainer has ended, so
            # nothing is cut short by grace period 0, and the new Pod need not wait for
            # the kubelet to tear the old one's sandbox down and confirm its removal
            # (about 1 s on the real node; every 2 s its housekeeping) -- also when the
            # Pod was being deleted with its grace period (an eviction, a deletion).
            s.delete(pod, force=True)
    return creates


def held_back(s: PlanState, creates: list[Action], succeeded: set[str]) -> list[Action]:
    """``creates``, or none while an old incarnation is still going or a disruption loop
    backs off (a look again then)."""
    # Re-create a job's Pods together, once no old incarnation is left: a new worker
    # must not resolve a peer's name to the address of its terminating predecessor
    # (TensorFlow's gRPC then waits out its 30 s minimum between DNS re-resolutions;
    # measured: 37 s instead of 8 s to resume after an eviction).
    old = [
        t.name
        for t in s.job.tasks
        if t.name not in succeeded
        and (p := s.owned.get(t.name)) is not None
        and (p.ended or p.deleting)
    ]
    if creates and old:
        s.requeue(REGROUP_RECHECK_SECONDS)
        return []
    hold = restart_loop.hold_until(s.status.get("lastRestart"), s.status)
    if creates and hold is not None and hold > s.now:
        s.requeue((hold - s.now).total_seconds())
        return []  # the same disruption again and again, no progress: back off
    return creates


def create(s: PlanState, creates: list[Action]) -> None:
    """The headless Service and the Pods first among the actions; condition Created (False
    with the API server's refusal while one is forbidden for now)."""
    s.actions[:0] = [CreateService(), *creates]
    if conditions.get_condition(s.conditions, ConditionType.CREATED) is None:
        message = f"Creating {len(s.job.tasks)} Pods and the headless Service"
        s.cond(ConditionType.CREATED, True, Reason.CREATED.value, message)
        s.event("Normal", Reason.CREATED.value, message)
    if s.rejection is not None:  # forbidden for now: say so, retry later
        message = s.rejection.describe()
        shown = conditions.get_condition(s.conditions, ConditionType.CREATED) or {}
        if shown.get("status") != "False" or shown.get("message") != message:
            s.event("Warning", s.rejection.reason, message)
        s.cond(ConditionType.CREATED, False, s.rejection.reason, message)


def recreate_children(s: PlanState) -> None:
    """The job's Service or NetworkPolicy gone while it runs (deleted by hand, a namespace
    clean-up, a GitOps prune): made again, with a Warning event naming each. Not before the
    job's children were first made (condition Created in the stored status)."""
    missing = s.job.missing_children
    if not missing or not _children_made_before(s.old):
        return
    if not any(isinstance(a, CreateService) for a in s.actions):
        s.actions.insert(0, CreateService())
    for kind in missing:
        s.events.append(child_recreated(s.job, kind))


def recreated_unplanned(
    job: JobView, status: Mapping[str, Any], made: Iterable[str]
) -> list[Event]:
    """The Warnings for the job's Service or NetworkPolicy that a create made although the
    plan believed them present (`made`: the kinds the creates made; the index had not shown
    their deletion yet, e.g. both deleted at once and the plan saw one gone). Only once the
    job's children were first made, as `recreate_children`."""
    if not _children_made_before(status):
        return []
    return [child_recreated(job, k) for k in made if k not in job.missing_children]


def _children_made_before(status: Mapping[str, Any]) -> bool:
    """Whether the stored status says the job's children were first made (condition
    Created): a Service or NetworkPolicy made after that was made again."""
    return conditions.get_condition(status.get("conditions") or [], CREATED) is not None


def child_recreated(job: JobView, kind: str) -> Event:
    """The Warning that the job's `kind` ("Service", "NetworkPolicy") was made again. Also
    posted for one the plan believed present but its create made (the index had not shown
    its deletion yet: `control.acting.Acted.made_shared`)."""
    return Event(
        "Warning",
        Reason.CHILD_RECREATED.value,
        f"{kind} {job.namespace}/{job.name} was missing; re-created",
    )


def readiness(s: PlanState, wanted: list[Task]) -> bool:
    """Whether every wanted Pod is running and ready (an elastic job grows only then, and
    a resize makes it not ready)."""
    views = [s.owned.get(t.name) for t in wanted]
    # A Pod whose trainer exited 0 but is not yet Succeeded is finishing: the job is
    # not restarting (the kubelet reports Ready False a moment before Succeeded), but
    # it does not grow either.
    finishing_now = any(p is not None and p.exited_ok for p in views)
    all_ready = bool(views) and all(
        p is not None and (p.running_ready or p.exited_ok) for p in views
    )
    elastic.grow_if_capacity_returned(s, all_ready and not finishing_now)
    return all_ready and not s.resized_now  # its Pods go: restarting at a new size


def trains_without(s: PlanState, wanted: list[Task]) -> list[str]:
    """The Pods a group trains on without (`GroupPolicy`: a parameter-server job's lost
    workers, while the chief, the ps and another worker run), or none."""
    group = s.job.group
    optional = group.members - group.breaks_group
    ready = {t.name for t in wanted if (p := s.owned.get(t.name)) is not None and p.running_ready}
    missing = [t for t in wanted if t.name not in ready]
    if not optional or not missing or any(t.role not in optional for t in missing):
        return []
    if any(not any(r.role == t.role and r.name in ready for r in wanted) for t in missing):
        return []  # not one of that role left
    return [t.name for t in missing]


def phase_and_conditions(
    s: PlanState, wanted: list[Task], all_ready: bool, without: list[str] | None = None
) -> None:
    """Phase Pending, Running or Restarting, conditions Running and Restarting, and why the
    job waits when it is not running. ``without``: Pods the job runs without (see
    `trains_without`)."""
    phase = st.active_phase(
        s.prev_phase,
        all_ready=all_ready,
        restarted=s.disruptions + s.failures > 0 or elastic.last_resize(s) is not None,
    )
    s.status["phase"] = phase
    if phase == st.RUNNING:
        message = f"All {len(wanted)} Pods are running and ready"
        if without:
            message = (
                f"{len(wanted) - len(without)} of {len(wanted)} Pods running and ready: "
                f"training goes on without {', '.join(without)} (re-created, it rejoins)"
            )
        s.cond(ConditionType.RUNNING, True, Reason.PODS_READY.value, message)
        s.cond(ConditionType.RESTARTING, False, Reason.PODS_READY.value, message)
        if s.prev_phase != st.RUNNING:
            s.event("Normal", Reason.RUNNING.value, message)
    elif phase == st.RESTARTING:
        restarting(s)
    if phase != st.RUNNING:
        explain_waiting(s, wanted)


def restarting(s: PlanState) -> None:
    """Conditions Restarting True and Running False: after which restart, a resize, or a
    disruption loop (a Warning once per new restart)."""
    last = s.status.get("lastRestart") or {}
    reason = str(last.get("reason") or Reason.PODS_NOT_READY.value)
    message = (
        f"Restarting after {reason} of Pod {last['pod']}"
        if last.get("pod")
        else "Waiting for Pods to become ready again"
    )
    resized = elastic.resized_since(s, last.get("time"))
    if resized is not None:
        reason, message = Reason.RESIZING.value, str(resized.get("message") or "")
    elif restart_loop.looping(last, s.status):
        reason = Reason.DISRUPTION_LOOP.value
        message = restart_loop.message(last)
        if last != (s.old.get("lastRestart") or {}):  # once per new restart
            s.event("Warning", reason, message)
    s.cond(ConditionType.RESTARTING, True, reason, message)
    s.cond(ConditionType.RUNNING, False, Reason.RESTARTING.value, message)
    if s.prev_phase != st.RESTARTING:
        s.event("Normal", Reason.RESTARTING.value, message)


def explain_waiting(s: PlanState, wanted: list[Task]) -> None:
    """A Pod that cannot start (a checkpoint claim that does not exist, no node that
    fits, an image that cannot be pulled) shows in the job's own status and events:
    condition Running False with the Pod's reason and message, one Warning per change;
    a group that cannot be placed as a whole, with its placement's verdict
    (`scheduling.Placement.explain`)."""
    unschedulable = [
        p.waiting.partition(":")[2].strip()
        for t in wanted
        if (p := s.owned.get(t.name)) is not None
        and not p.deleting
        and p.waiting.startswith("Unschedulable")
    ]
    placement = s.job.placement
    found = placement.explain(s.pod_group, unschedulable) if placement is not None else None
    if found is not None:
        waiting_condition(s, *found)
        return
    for task in wanted:
        pod = s.owned.get(task.name)
        if pod is None or not pod.waiting or pod.deleting or pod.finished:
            continue
        reason, _, detail = pod.waiting.partition(":")
        message = f"Pod {task.name} cannot start: {reason}: {detail.strip()}"
        waiting_condition(s, reason, message, event_reason=f"Pod{reason}")
        return


def waiting_condition(s: PlanState, reason: str, message: str, event_reason: str = "") -> None:
    """Condition Running False saying why the job waits; a Warning when it changed."""
    # What the stored status shows (this plan may already have set another message).
    shown = conditions.get_condition(list(s.old.get("conditions") or []), ConditionType.RUNNING)
    if (shown or {}).get("message") != message:
        s.event("Warning", event_reason or reason, message)
    s.cond(ConditionType.RUNNING, False, reason, message, add_false=True)

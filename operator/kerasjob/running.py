"""The active job's step of the planner: Pods (re-)created together, phase and conditions.

`Running` is a mixin of `reconcile._Planner`, like `accounting.Accounting` and
`elastic.Elastic`: it uses the planner's state (job, status, conditions, tracked, owned,
actions, events) and steps (cond, event, requeue, delete, finish, finished, concluded, the
accounting's observe, the elastic shrink/grow). `active` runs when the job is neither
finished, invalid, rejected, suspended nor queued by Kueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kerasjob import gang as gangs
from kerasjob import restart_loop
from kerasjob import status as st
from kerasjob.api import Reason, ReplicaRole
from kerasjob.planning import Action, CreatePod, CreateService, JobView, Task
from kerasjob.podview import PodView
from kerasjob.rejection import Rejection
from kerasjob_contract.times import format_time, parse_time

REASON_DEADLINE = Reason.DEADLINE_EXCEEDED.value

#: While old Pods of a job are still going, look again this often (their deletion events
#: normally wake the controller first).
REGROUP_RECHECK_SECONDS = 2.0


class Running:
    """The steps of an active job (`reconcile._Planner` mixes it in, after the others)."""

    job: JobView
    now: datetime
    status: dict[str, Any]
    old: Mapping[str, Any]
    conditions: list[dict[str, Any]]
    tracked: dict[str, dict[str, Any]]
    owned: dict[str, PodView]
    actions: list[Action]
    prev_phase: str | None
    disruptions: int
    failures: int
    rejection: Rejection | None
    gang: gangs.Gang | None
    size: int | None
    resized_now: bool

    def active(self) -> None:
        job = self.job
        if job.kueue is not None:
            self.cond(st.COND_ADMITTED, True, job.kueue.reason, job.kueue.message)
            if job.kueue.recheck_after is not None:
                self.requeue(job.kueue.recheck_after)
        if self.prev_phase in (st.SUSPENDED, st.QUEUED):
            message = "spec.suspend is false: Pods re-created, resuming from the last backup"
            if job.kueue is not None:
                message = f"{job.kueue.message}: Pods created, resuming from the last backup if any"
            self.cond(st.COND_SUSPENDED, False, Reason.RESUMED.value, message)
            self.event("Normal", Reason.RESUMED.value, message)
        if not self.status.get("startTime"):
            self.status["startTime"] = format_time(self.now)
        self.observe()
        if self.concluded():
            return None
        succeeded = {n for n, r in self.tracked.items() if r.get("succeeded")}
        if job.active_deadline_seconds is not None:
            start = parse_time(self.status.get("startTime")) or self.now
            left = start + timedelta(seconds=job.active_deadline_seconds) - self.now
            if left.total_seconds() <= 0:
                self.finish(
                    st.FAILED,
                    REASON_DEADLINE,
                    f"the job ran longer than activeDeadlineSeconds "
                    f"({job.active_deadline_seconds}s)",
                )
                return self.finished()
            self.requeue(left.total_seconds())

        self.shrink_if_capacity_lost()
        job = self.job  # an elastic job's tasks at its (new) size
        succeeded = self.regroup_finished(succeeded)
        creates: list[Action] = []
        for task in job.tasks:
            if task.name in succeeded:
                continue
            pod = self.owned.get(task.name)
            if pod is None:
                creates.append(CreatePod(task, self.size))
            elif pod.finished:
                # Counted above; re-created once it is gone. Its process has ended, so
                # nothing is cut short by grace period 0, and the new Pod need not wait for
                # the kubelet's housekeeping (every 2 s) to confirm the old one's removal.
                self.delete(pod, force=True)
        # Re-create a job's Pods together, once no old incarnation is left: a new worker
        # must not resolve a peer's name to the address of its terminating predecessor
        # (TensorFlow's gRPC then waits out its 30 s minimum between DNS re-resolutions;
        # measured: 37 s instead of 8 s to resume after an eviction).
        old = [
            t.name
            for t in job.tasks
            if t.name not in succeeded
            and (p := self.owned.get(t.name)) is not None
            and (p.finished or p.deleting)
        ]
        if creates and old:
            creates = []
            self.requeue(REGROUP_RECHECK_SECONDS)
        hold = restart_loop.hold_until(self.status.get("lastRestart"), self.status)
        if creates and hold is not None and hold > self.now:
            creates = []  # the same disruption again and again, no progress: back off
            self.requeue((hold - self.now).total_seconds())
        if creates:
            self.actions[:0] = [CreateService(), *creates]
            if st.get_condition(self.conditions, st.COND_CREATED) is None:
                message = f"Creating {len(job.tasks)} Pods and the headless Service"
                self.cond(st.COND_CREATED, True, Reason.CREATED.value, message)
                self.event("Normal", Reason.CREATED.value, message)
            if self.rejection is not None:  # forbidden for now: say so, retry later
                message = self.rejection.describe()
                shown = st.get_condition(self.conditions, st.COND_CREATED) or {}
                if shown.get("status") != "False" or shown.get("message") != message:
                    self.event("Warning", self.rejection.reason, message)
                self.cond(st.COND_CREATED, False, self.rejection.reason, message)
        elif st.get_condition(self.conditions, st.COND_CREATED) is not None and not (
            st.condition_true(self.conditions, st.COND_CREATED)
        ):
            message = "The Pods were created"
            self.cond(st.COND_CREATED, True, Reason.CREATED.value, message)

        wanted = [t for t in job.tasks if t.name not in succeeded]
        views = [self.owned.get(t.name) for t in wanted]
        # A Pod whose trainer exited 0 but is not yet Succeeded is finishing: the job is
        # not restarting (the kubelet reports Ready False a moment before Succeeded), but
        # it does not grow either.
        finishing = any(p is not None and p.exited_ok for p in views)
        all_ready = bool(views) and all(
            p is not None and (p.running_ready or p.exited_ok) for p in views
        )
        self.grow_if_capacity_returned(all_ready and not finishing)
        all_ready = all_ready and not self.resized_now  # its Pods go: restarting at a new size
        if job.gang is not None and not succeeded:
            # Every Pod of its current size, one gang (`gang`). Once a task has finished
            # for good (an evaluator done early), the gang's minCount would never be met
            # again: any further Pod is made outside it.
            epoch = int((self.status.get("elastic") or {}).get("resizes") or 0)
            self.gang = gangs.gang_for(job.name, job.uid, len(self.job.tasks), epoch)
        phase = st.active_phase(
            self.prev_phase,
            all_ready=all_ready,
            restarted=self.disruptions + self.failures > 0 or self.last_resize() is not None,
        )
        self.status["phase"] = phase
        if phase == st.RUNNING:
            message = f"All {len(wanted)} Pods are running and ready"
            self.cond(st.COND_RUNNING, True, Reason.PODS_READY.value, message)
            self.cond(st.COND_RESTARTING, False, Reason.PODS_READY.value, message)
            if self.prev_phase != st.RUNNING:
                self.event("Normal", Reason.RUNNING.value, message)
        elif phase == st.RESTARTING:
            last = self.status.get("lastRestart") or {}
            reason = str(last.get("reason") or Reason.PODS_NOT_READY.value)
            message = (
                f"Restarting after {reason} of Pod {last['pod']}"
                if last.get("pod")
                else "Waiting for Pods to become ready again"
            )
            resized = self.resized_since(last.get("time"))
            if resized is not None:
                reason, message = Reason.RESIZING.value, str(resized.get("message") or "")
            elif restart_loop.looping(last, self.status):
                reason = restart_loop.REASON_LOOP
                message = restart_loop.message(last)
                if last != (self.old.get("lastRestart") or {}):  # once per new restart
                    self.event("Warning", reason, message)
            self.cond(st.COND_RESTARTING, True, reason, message)
            self.cond(st.COND_RUNNING, False, Reason.RESTARTING.value, message)
            if self.prev_phase != st.RESTARTING:
                self.event("Normal", Reason.RESTARTING.value, message)
        if phase != st.RUNNING:
            self.explain_waiting(wanted)

    def regroup_finished(self, succeeded: set[str]) -> set[str]:
        """A training group restarts whole. When a training Pod must be (re-)created while
        others had already finished training (exit 0, e.g. the chief failed or was evicted
        while saving the final model), those join again: TensorFlow forms the cluster only
        with every worker, so a restarted chief alone would wait for them forever. Their
        success is forgotten; they resume from the backup with the others."""
        training = [t for t in self.job.tasks if t.role != ReplicaRole.EVALUATOR.value]
        restarting = [
            t.name
            for t in training
            if t.name not in succeeded
            and ((p := self.owned.get(t.name)) is None or p.finished or p.deleting)
        ]
        done = [t.name for t in training if t.name in succeeded]
        if not restarting or not done:
            return succeeded
        for name in done:  # their finished Pods go with the others' (the loop below)
            self.tracked[name]["succeeded"] = False  # the old Pod's exit stays counted
        self.event(
            "Normal",
            Reason.REGROUPING.value,
            f"{', '.join(done)} had finished training; re-created with "
            f"{', '.join(restarting)} (TensorFlow forms the cluster only with every "
            f"worker): resuming from the last backup",
        )
        return succeeded - set(done)

    def explain_waiting(self, wanted: list[Task]) -> None:
        """A Pod that cannot start (a checkpoint claim that does not exist, no node that
        fits, an image that cannot be pulled) shows in the job's own status and events:
        condition Running False with the Pod's reason and message, one Warning per change;
        a gang that cannot be placed as a whole, with its PodGroup's verdict (`gang.explain`)."""
        unschedulable = [
            p.waiting.partition(":")[2].strip()
            for t in wanted
            if (p := self.owned.get(t.name)) is not None
            and not p.deleting
            and p.waiting.startswith("Unschedulable")
        ]
        found = gangs.explain(self.job.gang, self.gang, gangs.shortage(unschedulable))
        if found is not None:
            self.waiting_condition(*found)
            return
        for task in wanted:
            pod = self.owned.get(task.name)
            if pod is None or not pod.waiting or pod.deleting or pod.finished:
                continue
            reason, _, detail = pod.waiting.partition(":")
            message = f"Pod {task.name} cannot start: {reason}: {detail.strip()}"
            self.waiting_condition(reason, message, event_reason=f"Pod{reason}")
            return

    def waiting_condition(self, reason: str, message: str, event_reason: str = "") -> None:
        """Condition Running False saying why the job waits; a Warning when it changed."""
        # What the stored status shows (this plan may already have set another message).
        shown = st.get_condition(list(self.old.get("conditions") or []), st.COND_RUNNING)
        if (shown or {}).get("message") != message:
            self.event("Warning", event_reason or reason, message)
        self.cond(st.COND_RUNNING, False, reason, message, add_false=True)

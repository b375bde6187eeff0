"""Desired vs observed: one pure function, `plan`, from a job and its Pods to what to do.

The controller (`controller.py`) gathers a `JobView`, the job's stored status and the Pods
from its index, calls `plan`, writes ``Plan.status`` with one conditional merge patch, and
only then carries out ``Plan.actions`` and posts ``Plan.events``. Because the counters and
the bookkeeping (``status.trackedPods``) are written before any Pod is deleted or created,
an operator that dies at any moment restarts from the API server's state and neither loses
nor double-counts a restart; because every child has a deterministic name and an owner
reference, it never creates a duplicate or leaves an orphan.

Per Pod, ``trackedPods[name]`` holds the UID of the incarnation last seen, the container
restarts of it already counted, whether its end (exit, deletion, loss) was counted, and
whether its task succeeded (sticky: a succeeded task is never re-created).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from kerasjob import gang as gangs
from kerasjob import goodput, progress
from kerasjob import restart_policy as rp
from kerasjob import status as st
from kerasjob.accounting import Accounting
from kerasjob.api import Reason
from kerasjob.elastic import PROBE_ROLE, Elastic
from kerasjob.planning import (  # the planner's vocabulary, also used as rc.<name>
    Action,
    CreatePod,
    CreateService,
    DeleteJob,
    DeletePod,
    Event,
    JobView,
    Plan,
    Task,
    newest_incarnations,
)
from kerasjob.podview import PodView
from kerasjob.rejection import Rejection
from kerasjob.running import REGROUP_RECHECK_SECONDS, Running
from kerasjob_contract.times import format_time, parse_time

#: What `rc.<name>` offers its users (controller, acting, observed, the tests): the planner's
#: vocabulary from `planning`, and `plan`.
__all__ = [
    "CLEANUP_GRACE_SECONDS",
    "REGROUP_RECHECK_SECONDS",
    "Action",
    "CreatePod",
    "CreateService",
    "DeleteJob",
    "DeletePod",
    "Event",
    "JobView",
    "Plan",
    "Task",
    "newest_incarnations",
    "plan",
]

REASON_INVALID_SPEC = Reason.INVALID_SPEC.value
REASON_SUCCEEDED = Reason.SUCCEEDED.value


#: Seconds a Succeeded job leaves its still-running Pods (other workers finishing the same
#: step, the evaluator's final evaluation) to end on their own before cleanPodPolicy stops
#: them: a worker that exits 0 a moment after the chief is counted succeeded, not stopped.
CLEANUP_GRACE_SECONDS = 10.0


class _Planner(Accounting, Elastic, Running):
    def __init__(
        self,
        job: JobView,
        old_status: Mapping[str, Any],
        pods: Iterable[PodView],
        now: datetime,
        force_delete_after: float,
        rejection: Rejection | None = None,
    ) -> None:
        self.job = job
        # A refusal of an older generation's child says nothing about this one.
        self.rejection = (
            rejection if rejection is not None and rejection.generation == job.generation else None
        )
        self.now = now
        self.force_delete_after = force_delete_after
        self.old = old_status
        self.status: dict[str, Any] = copy.deepcopy(dict(old_status))
        self.conditions: list[dict[str, Any]] = list(self.status.get("conditions") or [])
        self.tracked: dict[str, dict[str, Any]] = {
            name: dict(rec) for name, rec in (self.status.get("trackedPods") or {}).items()
        }
        restarts = self.status.get("restarts") or {}
        self.disruptions = int(restarts.get("disruptions", 0))
        self.failures = int(restarts.get("failures", 0))
        self.prev_phase: str | None = self.status.get("phase")
        pods = newest_incarnations(pods)
        self.owned = {p.name: p for p in pods if p.owner_uid == job.uid}
        self.stale = [p for p in pods if p.owner_uid is not None and p.owner_uid != job.uid]
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.requeues: list[float] = []
        self.fail_verdict: rp.Verdict | None = None
        self.gang: gangs.Gang | None = None
        self.init_size()  # an elastic job's tasks are those of its current size

    # -- helpers ---------------------------------------------------------------------------

    def cond(
        self, type_: str, status: bool, reason: str, message: str, *, add_false: bool = False
    ) -> None:
        self.conditions = st.set_condition(
            self.conditions,
            type_,
            status,
            reason,
            message,
            now=self.now,
            generation=self.job.generation,
            add_false=add_false,
        )

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def requeue(self, seconds: float) -> None:
        self.requeues.append(max(0.0, seconds))

    def delete(self, pod: PodView, *, force: bool = False) -> None:
        if not pod.deleting:
            self.actions.append(DeletePod(pod.name, pod.uid, force=force))

    # -- steps ---------------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Pods of an older job of the same name go; Pods stuck terminating are forced."""
        for pod in self.stale:
            self.delete(pod)
        for pod in [*self.owned.values(), *self.stale]:
            if pod.deletion_timestamp is None:
                continue
            due = pod.deletion_timestamp + timedelta(seconds=self.force_delete_after)
            if self.now >= due:
                self.actions.append(DeletePod(pod.name, pod.uid, force=True))
                # Look again in case the force delete did not take.
                self.requeue(self.force_delete_after)
            else:
                self.requeue((due - self.now).total_seconds())

    def finish(self, phase: str, reason: str, message: str) -> None:
        self.status["phase"] = phase
        self.status["completionTime"] = format_time(self.now)
        self.cond(
            st.COND_SUCCEEDED if phase == st.SUCCEEDED else st.COND_FAILED, True, reason, message
        )
        for other in (st.COND_RUNNING, st.COND_RESTARTING):
            self.cond(other, False, reason, message)
        self.event("Normal" if phase == st.SUCCEEDED else "Warning", reason, message)

    def finished(self) -> None:
        """A finished job: clean Pods up per cleanPodPolicy, delete it after its TTL.

        Pods still running when a job succeeded get `CLEANUP_GRACE_SECONDS` to end on their
        own; a Pod the operator then stops is marked ``stopped``: its exit is no failure.
        """
        self.late_successes()
        policy = self.job.clean_pod_policy
        done = parse_time(self.status.get("completionTime"))
        grace_left = 0.0
        if self.status.get("phase") == st.SUCCEEDED and done is not None:
            grace_left = (
                done + timedelta(seconds=CLEANUP_GRACE_SECONDS) - self.now
            ).total_seconds()
        for pod in self.owned.values():
            if pod.role == PROBE_ROLE:  # an elastic job's probes: never kept
                self.delete(pod)
                continue
            if not (policy == "All" or (policy == "Running" and not pod.finished)):
                continue
            if not pod.finished and not pod.deleting:
                if grace_left > 0:
                    self.requeue(grace_left)
                    continue
                rec = self.tracked.get(pod.name)
                if rec is not None and rec.get("uid") == pod.uid:
                    rec["stopped"] = True
            self.delete(pod)
        ttl = self.job.ttl_seconds_after_finished
        if ttl is not None and done is not None:
            left = (done + timedelta(seconds=ttl) - self.now).total_seconds()
            if left <= 0:
                self.actions.append(DeleteJob())
            else:
                self.requeue(left)

    def late_successes(self) -> None:
        """After the job finished: a tracked Pod that has since exited 0 still counts as
        succeeded (it exited in the same instant as the chief, or in the cleanup grace)."""
        for task in self.job.tasks:
            pod = self.owned.get(task.name)
            rec = self.tracked.get(task.name)
            if pod is None or rec is None or rec.get("uid") != pod.uid or rec.get("succeeded"):
                continue
            if pod.finished and isinstance(rp.classify_finished(pod), rp.Success):
                rec["succeeded"] = True
                rec["counted"] = True

    def suspended(
        self,
        phase: str = st.SUSPENDED,
        reason: str = Reason.SUSPENDED.value,
        message: str = "spec.suspend is true: Pods deleted, state kept in the checkpoint",
    ) -> None:
        """Held: by spec.suspend, or by Kueue until its Workload is admitted (again). The
        Pods go with their grace period (the trainer saves on SIGTERM); no restart counts."""
        for pod in self.owned.values():
            self.delete(pod)
        for name, rec in self.tracked.items():
            # Pods deleted on purpose: their disappearance is not a disruption.
            current = self.owned.get(name)
            if current is not None:
                rec["uid"] = current.uid
            rec["counted"] = True
        self.status["phase"] = phase
        self.status.pop("startTime", None)
        old = st.get_condition(self.conditions, st.COND_SUSPENDED) or {}
        self.cond(st.COND_SUSPENDED, True, reason, message)
        self.cond(st.COND_RUNNING, False, reason, message)
        self.cond(st.COND_RESTARTING, False, reason, message)
        if self.job.kueue is not None:
            self.cond(st.COND_ADMITTED, False, reason, message, add_false=True)
        if self.prev_phase != phase or old.get("reason") != reason:
            self.event("Normal", reason, message)

    def concluded(self) -> bool:
        """After `observe`: finish the job if an outcome decided it; True if it did."""
        if self.fail_verdict is not None:
            self.finish(st.FAILED, self.fail_verdict.reason, self.fail_verdict.message)
        elif self.tracked.get(self.job.chief, {}).get("succeeded"):
            chief = self.job.chief
            self.finish(st.SUCCEEDED, REASON_SUCCEEDED, f"{chief} completed successfully")
        else:
            return False
        self.finished()
        return True

    def run(self) -> Plan:
        if self.job.deleting or self.job.managed_by is not None:
            # Going away; or run by another controller (spec.managedBy): its status is that
            # controller's to write (MultiKueue copies it from the worker cluster's copy).
            return Plan(status=copy.deepcopy(dict(self.old)))
        self.housekeeping()
        if self.job.generation is not None:
            self.status["observedGeneration"] = self.job.generation
        if self.prev_phase in st.TERMINAL_PHASES:
            self.finished()
        elif self.job.invalid:
            message = "; ".join(self.job.invalid)
            self.finish(st.FAILED, REASON_INVALID_SPEC, f"invalid spec: {message}")
            self.finished()
        elif self.rejection is not None and self.rejection.permanent:
            self.observe()  # what happened before still counts
            self.finish(st.FAILED, self.rejection.reason, self.rejection.describe())
            self.finished()
        elif self.job.suspend:
            # What happened before the suspension still counts (and may end the job).
            self.observe()
            if not self.concluded():
                self.suspended()
        elif self.job.kueue is not None and not self.job.kueue.admitted:
            self.observe()
            if not self.concluded():
                self.suspended(st.QUEUED, self.job.kueue.reason, self.job.kueue.message)
        else:
            self.active()
        self.chief_exit_progress()
        self.finalize_status()
        return Plan(
            status=self.status,
            actions=self.actions,
            events=self.events,
            requeue_after=min(self.requeues) if self.requeues else None,
            gang=self.gang,
            grow_to=self.grow_to,
        )

    def chief_exit_progress(self) -> None:
        """status.progress from the chief's termination message: where training really
        ended (the scraper reads only a running chief, seconds apart)."""
        pod = self.owned.get(self.job.chief)
        if pod is None or pod.termination is None or not pod.termination.message:
            return
        old = self.status.get("progress") or {}
        new = progress.from_termination(
            old, pod.termination.message, total_steps=self.job.total_steps, now=self.now
        )
        if new is None:
            return
        self.status["progress"] = new
        for reason, message in goodput.goodput_events(old.get("goodput"), new.get("goodput") or {}):
            self.event("Normal", reason, message)

    def finalize_status(self) -> None:
        names = {t.name for t in self.job.tasks}
        self.tracked = {n: r for n, r in self.tracked.items() if n in names}
        if self.tracked:
            self.status["trackedPods"] = self.tracked
        else:
            self.status.pop("trackedPods", None)
        if self.conditions:
            self.status["conditions"] = self.conditions
        self.status["restarts"] = {"disruptions": self.disruptions, "failures": self.failures}
        succeeded = [
            t.role for t in self.job.tasks if self.tracked.get(t.name, {}).get("succeeded")
        ]
        owned = [p for p in self.owned.values() if p.name in names]
        stopped = {
            name
            for name, rec in self.tracked.items()
            if rec.get("stopped")
            and (p := self.owned.get(name)) is not None
            and p.uid == rec.get("uid")
        }
        self.status["replicaStatuses"] = st.replica_statuses(
            self.job.roles, owned, succeeded, stopped=stopped
        )
        if not self.status.get("phase"):
            self.status["phase"] = st.PENDING


def plan(
    job: JobView,
    old_status: Mapping[str, Any],
    pods: Iterable[PodView],
    now: datetime,
    *,
    force_delete_after: float = 30.0,
    rejection: Rejection | None = None,
) -> Plan:
    """Decide, from the job, its stored status and its observed Pods, what to do now.

    ``force_delete_after``: seconds past a Pod's deletionTimestamp (which already includes
    its grace period) after which it is deleted again with grace period 0.
    ``rejection``: the API server's last refusal to create a child of this job (see
    `rejection`): a permanent one fails the job, a forbidden one is shown while waiting.
    """
    return _Planner(job, old_status, pods, now, force_delete_after, rejection).run()

"""Counting what happened to a job's Pods since the planner last looked (part of the
planner in `reconcile`): each lost, finished or restarted incarnation is classified by the
restart policy and counted exactly once, its record in ``status.trackedPods`` says so."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kerasjob import restart_loop
from kerasjob import restart_policy as rp
from kerasjob import status as st
from kerasjob.api import Reason
from kerasjob.planning import JobView, Task
from kerasjob.podview import PodView
from kerasjob_contract.times import format_time


class Accounting:
    """The counting half of the planner (`reconcile._Planner` mixes it in)."""

    job: JobView
    now: datetime
    status: dict[str, Any]
    tracked: dict[str, dict[str, Any]]
    owned: dict[str, PodView]
    disruptions: int
    failures: int
    fail_verdict: rp.Verdict | None
    prev_phase: str | None

    def event(self, type_: str, reason: str, message: str) -> None:
        raise NotImplementedError

    def account(self, task: Task, outcome: rp.Outcome) -> None:
        """Count one outcome of one Pod: counters, lastRestart, an event, maybe a verdict."""
        verdict = rp.decide(
            self.job.restart_policy,
            outcome,
            pod=task.name,
            failures_before=self.failures,
            backoff_limit=self.job.backoff_limit,
        )
        if not (verdict.count_failure or verdict.count_disruption):
            return
        if verdict.count_failure:
            self.failures += 1
        else:
            self.disruptions += 1
        reason = getattr(outcome, "reason", "")
        code = getattr(outcome, "exit_code", None)
        last: dict[str, Any] = {
            "time": format_time(self.now),
            "reason": reason,
            "pod": task.name,
            "disruption": verdict.count_disruption,
        }
        if code is not None:
            last["exitCode"] = code
        if verdict.count_disruption:
            last.update(
                restart_loop.record(
                    self.status.get("lastRestart"),
                    reason,
                    self.status,
                    was_running=self.prev_phase == st.RUNNING,
                )
            )
        self.status["lastRestart"] = last
        exit_text = f" (exit code {code})" if code is not None else ""
        if verdict.count_disruption:
            self.event(
                "Normal",
                Reason.POD_DISRUPTED.value,
                f"Pod {task.name}: {reason}{exit_text}; restarting it (disruption "
                f"{self.disruptions}, not counted against backoffLimit)",
            )
        elif not verdict.fail:
            self.event(
                "Warning",
                Reason.POD_FAILED.value,
                f"Pod {task.name}: {reason}{exit_text}; restarting it (failure "
                f"{self.failures} of backoffLimit {self.job.backoff_limit})",
            )
        if verdict.fail and self.fail_verdict is None:
            self.fail_verdict = verdict

    def observe(self) -> None:
        """Count what happened to every wanted Pod since the last look."""
        for task in self.job.tasks:
            pod = self.owned.get(task.name)
            rec = self.tracked.get(task.name)
            if pod is not None and (rec is None or rec.get("uid") != pod.uid):
                if rec is not None and rec.get("uid") and not rec.get("counted"):
                    # The previous incarnation vanished while nobody was looking.
                    self.account(task, rp.classify_lost(None))
                rec = {
                    "uid": pod.uid,
                    "restartCount": 0,
                    "counted": False,
                    "succeeded": bool(rec and rec.get("succeeded")),
                }
                self.tracked[task.name] = rec
            if rec is None:
                continue
            if pod is None:
                if rec.get("uid") and not rec.get("counted"):
                    self.account(task, rp.classify_lost(None))
                    rec["counted"] = True
                continue
            if pod.restart_count > int(rec.get("restartCount", 0)):
                outcome = rp.classify_in_place_restart(pod)
                for _ in range(pod.restart_count - int(rec.get("restartCount", 0))):
                    self.account(task, outcome)
                rec["restartCount"] = pod.restart_count
            if rec.get("counted"):
                continue
            if pod.finished:
                outcome = rp.classify_finished(pod)
                if isinstance(outcome, rp.Success):
                    rec["succeeded"] = True
                    self.event("Normal", Reason.TASK_SUCCEEDED.value, f"Pod {task.name} completed")
                else:
                    self.account(task, outcome)
                rec["counted"] = True
            elif pod.deleting:
                self.account(task, rp.classify_lost(pod))
                rec["counted"] = True

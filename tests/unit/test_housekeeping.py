"""`housekeeping`: stale and stuck Pods first; the chief's last word on progress and the
status written back whole, last."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kerasjob.planner import planning
from kerasjob.planner import reconcile as rc
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, deletes, job, pod, run, settle


def test_stuck_terminating_pod_is_force_deleted() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    stuck = [pod(0), pod(1, deletion_timestamp=NOW - timedelta(seconds=100)), pod(2)]
    p = rc.plan(j, s, stuck, NOW, force_delete_after=30)
    assert [a for a in p.actions if isinstance(a, planning.DeletePod) and a.force]
    fresh = [pod(0), pod(1, deletion_timestamp=NOW - timedelta(seconds=10)), pod(2)]
    p = rc.plan(j, s, fresh, NOW, force_delete_after=30)
    assert not [a for a in p.actions if isinstance(a, planning.DeletePod)]
    assert p.requeue_after == 20


def test_pods_of_an_older_job_with_the_same_name_are_deleted_not_counted() -> None:
    j = job(workers=1)
    p = run(j, {}, [pod(0, owner_uid="old-uid")])
    assert deletes(p) == ["j-worker-0"]
    assert p.status["restarts"] == {"disruptions": 0, "failures": 0}


def test_chief_exit_progress_is_the_last_word() -> None:
    """The chief's termination message (its last /metrics samples) ends status.progress
    where training did, goodput included, with one DisruptionCost event; then nothing new."""
    j = replace(job(clean_pod_policy="Running"), total_steps=1200)
    s = settle(j, [pod(i) for i in range(3)])
    s["progress"] = {
        "step": 800,
        "epoch": 1,
        "totalSteps": 1200,
        "updatedAt": "2026-01-01T11:59:00Z",
    }
    message = (
        "kerasjob_epoch 2\nkerasjob_step 1200\nkerasjob_loss 0.25\n"
        'kerasjob_metric{name="accuracy"} 0.93\n'
        "kerasjob_disruptions_total 1\nkerasjob_lost_seconds_total 11.5\n"
        "kerasjob_steps_redone_total 0\nkerasjob_productive_seconds_total 88.5\n"
        "kerasjob_goodput_ratio 0.885\n"
    )
    done = [
        pod(
            0,
            phase="Succeeded",
            ready=False,
            termination=Termination(0, "Completed", message=message),
        ),
        pod(1),
        pod(2),
    ]
    p = run(j, s, done)
    assert p.status["phase"] == "Succeeded"
    prog = p.status["progress"]
    assert (prog["step"], prog["epoch"], prog["totalSteps"], prog["loss"]) == (1200, 2, 1200, 0.25)
    assert prog["metrics"] == {"accuracy": 0.93}
    assert prog["goodput"] == {
        "disruptions": 1,
        "lostSeconds": 11.5,
        "stepsRedone": 0,
        "productiveSeconds": 88.5,
        "goodput": 0.885,
    }
    assert prog["updatedAt"] == "2026-01-01T12:00:00Z"
    assert [e.reason for e in p.events].count("DisruptionCost") == 1
    again = run(j, p.status, done, NOW + timedelta(seconds=1))
    assert again.status["progress"] == prog and not [
        e for e in again.events if e.reason == "DisruptionCost"
    ]
    # A chief that left no message (killed, or not our trainer) changes nothing.
    silent = [pod(0, phase="Failed", ready=False, termination=Termination(137, "Error"))]
    assert run(j, p.status, silent).status["progress"] == prog

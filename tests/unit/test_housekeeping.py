"""`housekeeping`: stale and stuck Pods and changed children first; the chief's last word on
progress and the status written back whole, last."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kerasjob.planner import housekeeping, planning
from kerasjob.planner import reconcile as rc
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, deletes, job, pod, run, settle


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


# -- restore_children: a Service or NetworkPolicy whose spec someone changed ----------------

POLICY_OPENED = planning.ChildDrift("NetworkPolicy", ("ingress",))
SELECTOR_EDITED = planning.ChildDrift("Service", ("selector", "ports"))


def _restores(p: planning.Plan) -> list[planning.RestoreChild]:
    return [a for a in p.actions if isinstance(a, planning.RestoreChild)]


def test_a_changed_network_policy_and_service_are_patched_back() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    changed = replace(j, drifted_children=(POLICY_OPENED, SELECTOR_EDITED))
    p = rc.plan(changed, s, [pod(i) for i in range(3)], NOW)
    assert _restores(p) == [
        planning.RestoreChild("NetworkPolicy", ("ingress",)),
        planning.RestoreChild("Service", ("selector", "ports")),
    ]
    # Nothing else changes: no Pod is touched, nothing counted, the status is the same; the
    # Warning waits for the patch (`child_restored`, posted by the controller).
    assert creates(p) == [] and deletes(p) == []
    unchanged = rc.plan(j, s, [pod(i) for i in range(3)], NOW)
    assert p.status == unchanged.status and p.events == unchanged.events


def test_the_warning_names_the_object_and_what_differed() -> None:
    event = housekeeping.child_restored(job(), planning.RestoreChild("Service", ("selector",)))
    assert (event.type, event.reason) == ("Warning", "ChildRestored")
    assert event.message == "Service ns/j had been changed (spec.selector); restored to the job's"


def test_nothing_is_restored_when_nothing_drifted() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    assert _restores(rc.plan(j, s, [pod(i) for i in range(3)], NOW)) == []


def test_a_finished_or_suspended_job_keeps_its_policy_held() -> None:
    """Pods a finished job keeps (cleanPodPolicy None) are still behind the policy."""
    j = job(workers=1)
    done = pod(0, phase="Succeeded", ready=False, termination=Termination(0, "Completed"))
    s = settle(j, [done])
    assert s["phase"] == "Succeeded"
    p = rc.plan(replace(j, drifted_children=(POLICY_OPENED,)), s, [done], NOW)
    assert [a.kind for a in _restores(p)] == ["NetworkPolicy"]
    suspended = replace(j, suspend=True, drifted_children=(POLICY_OPENED,))
    assert [a.kind for a in _restores(rc.plan(suspended, {}, [], NOW))] == ["NetworkPolicy"]


def test_a_job_going_away_or_run_elsewhere_restores_nothing() -> None:
    j = replace(job(), drifted_children=(POLICY_OPENED,))
    assert _restores(rc.plan(replace(j, deleting=True), {}, [], NOW)) == []
    elsewhere = replace(j, managed_by="kueue.x-k8s.io/multikueue")
    assert _restores(rc.plan(elsewhere, {}, [], NOW)) == []

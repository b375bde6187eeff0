"""`running`: an active job's named steps: missing Pods created (replacements only once the
old incarnations are gone), readiness, phase and conditions, why its Pods wait."""

from __future__ import annotations

from kerasjob.planner import running
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, deletes, job, pod, run, settle


def test_replacements_wait_until_no_old_incarnation_is_left() -> None:
    """An eviction of worker 1 makes worker 0 exit 42 too: nothing is re-created while either
    old Pod is still there (a new worker would resolve its peer's name to the terminating
    Pod's address), then both are re-created in one plan."""
    j = job(workers=2)
    s = settle(j, [pod(0), pod(1)])
    evicted = pod(1, deletion_timestamp=NOW)
    exited = pod(0, phase="Failed", ready=False, termination=Termination(42, "Error"))
    p = run(j, s, [exited, evicted])
    # Worker 0's exit 42 is the eviction's consequence: one disruption.
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert deletes(p) == ["j-worker-0"] and not creates(p)
    # Worker 0's old Pod is gone, worker 1's still terminating: still nothing (looked at
    # again soon, though the deletion event normally comes first).
    p = run(j, p.status, [evicted])
    assert not creates(p)
    assert p.requeue_after is not None and p.requeue_after <= running.REGROUP_RECHECK_SECONDS
    # Both gone: both re-created together, each restart counted once.
    p = run(j, p.status, [])
    assert creates(p) == ["j-worker-0", "j-worker-1"]
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}


def test_a_pod_that_cannot_start_shows_in_the_job_status_and_events() -> None:
    j = job(workers=2)
    why = 'Unschedulable: 0/5 nodes are available: persistentvolumeclaim "ckpt" not found.'
    pending = [
        pod(0, phase="Pending", ready=False, waiting=why),
        pod(1, phase="Pending", ready=False),
    ]
    p = run(j, {}, pending)
    assert p.status["phase"] == "Pending"
    running = next(c for c in p.status["conditions"] if c["type"] == "Running")
    assert running["status"] == "False" and running["reason"] == "Unschedulable"
    assert 'persistentvolumeclaim "ckpt" not found' in running["message"]
    assert [e.reason for e in p.events if e.type == "Warning"] == ["PodUnschedulable"]
    again = run(j, p.status, pending)
    assert not [e for e in again.events if e.type == "Warning"]  # once, not per reconcile
    ready = run(j, again.status, [pod(0), pod(1)])
    running = next(c for c in ready.status["conditions"] if c["type"] == "Running")
    assert running["status"] == "True"
    # While Restarting too (where the plan first sets its own Running message): once.
    restarting = {**ready.status, "phase": "Restarting"}
    first = run(j, restarting, pending)
    assert [e.reason for e in first.events if e.type == "Warning"] == ["PodUnschedulable"]
    for _ in range(3):
        first = run(j, first.status, pending)
        assert not [e for e in first.events if e.type == "Warning"]

"""`finishing`: the job's end (success of the chief, failures past backoffLimit, a permanent
exit, the deadline) and what follows it (cleanPodPolicy, TTL)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kerasjob.planner import finishing, planning
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, deletes, job, pod, run, settle


def test_backoff_limit_plus_one_failures_fail_the_job() -> None:
    j = job(backoff_limit=1)
    s = settle(j, [pod(i) for i in range(3)])
    one = [pod(0, restart_count=1, last_termination=Termination(1, "Error")), pod(1), pod(2)]
    s = run(j, s, one).status
    assert s["phase"] != "Failed"
    two = [pod(0, restart_count=2, last_termination=Termination(1, "Error")), pod(1), pod(2)]
    p = run(j, s, two)
    assert p.status["phase"] == "Failed"
    failed = next(c for c in p.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and failed["status"] == "True"
    assert p.status["completionTime"]
    # cleanPodPolicy Running: running Pods are deleted.
    assert sorted(deletes(p)) == ["j-worker-0", "j-worker-1", "j-worker-2"]


def test_exit_78_fails_at_once() -> None:
    j = job(backoff_limit=6)
    s = settle(j, [pod(i) for i in range(3)])
    p = run(
        j, s, [pod(0), pod(1, restart_count=1, last_termination=Termination(78, "Error")), pod(2)]
    )
    assert p.status["phase"] == "Failed"
    assert p.status["conditions"][-1]["reason"] in ("InvalidConfig",) or any(
        c["type"] == "Failed" and c["reason"] == "InvalidConfig" for c in p.status["conditions"]
    )


def test_exit_78_puts_the_trainers_reason_in_the_failed_condition_and_the_event() -> None:
    """The reason the trainer left in its termination message (kerasjob: invalid
    configuration: ...) is the Failed condition's message and the Warning event's, which
    `kubectl describe kerasjob` and `kerasjob describe` show."""
    why = "checkpoint directory /ckpt/ns/j/u cannot be written: [Errno 30] Read-only file system"
    message = f"kerasjob_step 0\nkerasjob: invalid configuration: {why}\n"
    j = job(backoff_limit=6)
    s = settle(j, [pod(i) for i in range(3)])
    ended = pod(
        1, phase="Failed", ready=False, termination=Termination(78, "Error", message=message)
    )
    p = run(j, s, [pod(0), ended, pod(2)])
    expected = f"Pod j-worker-1 exited with 78: invalid configuration: {why}; retrying cannot help"
    failed = next(c for c in p.status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True",
        "InvalidConfig",
        expected,
    )
    assert ("Warning", "InvalidConfig", expected) in [
        (e.type, e.reason, e.message) for e in p.events
    ], p.events


def test_never_policy_first_failure_fails() -> None:
    j = job(restart_policy="Never")
    s = settle(j, [pod(i) for i in range(3)])
    p = run(j, s, [pod(0), pod(1, phase="Failed", termination=Termination(1, "Error")), pod(2)])
    assert p.status["phase"] == "Failed"
    # ... but a disruption still restarts.
    p = run(j, s, [pod(0), pod(1, phase="Failed", termination=Termination(43, "Error")), pod(2)])
    assert p.status["phase"] != "Failed" and deletes(p) == ["j-worker-1"]


def test_chief_success_succeeds_job_and_is_never_recreated() -> None:
    j = job(clean_pod_policy="Running")
    s = settle(j, [pod(i) for i in range(3)])
    done = [
        pod(0, phase="Succeeded", ready=False, termination=Termination(0, "Completed")),
        pod(1),
        pod(2),
    ]
    p = run(j, s, done)
    assert p.status["phase"] == "Succeeded"
    assert p.status["replicaStatuses"]["worker"]["succeeded"] == 1
    # The others get CLEANUP_GRACE_SECONDS to end on their own, then are stopped.
    assert not deletes(p) and p.requeue_after == finishing.CLEANUP_GRACE_SECONDS
    assert not creates(p)
    later = NOW + timedelta(seconds=finishing.CLEANUP_GRACE_SECONDS)
    p = run(j, p.status, done, later)
    assert sorted(deletes(p)) == ["j-worker-1", "j-worker-2"]
    assert not creates(p)
    # The finished Pod is gone later: never recreated, no disruption.
    p = run(j, p.status, [])
    assert not creates(p) and p.status["restarts"]["disruptions"] == 0


def test_non_chief_success_is_not_recreated() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    done = [pod(0), pod(1), pod(2, phase="Succeeded", termination=Termination(0))]
    s = run(j, s, done).status
    p = run(j, s, [pod(0), pod(1)])
    assert not creates(p) and s["phase"] == "Running"
    assert p.status["restarts"]["disruptions"] == 0


def test_clean_pod_policies() -> None:
    for policy, expected in [
        ("All", ["j-worker-0", "j-worker-1", "j-worker-2"]),
        ("None", []),
        ("Running", ["j-worker-1", "j-worker-2"]),
    ]:
        j = job(clean_pod_policy=policy)
        s = settle(j, [pod(i) for i in range(3)])
        done = [pod(0, phase="Succeeded", termination=Termination(0)), pod(1), pod(2)]
        s = run(j, s, done).status
        later = NOW + timedelta(seconds=finishing.CLEANUP_GRACE_SECONDS)
        assert sorted(deletes(run(j, s, done, later))) == expected, policy


def test_workers_ending_with_the_chief_are_counted_succeeded() -> None:
    """The chief's exit is seen first; the others exit 0 a moment later (after the job is
    Succeeded): replicaStatuses counts all three."""
    j = job(clean_pod_policy="Running")
    s = settle(j, [pod(i) for i in range(3)])
    ok = Termination(0, "Completed")
    s = run(j, s, [pod(0, phase="Succeeded", termination=ok), pod(1), pod(2)]).status
    assert s["phase"] == "Succeeded"
    all_done = [pod(i, phase="Succeeded", ready=False, termination=ok) for i in range(3)]
    p = run(j, s, all_done, NOW + timedelta(seconds=1))
    assert p.status["replicaStatuses"]["worker"] == {
        "active": 0,
        "ready": 0,
        "succeeded": 3,
        "failed": 0,
    }
    assert not deletes(p)


def test_a_pod_stopped_by_the_cleanup_is_not_failed() -> None:
    """The evaluator still runs when the chief succeeds; after the grace the operator stops
    it (SIGTERM, exit 143): not a failure of the evaluator."""
    tasks = (
        planning.Task("j-worker-0", "worker", 0),
        planning.Task("j-evaluator-0", "evaluator", 0),
    )
    j = job(tasks=tasks, clean_pod_policy="Running")
    ev = pod(0, uid="ev", name="j-evaluator-0", role="evaluator")
    s = settle(j, [pod(0), ev])
    ok = Termination(0, "Completed")
    s = run(j, s, [pod(0, phase="Succeeded", termination=ok), ev]).status
    later = NOW + timedelta(seconds=finishing.CLEANUP_GRACE_SECONDS)
    p = run(j, s, [pod(0, phase="Succeeded", termination=ok), ev], later)
    assert deletes(p) == ["j-evaluator-0"]
    killed = replace(
        ev, phase="Failed", termination=Termination(143, "Error"), deletion_timestamp=later
    )
    p = run(j, p.status, [pod(0, phase="Succeeded", termination=ok), killed], later)
    assert p.status["phase"] == "Succeeded"
    assert p.status["replicaStatuses"]["evaluator"]["failed"] == 0
    assert p.status["replicaStatuses"]["worker"]["succeeded"] == 1


def test_deadline() -> None:
    j = job(active_deadline_seconds=60)
    s = settle(j, [pod(i) for i in range(3)])
    p = run(j, s, [pod(i) for i in range(3)], NOW + timedelta(seconds=30))
    assert p.status["phase"] == "Running" and p.requeue_after == 30
    p = run(j, s, [pod(i) for i in range(3)], NOW + timedelta(seconds=61))
    assert p.status["phase"] == "Failed"
    assert any(c.get("reason") == "DeadlineExceeded" for c in p.status["conditions"])


def test_ttl_deletes_the_job() -> None:
    j = job(ttl_seconds_after_finished=10)
    s = settle(j, [pod(i) for i in range(3)])
    s = run(j, s, [pod(0, phase="Succeeded", termination=Termination(0))]).status
    p = run(j, s, [], NOW + timedelta(seconds=5))
    assert p.requeue_after == 5 and not any(isinstance(a, planning.DeleteJob) for a in p.actions)
    p = run(j, s, [], NOW + timedelta(seconds=10))
    assert any(isinstance(a, planning.DeleteJob) for a in p.actions)


def test_a_restarting_chief_regroups_workers_that_had_finished() -> None:
    """The workers finished training (exit 0), then the chief failed while saving the model:
    a chief re-created alone would wait for them forever (TensorFlow forms the cluster only
    with every worker), so they are re-created with it and resume from the backup."""
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    ok = Termination(0, "Completed")
    finished = [
        pod(0),
        pod(1, phase="Succeeded", ready=False, termination=ok),
        pod(2, phase="Succeeded", ready=False, termination=ok),
    ]
    s = run(j, s, finished).status
    assert s["phase"] == "Running" and s["replicaStatuses"]["worker"]["succeeded"] == 2
    failed = [
        pod(0, phase="Failed", ready=False, termination=Termination(1, "Error")),
        *finished[1:],
    ]
    p = run(j, s, failed)
    assert sorted(deletes(p)) == ["j-worker-0", "j-worker-1", "j-worker-2"] and not creates(p)
    assert [e.reason for e in p.events].count("Regrouping") == 1
    assert p.status["restarts"] == {"disruptions": 0, "failures": 1}
    p = run(j, p.status, [])  # all gone: the whole group comes back
    assert creates(p) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    back = [pod(i, uid=f"v{i}") for i in range(3)]
    s = run(j, p.status, back).status
    assert s["phase"] == "Running" and s["replicaStatuses"]["worker"]["succeeded"] == 0
    assert s["restarts"] == {"disruptions": 0, "failures": 1}  # the workers' exits not counted
    done = [pod(0, uid="v0", phase="Succeeded", ready=False, termination=ok), *back[1:]]
    assert run(j, s, done).status["phase"] == "Succeeded"

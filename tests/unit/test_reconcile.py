"""The planner: desired vs observed Pods -> status, actions, events."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from builders import NOW, creates, deletes, job, pod, run, settle

from kerasjob.planner import accounting, finishing, planning, running
from kerasjob.planner import reconcile as rc
from kerasjob.planner.podview import Termination


def test_new_job_creates_service_and_every_pod() -> None:
    p = run(job(), {}, [])
    assert isinstance(p.actions[0], planning.CreateService)
    assert creates(p) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert p.status["phase"] == "Pending"
    assert p.status["startTime"] == "2026-01-01T12:00:00Z"
    assert p.status["restarts"] == {"disruptions": 0, "failures": 0}
    assert any(e.reason == "Created" for e in p.events)
    assert p.status["conditions"][0]["type"] == "Created"


def test_running_when_all_ready_and_idempotent() -> None:
    j = job()
    pods = [pod(i) for i in range(3)]
    s = settle(j, pods)
    assert s["phase"] == "Running"
    assert s["replicaStatuses"]["worker"] == {"active": 3, "ready": 3, "succeeded": 0, "failed": 0}
    again = run(j, s, pods)
    assert again.status == s and not again.actions and not again.events


def test_deleted_pod_is_a_disruption_counted_once_and_recreated() -> None:
    j = job()
    pods = [pod(i) for i in range(3)]
    s = settle(j, pods, settle(j, pods))
    # Someone deletes worker 1: deletionTimestamp set.
    dying = [pod(0), pod(1, deletion_timestamp=NOW), pod(2)]
    p = run(j, s, dying)
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["phase"] == "Restarting"
    assert p.status["lastRestart"]["pod"] == "j-worker-1"
    assert not creates(p)
    s = p.status
    # Seen again while still terminating: not counted twice.
    assert run(j, s, dying).status["restarts"]["disruptions"] == 1
    # Gone: re-created with the same name, still counted once.
    p = run(j, s, [pod(0), pod(2)])
    assert creates(p) == ["j-worker-1"]
    assert p.status["restarts"]["disruptions"] == 1
    assert p.restart_attempt == 1
    s = p.status
    # The new incarnation appears and gets ready.
    p = run(j, s, [pod(0), pod(1, uid="u1b"), pod(2)])
    assert p.status["phase"] == "Running"
    assert p.status["trackedPods"]["j-worker-1"]["uid"] == "u1b"
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}


def test_a_lost_worker_is_recreated_alone_and_the_survivors_restart_in_place() -> None:
    j = job()
    pods = [pod(i) for i in range(3)]
    s = settle(j, pods, settle(j, pods))
    # Worker 1's container is SIGKILLed; the survivors' trainers restart inside their Pods
    # (the container's supervisor), so their Pods stay Running and ready throughout.
    killed = pod(1, phase="Failed", termination=Termination(137, "Error"))
    p = run(j, s, [pod(0), killed, pod(2)])
    last = p.status["lastRestart"]
    assert last["pod"] == "j-worker-1" and last["exitCode"] == 137
    assert last["restartedInPlace"] == ["j-worker-0", "j-worker-2"]
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert deletes(p) == ["j-worker-1"]
    event = next(e for e in p.events if e.reason == "PodDisrupted")
    assert event.message.endswith("j-worker-0, j-worker-2 restart in place")
    # Gone: only worker 1 is re-created; still one disruption.
    p = run(j, p.status, [pod(0), pod(2)])
    assert creates(p) == ["j-worker-1"]
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["lastRestart"]["restartedInPlace"] == ["j-worker-0", "j-worker-2"]


def test_a_restart_with_every_pod_gone_restarts_none_in_place() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    p = run(j, s, [])
    assert "restartedInPlace" not in p.status["lastRestart"]


def test_pod_vanished_while_operator_was_away_counts_one_disruption() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    p = run(j, s, [pod(0), pod(2)])
    assert p.status["restarts"]["disruptions"] == 1
    assert creates(p) == ["j-worker-1"]
    # ... or was already replaced by a new incarnation we never saw missing.
    p = run(j, s, [pod(0), pod(1, uid="new"), pod(2)])
    assert p.status["restarts"]["disruptions"] == 1


def test_eviction_condition_gives_the_reason() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    p = run(
        j,
        s,
        [pod(0), pod(1, deletion_timestamp=NOW, disruption_reason="EvictionByEvictionAPI"), pod(2)],
    )
    assert p.status["lastRestart"]["reason"] == "EvictionByEvictionAPI"
    assert p.status["lastRestart"]["disruption"] is True


def test_in_place_restarts_count_by_exit_code_once() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    crashed = [
        pod(0, restart_count=1, last_termination=Termination(1, "Error")),
        pod(1, restart_count=1, last_termination=Termination(43, "Error")),
        pod(2),
    ]
    p = run(j, s, crashed)
    assert p.status["restarts"] == {"disruptions": 1, "failures": 1}
    assert not p.actions
    assert run(j, p.status, crashed).status["restarts"] == {"disruptions": 1, "failures": 1}
    assert any(e.type == "Warning" and e.reason == "PodFailed" for e in p.events)


def test_failed_pod_counts_a_failure_and_is_recreated() -> None:
    j = job(restart_policy="OnFailure")
    s = settle(j, [pod(i) for i in range(3)])
    failed = [
        pod(0),
        pod(1, phase="Failed", ready=False, termination=Termination(1, "Error")),
        pod(2),
    ]
    p = run(j, s, failed)
    assert p.status["restarts"] == {"disruptions": 0, "failures": 1}
    assert deletes(p) == ["j-worker-1"]
    p2 = run(j, p.status, failed)
    assert p2.status["restarts"]["failures"] == 1  # counted once
    p3 = run(j, p2.status, [pod(0), pod(2)])
    assert creates(p3) == ["j-worker-1"] and p3.status["restarts"]["failures"] == 1


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


def test_a_trainer_that_exited_is_acted_on_before_the_kubelet_marks_its_pod_failed() -> None:
    """The kubelet writes the trainer's termination at once but turns the Pod Failed only
    after tearing its sandbox down (1.1 s on the real node): the exit is counted and the
    Pod force-deleted from the first, so its replacement is not held back."""
    j = job()
    pods = [pod(i) for i in range(3)]
    s = settle(j, pods, settle(j, pods))
    exited = pod(1, ready=False, termination=Termination(137, "Error"))  # phase Running
    p = run(j, s, [pod(0), exited, pod(2)])
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["lastRestart"]["restartedInPlace"] == ["j-worker-0", "j-worker-2"]
    assert [(a.name, a.force) for a in p.actions if isinstance(a, planning.DeletePod)] == [
        ("j-worker-1", True)
    ]
    # Then Failed, still going: not counted again.
    failed = replace(exited, phase="Failed")
    assert run(j, p.status, [pod(0), failed, pod(2)]).status["restarts"]["disruptions"] == 1


def test_an_evicted_pod_whose_trainer_saved_and_exited_is_not_waited_for() -> None:
    """Evicted (its grace period running): once its trainer has saved and exited 42, the
    Pod is deleted with grace period 0 rather than waiting for the kubelet's teardown."""
    j = job()
    pods = [pod(i) for i in range(3)]
    s = settle(j, pods, settle(j, pods))
    going = pod(1, deletion_timestamp=NOW, disruption_reason="EvictionByEvictionAPI")
    p = run(j, s, [pod(0), going, pod(2)])
    assert p.status["restarts"]["disruptions"] == 1 and not deletes(p)  # saving: its grace
    saved = replace(going, ready=False, termination=Termination(42, "Error"))
    p = run(j, p.status, [pod(0), saved, pod(2)], NOW + timedelta(seconds=1))
    assert [(a.name, a.force) for a in p.actions if isinstance(a, planning.DeletePod)] == [
        ("j-worker-1", True)
    ]
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["lastRestart"]["reason"] == "EvictionByEvictionAPI"


def test_a_trainer_that_exited_0_waits_for_its_pod_to_succeed() -> None:
    """Exit 0 is finishing, not restarting: no Pod is deleted or re-created for it."""
    j = job()
    pods = [pod(i) for i in range(3)]
    s = settle(j, pods, settle(j, pods))
    done = pod(2, ready=False, termination=Termination(0, "Completed"))
    p = run(j, s, [pod(0), pod(1), done])
    assert not deletes(p) and not creates(p)
    assert p.status["restarts"] == {"disruptions": 0, "failures": 0}


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


def test_the_same_disruption_without_progress_backs_off() -> None:
    """A nodeName that does not exist: every Pod is deleted by the Pod GC, again and again.
    From the 3rd loss in a row with no progress, re-creation waits (10 s, 20 s, ...), the
    job says why, and backoffLimit is never touched."""
    j = job(workers=1)
    s = settle(j, [pod(0)])
    now = NOW
    delays = []
    for n in range(1, 6):
        now += timedelta(seconds=60)
        p = run(j, s, [], now)  # the Pod is gone
        last = p.status["lastRestart"]
        assert last["repeated"] == n and last["reason"] == "PodDeleted"
        assert p.status["restarts"] == {"disruptions": n, "failures": 0}
        delays.append(p.requeue_after if not creates(p) else 0)
        restarting = next(c for c in p.status["conditions"] if c["type"] == "Restarting")
        if n >= 3:
            assert restarting["reason"] == "DisruptionLoop"
            assert "times in a row with no training progress" in restarting["message"]
            assert any(e.reason == "DisruptionLoop" for e in p.events)
            # Once the delay passed, the Pod is re-created.
            wait = timedelta(seconds=p.requeue_after or 0)
            assert creates(run(j, p.status, [], now + wait)) == ["j-worker-0"]
        # The new Pod never runs (its node does not exist) until the GC deletes it again.
        stuck = pod(0, uid=f"u{n}", phase="Pending", ready=False)
        s = run(j, p.status, [stuck], now + timedelta(seconds=300)).status
    assert delays == [0, 0, 10.0, 20.0, 40.0]


def test_a_group_lost_over_several_looks_is_one_round_of_the_loop() -> None:
    """Worker 1 of 8 deleted, and the 7 others' trainers (no supervisor in their image)
    exit 42 one look after another: their exits are the deletion's consequence, one
    disruption and one restart of the group, so no back-off (before, it counted 8
    disruptions, 8 restarts in a row, and held the group back 160 s); the next loss, once
    the group is back, is the next round."""
    j = job(workers=8)
    pods = [pod(i) for i in range(8)]
    s = settle(j, pods, settle(j, pods))
    alive = {i: pod(i) for i in range(8)}
    del alive[1]
    s = run(j, s, list(alive.values())).status
    assert s["lastRestart"]["repeated"] == 1
    for i in (0, 2, 3, 4, 5, 6, 7):
        alive[i] = pod(i, phase="Failed", ready=False, termination=Termination(42, "Error"))
        p = run(j, s, list(alive.values()), NOW + timedelta(seconds=i))
        s = p.status
        assert s["lastRestart"]["repeated"] == 1, (i, s["lastRestart"])
        assert s["lastRestart"]["pod"] == "j-worker-1"
        assert any("not counted again" in e.message for e in p.events), p.events
    assert s["restarts"] == {"disruptions": 1, "failures": 0}
    assert all(rec["counted"] for rec in s["trackedPods"].values())
    p = run(j, s, [], NOW + timedelta(seconds=8))  # the finished Pods are gone
    assert creates(p) == [f"j-worker-{i}" for i in range(8)]  # no hold
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    back = [pod(i, uid=f"n{i}", phase="Pending", ready=False) for i in range(8)]
    s = run(j, p.status, back, NOW + timedelta(seconds=9)).status
    # The next round (the group is back, never ready, no progress, the same reason as the
    # round's): counted as the 2nd in a row.
    del back[3]
    p = run(j, s, back, NOW + timedelta(seconds=10))
    assert p.status["lastRestart"]["repeated"] == 2
    assert p.status["restarts"] == {"disruptions": 2, "failures": 0}


def _two_workers_running() -> tuple[dict, dict]:
    j = job(workers=2)
    return j, settle(j, [pod(0), pod(1)], settle(j, [pod(0), pod(1)]))


def test_a_survivor_seen_leaving_before_the_lost_worker_stands_in_for_it() -> None:
    """Worker 1's container is SIGKILLed; worker 0's trainer (no supervisor) exits 43, and
    the kubelet happens to report worker 0 first: its exit is counted, standing in for the
    loss not seen yet, which takes the count over when it is seen (one disruption, the
    lost Pod's reason), even after worker 0 was re-created meanwhile."""
    j, s = _two_workers_running()
    left = pod(0, phase="Failed", ready=False, termination=Termination(43, "Error"))
    p = run(j, s, [left, pod(1)])
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["lastRestart"]["pod"] == "j-worker-0"
    assert p.status["lastRestart"]["standIn"] is True
    p = run(j, p.status, [pod(0, uid="u0b", phase="Pending", ready=False), pod(1)])
    killed = pod(1, ready=False, termination=Termination(137, "Error"))
    p = run(j, p.status, [pod(0, uid="u0b", phase="Pending", ready=False), killed])
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    last = p.status["lastRestart"]
    assert last["pod"] == "j-worker-1" and last["exitCode"] == 137 and "standIn" not in last
    assert any("counted when Pod j-worker-0's trainer left" in e.message for e in p.events)
    # Once only: another loss of the round adds one.
    p = run(j, p.status, [pod(0, uid="u0b", deletion_timestamp=NOW), killed])
    assert p.status["restarts"] == {"disruptions": 2, "failures": 0}


def test_one_sigterm_that_stops_the_whole_group_is_one_disruption() -> None:
    """SIGTERM to one worker's container (no Pod deleted): the group saves and every
    trainer exits 42, seen over two looks: one disruption."""
    j, s = _two_workers_running()
    saved = [
        pod(i, phase="Failed", ready=False, termination=Termination(42, "Error")) for i in (0, 1)
    ]
    p = run(j, s, [saved[0], pod(1)])
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    p = run(j, p.status, saved, NOW + timedelta(seconds=1))
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["lastRestart"]["pod"] == "j-worker-0"


def test_a_group_exit_long_after_the_last_restart_is_a_restart_of_its_own() -> None:
    """The round is open ROUND_SECONDS at most: a 43 later (a trainer whose in-place restarts
    were used up while its group never formed) is counted, so a loop still backs off."""
    j, s = _two_workers_running()
    s = run(j, s, [pod(0)]).status  # worker 1 deleted: counted
    late = NOW + timedelta(seconds=accounting.ROUND_SECONDS + 1)
    left = pod(0, phase="Failed", ready=False, termination=Termination(43, "Error"))
    p = run(j, s, [left, pod(1, uid="u1b", phase="Pending", ready=False)], late)
    assert p.status["restarts"] == {"disruptions": 2, "failures": 0}
    assert p.status["lastRestart"]["pod"] == "j-worker-0"
    # The same exit made within the round, seen only that late (a busy operator): the
    # kubelet's finishedAt counts, not when the operator looked.
    early = Termination(43, "Error", finished_at=NOW + timedelta(seconds=2))
    left = pod(0, phase="Failed", ready=False, termination=early)
    p = run(j, s, [left, pod(1, uid="u1b", phase="Pending", ready=False)], late)
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}


def test_progress_between_disruptions_resets_the_loop() -> None:
    j = job(workers=1)
    s = settle(j, [pod(0)])
    for n in range(4):
        s = run(j, s, [], NOW + timedelta(seconds=n)).status
        s = {**s, "progress": {"step": 100 * (n + 1)}}  # trained in between
        starting = pod(0, uid=f"u{n}", phase="Pending", ready=False)
        s = run(j, s, [starting], NOW + timedelta(seconds=n)).status
    assert s["lastRestart"]["repeated"] == 1
    restarting = next(c for c in s["conditions"] if c["type"] == "Restarting")
    assert restarting["reason"] != "DisruptionLoop"


def test_invalid_spec_fails_once_without_actions() -> None:
    j = job(invalid=("spec.port 9464 collides with the metrics port",))
    p = run(j, {}, [])
    assert p.status["phase"] == "Failed"
    cond = next(c for c in p.status["conditions"] if c["type"] == "Failed")
    assert cond["reason"] == "InvalidSpec" and "9464" in cond["message"]
    assert [e.type for e in p.events] == ["Warning"]
    assert not p.actions
    again = run(j, p.status, [])
    assert again.status == p.status and not again.events


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


def test_suspend_and_resume() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    sj = replace(j, suspend=True)
    p = run(sj, s, [pod(i) for i in range(3)])
    assert p.status["phase"] == "Suspended" and sorted(deletes(p)) == [
        "j-worker-0",
        "j-worker-1",
        "j-worker-2",
    ]
    assert "startTime" not in p.status
    s = run(sj, p.status, []).status
    assert s["restarts"] == {"disruptions": 0, "failures": 0}
    p = run(j, s, [])
    assert creates(p) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert p.status["restarts"] == {"disruptions": 0, "failures": 0}
    assert any(c["type"] == "Suspended" and c["status"] == "False" for c in p.status["conditions"])


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


def test_deleting_job_does_nothing() -> None:
    p = run(job(deleting=True), {"phase": "Running"}, [])
    assert not p.actions and p.status == {"phase": "Running"}


def test_a_stale_index_entry_of_the_old_incarnation_is_ignored() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    s = run(j, s, [pod(0), pod(1, deletion_timestamp=NOW, resource_version=10), pod(2)]).status
    s = run(j, s, [pod(0), pod(2)]).status
    new = pod(1, uid="u1b", resource_version=20)
    s = run(j, s, [pod(0), new, pod(2)]).status
    assert s["restarts"]["disruptions"] == 1
    # The old incarnation's DELETED event is processed after the new one's ADDED.
    old = pod(1, deletion_timestamp=NOW, resource_version=10)
    for order in ([pod(0), old, new, pod(2)], [pod(0), new, old, pod(2)]):
        p = run(j, s, order)
        assert p.status["restarts"]["disruptions"] == 1
        assert p.status["trackedPods"]["j-worker-1"]["uid"] == "u1b"
        assert not p.actions


def test_what_happened_before_a_suspension_is_still_counted() -> None:
    j = job()
    s = settle(j, [pod(i) for i in range(3)])
    crashed = [pod(0), pod(1, restart_count=1, last_termination=Termination(1, "Error")), pod(2)]
    sj = replace(j, suspend=True)
    p = run(sj, s, crashed)
    assert p.status["phase"] == "Suspended"
    assert p.status["restarts"] == {"disruptions": 0, "failures": 1}
    # The Pods it deletes itself are not disruptions, whenever they go.
    s = run(sj, p.status, [pod(0, deletion_timestamp=NOW), pod(2)]).status
    assert s["restarts"] == {"disruptions": 0, "failures": 1}
    # A permanent exit seen while suspending fails the job instead.
    fatal = [pod(0), pod(1, restart_count=1, last_termination=Termination(78)), pod(2)]
    assert run(sj, settle(j, [pod(i) for i in range(3)]), fatal).status["phase"] == "Failed"


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


def test_preemptions_of_a_running_job_are_no_loop() -> None:
    """A job that was Running when it lost a Pod made progress, step or no step (a custom
    trainer may export none): spot preemptions never back off."""
    j = job(workers=1)
    s = settle(j, [pod(0)])
    for n in range(5):
        s = run(j, s, [], NOW + timedelta(seconds=n)).status
        assert s["lastRestart"]["repeated"] == 1
        s = run(j, s, [pod(0, uid=f"u{n}")], NOW + timedelta(seconds=n)).status
        assert s["phase"] == "Running"


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

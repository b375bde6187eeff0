"""`accounting`: what happened to each Pod, counted once (disruptions, failures, in-place
restarts, group exits that follow a loss), through `reconcile.plan`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kerasjob.planner import accounting, planning
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, deletes, job, pod, run, settle


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

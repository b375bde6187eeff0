"""`restart_loop`: the same disruption again and again with no training progress backs off;
progress, or a job that was Running, starts the count afresh."""

from __future__ import annotations

from datetime import timedelta

from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, job, pod, run, settle


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

"""`suspension`: a job held by spec.suspend (or a queue): its Pods go, no restart counts,
what happened before still does."""

from __future__ import annotations

from dataclasses import replace

from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, deletes, job, pod, run, settle


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

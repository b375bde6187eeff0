"""`reconcile.plan`, the composition: a new job, a settled one left alone, the one step that fits
(`decide`: a job going away, an invalid spec). Each step has its own test module:
`test_accounting`, `test_restart_loop`, `test_running`, `test_finishing`, `test_suspension`,
`test_housekeeping`, `test_elastic_planner`."""

from __future__ import annotations

from kerasjob.planner import planning
from kerasjob_dev.testing.builders import creates, job, pod, run, settle


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


def test_deleting_job_does_nothing() -> None:
    p = run(job(deleting=True), {"phase": "Running"}, [])
    assert not p.actions and p.status == {"phase": "Running"}

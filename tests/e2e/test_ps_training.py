"""examples/parameter-server.yaml (a chief, 2 workers, 1 ps; a backup every 50 steps; here
4 x 500 steps, time for two disruptions) under the Helm-installed operator on the real
node, through a worker's deletion and a ps's deletion: the worker is re-created alone while
the chief trains on (the chief's and the ps's Pod UIDs unchanged, the job Running), the
ps's SIGTERM makes the chief save at a step boundary and the group resumes at exactly that
step (the chief's Pod UID still unchanged: it restarts in place); exactly 2,000 steps; each
loss counted once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev.cluster import wait_for
from kerasjob_dev.synckube import pod_path
from kerasjob_dev.testing.training_run import JOBS, RESUMED, Run, last_step, mnist_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

TOTAL = 2000
SAVED = re.compile(r"^kerasjob: preempted: state saved at step (\d+);", re.M)


@pytest.fixture
def run(deployment: Any, tmp_path: Path):  # type: ignore[no-untyped-def]
    r = Run(deployment, "ps-e2e", tmp_path)
    try:
        yield r
    finally:
        r.cleanup()


def _uids(run: Run, pods: list[str]) -> dict[str, str]:
    return {
        p: ((run.kj.get(pod_path(run.ns, p)) or {}).get("metadata") or {}).get("uid", "")
        for p in pods
    }


def _past(run: Run, pod: str, step: int) -> None:
    wait_for(
        lambda: last_step(run.log(pod)) >= step,
        timeout=600,
        interval=0.5,
        what=f"{pod} past step {step}",
    )


def _delete(run: Run, pod: str) -> None:
    run.kj.request("DELETE", pod_path(run.ns, pod))


def _finished(run: Run) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        status = run.status()
        assert status.get("phase") != "Failed", status
        return status if status.get("phase") == "Succeeded" else None

    return wait_for(done, timeout=900, interval=1, what="the job to succeed")  # type: ignore[no-any-return]


def test_a_worker_and_a_ps_deleted_the_job_trains_to_the_end(run: Run) -> None:
    name = run.name
    chief, worker, ps = f"{name}-chief-0", f"{name}-worker-1", f"{name}-ps-0"
    run.make_claim()
    run.kj.request(
        "POST",
        JOBS.format(ns=run.ns),
        body=mnist_job(name, run.claim, "parameter-server.yaml", epochs=4, stepsPerEpoch=500),
    )
    _past(run, chief, 30)
    before = _uids(run, [chief, worker, ps])
    _delete(run, worker)
    # The chief trains on while worker 1 is re-created; nobody else restarts.
    wait_for(
        lambda: (u := _uids(run, [worker])[worker]) and u != before[worker],
        timeout=300,
        interval=0.5,
        what="worker 1 re-created",
    )
    _past(run, chief, 110)
    after_worker = _uids(run, [chief, ps])
    assert after_worker == {chief: before[chief], ps: before[ps]}, "chief or ps re-created"
    assert RESUMED.search(run.log(chief)) is None, "the chief restarted for a worker's loss"
    status = run.status()
    assert status["restarts"] == {"disruptions": 1, "failures": 0}
    assert status["phase"] == "Running", status  # trains on without the lost worker

    _delete(run, ps)  # SIGTERM: the chief saves at a step boundary; the group restarts
    status = _finished(run)
    chief_log = run.log(chief)
    assert _uids(run, [chief])[chief] == before[chief], "the chief's Pod was re-created"
    saved = [int(s) for s in SAVED.findall(chief_log)]
    resumed = [int(s) for s in RESUMED.findall(chief_log)]
    assert len(saved) == 1 and resumed == saved, chief_log[-3000:]
    assert last_step(chief_log) == TOTAL
    assert status["restarts"] == {"disruptions": 2, "failures": 0}
    assert status["progress"]["step"] == TOTAL

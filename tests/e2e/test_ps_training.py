"""examples/parameter-server.yaml (a chief, 2 workers, 1 ps; no periodic backup) under
the Helm-installed operator on the real node, through the loss of each worker by each kind
of loss (Pod deletion, the Eviction API, a SIGKILL of the container), then a ps's deletion.

A lost worker stops nobody: for most losses the chief trains on with the other worker at
>= 40 % of its speed before the loss (the chief's own record of the gap: its
`cause=worker-lost:worker<i>` disruption line; a stall, the known limit, is printed as
such), for every loss the chief's and the ps's Pod UIDs unchanged,
the chief never resumes, the job Running, each loss counted once. Then the ps's SIGTERM
makes the chief save at a step boundary and the group resumes at exactly that step (the
chief's Pod UID still unchanged: it restarts in place); exactly epochs x 1000 steps.

Without the chief's gate on reconnecting (`runtimes/tf_ps/recovery.py`) this failed at its
second loss, twice in two runs: `evict worker1: 74.9 -> 0.0 steps/s`."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

import kerasjob_contract as contract
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import wait_for
from kerasjob_dev.synckube import pod_path
from kerasjob_dev.testing.training_run import (
    JOBS,
    RESUMED,
    Run,
    last_step,
    mnist_job,
)

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

STEPS_PER_EPOCH = 1000
SAVED = re.compile(r"^kerasjob: preempted: state saved at step (\d+);", re.M)
DISRUPTION = re.compile(contract.LOG_DISRUPTION_RE, re.M)
#: Each worker index by each kind of loss, alternating indices. Elsewhere (kind, in
#: `make test` after the local node) one loss, the index an independent run found stalling:
#: a SIGKILL goes through the local node's containerd, and CI's time is short.
LOSSES = [
    ("delete", 0),
    ("evict", 1),
    ("sigkill", 0),
    ("delete", 1),
    ("evict", 0),
    ("sigkill", 1),
]
LOSSES_ELSEWHERE = [("delete", 0)]
#: No periodic backup while the workers are lost: this test asserts that a lost worker
#: stops nobody. A worker lost while the chief writes a backup still stalls the chief until
#: that worker serves again and is reconnected (5-25 s on the real node, 2026-12-07: the
#: backup's new function is registered on every worker, the reconnection waits behind it):
#: a known limit (docs/strategies.md), met by most six-loss runs with a backup every 50 or
#: 500 steps. The ps's SIGTERM at the end still makes the chief save, and the group
#: resumes exactly there. Step lines every 50 steps (logEverySteps).
SAVE_FREQ = 1_000_000
LOG_EVERY = 50
#: Steps/s while one of two workers is gone, at least this share of the speed before.
MIN_SHARE = 0.4
RATE_SECONDS = 5.0


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


def _rate(run: Run, chief: str) -> float:
    """The chief's steps/s over RATE_SECONDS, from its step lines."""
    step0, t0 = _step(run, chief), time.monotonic()
    time.sleep(RATE_SECONDS)
    return (_step(run, chief) - step0) / (time.monotonic() - t0)


def _step(run: Run, chief: str) -> int:
    """The chief's last step line ("" is also what a log read that timed out gives, on a
    loaded node: once read as step 0, a speed of 0.0 before a loss)."""
    return int(wait_for(lambda: last_step(run.log(chief)) or None, timeout=60, what="a step"))


def _lose(run: Run, kind: str, pod: str) -> None:
    if kind == "delete":
        run.kj.request("DELETE", pod_path(run.ns, pod))
    elif kind == "evict":
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": run.ns},
        }
        run.kj.request("POST", pod_path(run.ns, pod, "eviction"), body=body)
    else:
        cid = localdeploy.container_id(run.kj.get(pod_path(run.ns, pod)) or {})
        assert cid, f"{pod} has no running trainer container"
        localdeploy.kill_container(cid)


def _worker_lost(run: Run, chief: str, number: int) -> re.Match[str]:
    """The chief's disruption line `number` (written when the lost worker serves again)."""

    def found() -> re.Match[str] | None:
        lines = list(DISRUPTION.finditer(run.log(chief)))
        return lines[number - 1] if len(lines) >= number else None

    return wait_for(found, timeout=300, interval=0.5, what=f"the chief's disruption {number}")  # type: ignore[no-any-return]


def _one_loss(run: Run, number: int, kind: str, index: int, before: dict[str, str]) -> str:
    """Loss `number` (of worker `index`, by `kind`): the chief trains on at >= MIN_SHARE of
    its speed, nobody else restarts, counted once; its figures."""
    chief, worker = f"{run.name}-chief-0", f"{run.name}-worker-{index}"
    speed = _rate(run, chief)
    _lose(run, kind, worker)
    line = _worker_lost(run, chief, number)
    last, at, resumed, first_at = (
        int(line.group(3)),
        float(line.group(4)),
        int(line.group(5)),
        float(line.group(6)),
    )
    gone = (resumed - last) / (first_at - at)
    figures = f"{kind} worker{index}: {speed:.1f} -> {gone:.1f} steps/s over {first_at - at:.1f}s"
    assert line.group(2) == f"worker-lost:worker{index}", line.group(0)
    figures += "" if gone >= MIN_SHARE * speed else " (STALLED: the known limit)"
    assert _uids(run, list(before)) == before, f"chief or ps re-created: {figures}"
    assert RESUMED.search(run.log(chief)) is None, f"the chief resumed: {figures}"
    status = run.status()
    assert status["restarts"] == {"disruptions": number, "failures": 0}, (figures, status)
    assert status["phase"] == "Running", status
    return figures


def _finished(run: Run) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        status = run.status()
        assert status.get("phase") != "Failed", status
        return status if status.get("phase") == "Succeeded" else None

    return wait_for(done, timeout=900, interval=1, what="the job to succeed")  # type: ignore[no-any-return]


def test_each_worker_lost_each_way_then_a_ps_the_job_trains_to_the_end(run: Run) -> None:
    name = run.name
    chief, ps = f"{name}-chief-0", f"{name}-ps-0"
    losses = LOSSES if run.dep.cluster.local else LOSSES_ELSEWHERE
    epochs = 4 + len(losses)  # ~20 s a loss at ~60 steps/s: time for every loss
    total = epochs * STEPS_PER_EPOCH
    job = mnist_job(
        name, run.claim, "parameter-server.yaml", epochs=epochs, stepsPerEpoch=STEPS_PER_EPOCH
    )
    job["spec"]["checkpoint"]["saveFreq"] = SAVE_FREQ
    job["spec"]["trainer"]["logEverySteps"] = LOG_EVERY
    run.make_claim()
    run.kj.request("POST", JOBS.format(ns=run.ns), body=job)
    _past(run, chief, 30)
    before = _uids(run, [chief, ps])
    seen: list[str] = []
    for number, (kind, index) in enumerate(losses, start=1):
        try:
            seen.append(_one_loss(run, number, kind, index, before))
        except (AssertionError, TimeoutError) as e:
            tail = "\n".join(run.log(chief).splitlines()[-60:])
            for pod in (f"{name}-worker-{index}", ps):
                tail += f"\n{pod}:\n" + "\n".join(run.log(pod).splitlines()[-20:])
            raise AssertionError(f"{seen} then {kind} worker{index}: {e}\nchief:\n{tail}") from None

    # Most losses keep the chief at speed. A worker lost just after its step can still stall
    # the chief until it is back (its step's tensors are copied from it: a known limit,
    # docs/strategies.md; 1 of 6 losses in most runs on the real node, 2026-12-07); without
    # the gate on reconnecting nearly every loss stalled (`evict worker1: 74.9 -> 0.0`).
    kept = [f for f in seen if "STALLED" not in f]
    assert len(kept) > len(losses) / 2, seen
    run.kj.request("DELETE", pod_path(run.ns, ps))  # the chief saves; the group restarts
    status = _finished(run)
    chief_log = run.log(chief)
    assert _uids(run, [chief])[chief] == before[chief], "the chief's Pod was re-created"
    saved = [int(s) for s in SAVED.findall(chief_log)]
    resumed_at = [int(s) for s in RESUMED.findall(chief_log)]
    # Every resume at the step the ps's SIGTERM saved (no periodic backup in this test: a
    # second in-place restart while the group re-forms resumes there too; seen once,
    # 2026-12-07, resumed_at [5200, 5200]).
    assert len(saved) == 1 and resumed_at and set(resumed_at) == set(saved), chief_log[-3000:]
    assert last_step(chief_log) == total
    assert status["restarts"] == {"disruptions": len(losses) + 1, "failures": 0}
    assert status["progress"]["step"] == total
    print("\n".join(seen))

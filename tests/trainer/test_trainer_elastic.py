"""An elastic job's trainers resume at another world size, with real TensorFlow.

A job that prefers 3 workers (KERASJOB_TRAINER_CONFIG "elastic": preferredWorkers 3,
KeepGlobalBatch) runs undisturbed at 3 workers, and again through two resizes as the operator
does them: 3 workers until a SIGTERM (all save at one step, exit 42), 2 workers (the TF_CONFIG
names 2; each replica takes half of the kept global batch instead of a third) until another
SIGTERM, then 3 workers to the end. The data audit must show, for every global step, the same
examples in the same order (the replicas' slices put together) and the same epoch, batch,
optimizer.iterations and learning rate as the undisturbed run; the final weights agree to float
round-off (a 2-way and a 3-way all-reduce add in another order).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kerasjob_contract import ExitCode
from kerasjob_dev.trainer_procs import Group

pytestmark = pytest.mark.tf

PREFERRED = 3
# Global batch 96 at every size: 32 per replica at 3 workers, 48 at 2.
CONFIG = {
    "model": "mnist-mlp",
    "epochs": 2,
    "stepsPerEpoch": 30,
    "saveFreq": 10,
    "logEverySteps": 1,
    "batchSizePerReplica": 32,
    "deterministic": True,
    "elastic": {"preferredWorkers": PREFERRED, "batchPolicy": "KeepGlobalBatch"},
}
TOTAL, GLOBAL_BATCH = 60, 96
GEN_TIMEOUT = 200


def _group(tmp: Path) -> Group:
    tmp.mkdir(parents=True)
    return Group(tmp, CONFIG, workers=PREFERRED, env={"KERASJOB_AUDIT_DIR": str(tmp / "audit")})


def _slices(g: Group) -> list[tuple[int, int, list[int]]]:
    """(step, replica, indices) of every per-replica batch the pipelines produced."""
    return [
        (r["step"], r["replica"], r["indices"])
        for f in sorted((g.tmp / "audit").glob("data-*.jsonl"))
        for r in g.audit_records(f.name)
    ]


def _preempt(g: Group, trainers: list[Any], at_step: int, victim: int) -> int:
    trainers[0].wait_for_step(at_step, GEN_TIMEOUT)
    trainers[victim].signal(signal.SIGTERM)
    codes = [t.wait(60) for t in trainers]
    assert codes == [ExitCode.PREEMPTED_SAVED] * len(trainers), g.logs()
    saved = max(trainers[0].steps())
    return saved


@pytest.mark.timeout(1200)
def test_resume_at_another_world_size_trains_the_same_batches(tmp_path: Path) -> None:
    base, hit = _group(tmp_path / "undisturbed"), _group(tmp_path / "elastic")
    try:
        base.start()
        assert base.wait_all(GEN_TIMEOUT) == [0] * PREFERRED, base.logs()

        gen = hit.start()  # 3 workers
        shrunk_at = _preempt(hit, gen, 15, victim=2)
        gen = hit.start(workers=2)  # capacity lost: 2 workers, same global batch
        first = gen[0].wait_for_step(1, GEN_TIMEOUT)
        assert "elastic: 2 of 3 preferred workers; global batch 96 kept" in gen[0].text()
        grown_at = _preempt(hit, gen, first + 15, victim=0)
        gen = hit.start(workers=PREFERRED)  # capacity back
        assert hit.wait_all(GEN_TIMEOUT) == [0] * PREFERRED, hit.logs()
    finally:
        base.stop()
        hit.stop()
    print(f"\nshrunk 3->2 after step {shrunk_at}, grew 2->3 after step {grown_at}")
    assert 0 < shrunk_at < grown_at < TOTAL
    # The goodput ledger names the two gaps for what they were.
    ledger = json.loads((hit.ckpt / "goodput" / "ledger.json").read_text())
    assert [e["cause"] for e in ledger["events"]] == ["resized:3->2", "resized:2->3"], ledger

    # 1. Every global step trained the same examples in the same order, whatever the size:
    #    a replica's batch of b examples at step s is slice [r*b, (r+1)*b) of the
    #    undisturbed run's global batch s, and every step was produced whole at some size.
    want: dict[int, list[int]] = {}
    for step, _replica, indices in sorted(_slices(base)):
        if step < TOTAL:  # (the pipeline prefetches past the last step)
            want.setdefault(step, []).extend(indices)
    assert sorted(want) == list(range(TOTAL))
    assert all(len(v) == GLOBAL_BATCH for v in want.values())
    produced: dict[tuple[int, int], set[int]] = {}  # (step, replicas) -> replicas seen
    for step, replica, indices in _slices(hit):
        if step >= TOTAL:
            continue
        b = len(indices)
        assert indices == want[step][replica * b : (replica + 1) * b], (step, replica, b)
        produced.setdefault((step, GLOBAL_BATCH // b), set()).add(replica)
    sizes = {n for (_, n) in produced}
    assert sizes == {2, 3}, sizes
    for step in range(TOTAL):
        assert any(produced.get((step, n)) == set(range(n)) for n in sizes), step

    # 2. The counters and the learning rate per step, on the chief.
    base_steps, hit_steps = base.audit_steps("worker0"), hit.audit_steps("worker0")
    assert sorted(hit_steps) == list(range(TOTAL))
    for step in range(TOTAL):
        (expected,) = base_steps[step]
        for attempt in hit_steps[step]:
            for key in ("epoch", "batch", "iterations", "lr"):
                assert attempt[key] == expected[key], (step, key, attempt, expected)

    # 3. The model: the same to float round-off, and as good.
    diffs = [
        float(np.max(np.abs(a - b)))
        for a, b in zip(base.final_weights(), hit.final_weights(), strict=True)
    ]
    print(f"final weights: max difference {max(diffs):.2e}")
    assert max(diffs) < 1e-3


# A dedicated chief, 2 workers preferred, an evaluator: global batch 32 x 3 = 96 replicas'
# worth, 48 per replica with the chief and 1 worker.
CHIEF_CONFIG = {
    **CONFIG,
    "epochs": 1,
    "stepsPerEpoch": 40,
    "elastic": {"preferredWorkers": 2, "batchPolicy": "KeepGlobalBatch"},
}


@pytest.mark.timeout(900)
def test_a_dedicated_chief_and_an_evaluator_through_a_shrink(tmp_path: Path) -> None:
    from kerasjob_trainer.runtimes.tf_keras import pipeline

    tmp_path.mkdir(exist_ok=True)
    g = Group(
        tmp_path,
        CHIEF_CONFIG,
        workers=2,
        chief=True,
        evaluator=True,
        env={"KERASJOB_AUDIT_DIR": str(tmp_path / "audit")},
    )
    try:
        gen = g.start()  # chief, worker 0, worker 1, evaluator
        training, evaluator = gen[:3], gen[3]
        saved = _preempt(g, training, 12, victim=2)
        evaluator.signal(signal.SIGTERM)  # the resize deletes every Pod
        evaluator.wait(60)
        gen = g.start(workers=1)  # chief, worker 0, evaluator
        assert g.wait_all(GEN_TIMEOUT) == [0, 0, 0], g.logs()
    finally:
        g.stop()
    chief = gen[0].text()
    assert "elastic: 1 of 2 preferred workers; global batch 96 kept" in chief
    assert f"resumed at step {saved}" in chief and "final" in chief
    assert "final" in gen[2].text()  # the evaluator evaluated the final model
    # Every replica's slice, at either size, is its part of the same global batch.
    sizes = set()
    for step, replica, indices in _slices(g):
        if step >= 40:
            continue
        b = len(indices)
        sizes.add(GLOBAL_BATCH // b)
        whole = pipeline.global_batch_indices(step, GLOBAL_BATCH, 4000, 42).tolist()
        assert indices == whole[replica * b : (replica + 1) * b], (step, replica, b)
    assert sizes == {2, 3}

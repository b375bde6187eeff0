"""Preemption-transparent training, with real TensorFlow on 2 worker processes.

One job runs undisturbed, the same job is disrupted 3 times (SIGTERM to the chief: the
group saves and exits 42; SIGKILL of worker 1: the survivor exits 43 and steps since the
last backup are redone; SIGTERM to worker 1, an eviction of a non-chief: 42 again). The
data audit (KERASJOB_AUDIT_DIR) of both runs must show the same example indices for every
global step and replica, the same epoch, in-epoch batch, optimizer.iterations and
scheduled learning rate per step, and (with `deterministic`) the same final weights (the
measured difference is printed). The goodput ledger's disruptions (cause, last step,
resumed step, steps redone, times) agree with the audit's per-step times within a second.
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

# 3 epochs of 40 steps, global batch 64 over 4,000 examples: the run crosses two epoch
# boundaries and a pass over the data in the middle of a batch (position 4,000 = step 62.5).
CONFIG = {
    "model": "schedmodel:build",
    "epochs": 3,
    "stepsPerEpoch": 40,
    "saveFreq": 15,
    "logEverySteps": 1,
    "batchSizePerReplica": 32,
    "deterministic": True,
}
TOTAL = 120
GEN_TIMEOUT = 150

# A user model with a learning-rate schedule and Dropout (random state in the backup when
# deterministic); its data is the configured source (mnist-sample).
USER_MODULE = """
import tf_keras as keras


def build(config):
    model = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10),
    ])
    schedule = keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=7,
                                                           decay_rate=0.8)
    model.compile(keras.optimizers.Adam(schedule),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model
"""


def _group(tmp: Path) -> Group:
    tmp.mkdir(parents=True)
    (tmp / "schedmodel.py").write_text(USER_MODULE)
    return Group(
        tmp, CONFIG, env={"KERASJOB_AUDIT_DIR": str(tmp / "audit"), "PYTHONPATH": str(tmp)}
    )


def _data(g: Group) -> dict[tuple[int, int], list[list[int]]]:
    """(step, replica) -> every recording of its indices (one per generation that built it)."""
    out: dict[tuple[int, int], list[list[int]]] = {}
    for f in sorted((g.tmp / "audit").glob("data-*.jsonl")):
        for r in g.audit_records(f.name):
            out.setdefault((r["step"], r["replica"]), []).append(r["indices"])
    return out


def _finish(g: Group) -> None:
    codes = g.wait_all(GEN_TIMEOUT)
    assert codes == [0, 0], g.logs()


def _disrupted(g: Group) -> list[str]:
    """Three disruptions, then the run to its end; returns what happened, for the output."""
    happened = []
    chief, worker = g.start()
    chief.wait_for_step(20, GEN_TIMEOUT)
    chief.signal(signal.SIGTERM)
    assert [chief.wait(30), worker.wait(30)] == [ExitCode.PREEMPTED_SAVED] * 2, g.logs()
    happened.append(f"SIGTERM chief at step {max(chief.steps())}: both exit 42")

    chief, worker = g.start()
    resumed = chief.wait_for_step(1, GEN_TIMEOUT) - 1
    worker.wait_for_step(resumed + 22, GEN_TIMEOUT)  # past a backup, so steps are redone
    worker.signal(signal.SIGKILL)
    assert chief.wait(30) == ExitCode.PEER_LOST, chief.tail()
    happened.append(f"SIGKILL worker 1 at step {max(worker.steps())} (resumed at {resumed})")

    chief, worker = g.start()
    first = worker.wait_for_step(1, GEN_TIMEOUT)
    worker.wait_for_step(first + 20, GEN_TIMEOUT)
    worker.signal(signal.SIGTERM)  # an eviction of a non-chief
    assert [chief.wait(30), worker.wait(30)] == [ExitCode.PREEMPTED_SAVED] * 2, g.logs()
    happened.append(f"SIGTERM worker 1 at step {max(worker.steps())}: both exit 42")

    g.start()
    _finish(g)
    return happened


def _generations(g: Group, name: str) -> list[list[dict[str, Any]]]:
    """The audit's step records of one worker, split by process (generation)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for r in g.audit_records(f"steps-{name}.jsonl"):
        out.setdefault(r["pid"], []).append(r)
    return list(out.values())


def _check_goodput(g: Group) -> None:
    ledger = json.loads((g.ckpt / "goodput" / "ledger.json").read_text())
    events = ledger["events"]
    print("goodput:", json.dumps(ledger["totals"]))
    assert [e["cause"] for e in events] == ["preempted", "killed:worker1", "preempted"]
    gens = list(zip(_generations(g, "worker0"), _generations(g, "worker1"), strict=True))
    assert len(gens) == 4
    for k, event in enumerate(events):
        before = gens[k][0] + gens[k][1]
        last = max(r["iterations"] for r in before)
        at = max(r["time"] for r in before if r["iterations"] == last)
        first = gens[k + 1][0][0]  # the chief's first step of the next generation
        assert event["last_step"] == last and event["resumed_step"] == first["step"]
        assert event["steps_redone"] == last - first["step"]
        assert abs(event["at"] - at) < 1.0, (event, at)
        assert abs(event["first_step_at"] - first["time"]) < 1.0, (event, first)
        assert event["downtime_s"] == pytest.approx(event["first_step_at"] - event["at"], abs=0.01)
        print(
            f"disruption {k + 1}: {event['cause']}: downtime {event['downtime_s']:.2f}s, "
            f"{event['steps_redone']} steps redone, {event['lost_s']:.2f}s lost "
            f"(audit: last step {at:.3f}, first resumed step {first['time']:.3f})"
        )
    assert events[1]["steps_redone"] > 0 and events[0]["steps_redone"] == 0
    totals = json.loads((g.output / "progress.json").read_text())["goodput"]
    assert totals == ledger["totals"] and totals["disruptions"] == 3
    assert 0 < totals["goodput"] < 1


@pytest.mark.timeout(900)
def test_disrupted_run_equals_undisturbed_run(tmp_path: Path) -> None:
    base, hit = _group(tmp_path / "undisturbed"), _group(tmp_path / "disrupted")
    try:
        base.start()
        _finish(base)
        happened = _disrupted(hit)
    finally:
        base.stop()
        hit.stop()
    print("\n" + "\n".join(happened))

    # 1. Data: every (step, replica) recorded in every generation that built it is the same
    #    and equals the undisturbed run's; no step is missing.
    want, got = _data(base), _data(hit)
    for key in [(s, r) for s in range(TOTAL) for r in (0, 1)]:
        assert key in want and key in got, key
        assert len({json.dumps(v) for v in want[key]}) == 1, key
        assert all(v == want[key][0] for v in got[key]), f"step {key[0]} replica {key[1]}"
    rebuilt = sum(len(v) for k, v in got.items() if k[0] < TOTAL) - 2 * TOTAL
    assert rebuilt > 0  # the disrupted run did rebuild (prefetched, redone) batches
    # The replicas' slices are disjoint and each pass visits every example once.
    stream = [i for s in range(TOTAL) for r in (0, 1) for i in want[(s, r)][0]]
    assert sorted(stream[:4000]) == list(range(4000))

    # 2. Counters, the schedule and the logged curves: for every step, what the disrupted
    #    run trained last (and every redone attempt) has the same epoch, batch, iterations
    #    and lr, and logged the same running loss and accuracy of the epoch so far (the
    #    metrics' state is in the backup: no seam at a resume in mid-epoch).
    for name in ("worker0", "worker1"):
        base_steps, hit_steps = base.audit_steps(name), hit.audit_steps(name)
        assert sorted(base_steps) == sorted(hit_steps) == list(range(TOTAL))
        for step in range(TOTAL):
            (expected,) = base_steps[step]
            assert expected["epoch"] == step // 40 and expected["batch"] == step % 40
            assert expected["iterations"] == step + 1
            for attempt in hit_steps[step]:
                for key in ("epoch", "batch", "iterations", "lr", "logs"):
                    assert attempt[key] == expected[key], (name, step, key, attempt, expected)
            assert set(expected["logs"]) == {"loss", "accuracy"}
        redone = [s for s, v in hit_steps.items() if len(v) > 1]
        assert redone, "the SIGKILL must have made the group redo steps"
    lrs = [base.audit_steps("worker0")[s][0]["lr"] for s in (0, 7, 14)]
    assert lrs[0] > lrs[1] > lrs[2]  # the schedule does decay

    # 3. Goodput: the ledger's three disruptions agree with the audit's per-step times.
    _check_goodput(hit)

    # 4. Determinism: the same final weights.
    a, b = base.final_weights(), hit.final_weights()
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))
    print(f"max |w_disrupted - w_undisturbed| = {diff!r} over {sum(x.size for x in a)} weights")
    assert diff == 0.0

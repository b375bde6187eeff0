"""Orbax backups of a sharded model in real multi-process JAX on CPU (2 processes x 2 CPU
devices, mesh batch=1 x model=4, the built-in mnist-mlp's layout): every process writes its
own shards, and a run disrupted three times (SIGTERM, SIGKILL, SIGTERM) with `deterministic:
true` ends with the undisturbed run's weights bit for bit."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from kerasjob_contract import LOG_PREEMPTED_RE
from kerasjob_dev.trainer_procs import Group, group

pytestmark = [pytest.mark.tf, pytest.mark.slow]

TIMEOUT = 300.0
TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
CONFIG = {
    "model": "mnist-mlp",
    "epochs": 3,
    "stepsPerEpoch": 50,
    "saveFreq": 10,
    "batchSizePerReplica": 64,
    "logEverySteps": 1,
    "deterministic": True,
    # the kernels split over all 4 devices of both processes: each holds its own shards
    "mesh": [{"name": "batch", "size": 1}, {"name": "model", "size": 4}],
    "devicesPerProcess": 2,
}
PREEMPTED = re.compile(LOG_PREEMPTED_RE)


def _wait_committed(g: Group, step: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not (g.ckpt / "backup" / "orbax" / str(step)).is_dir():
        assert time.monotonic() < deadline, f"the backup of step {step} was never committed"
        time.sleep(0.05)


def _disrupt(g: Group, at_step: int, how: str) -> list[int]:
    trainers = g.start()
    trainers[0].wait_for_step(at_step, TIMEOUT)
    if how == "kill":
        _wait_committed(g, at_step - at_step % 10)
    trainers[1].signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
    return g.wait_all(TIMEOUT)


def test_a_sharded_model_disrupted_three_times_ends_bit_for_bit(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with group(tmp_path / "a", CONFIG, backend="jax", env=TWO_DEVICES) as a:
        a.start()
        assert a.wait_all(TIMEOUT) == [0, 0], a.logs()
        undisturbed = a.final_weights()
    (tmp_path / "b").mkdir()
    with group(tmp_path / "b", CONFIG, backend="jax", env=TWO_DEVICES) as b:
        for at_step, how in ((12, "term"), (50, "kill"), (90, "term")):
            codes = _disrupt(b, at_step, how)
            assert codes[0] in (42, 43) and codes[1] in (-9, 42), b.logs()
            if how == "term":  # one agreed step, saved by both
                saved = [
                    [m.group(1) for line in t.lines() if (m := PREEMPTED.match(line))]
                    for t in b.trainers[-2:]
                ]
                assert len(saved[0]) == 1 and saved[0] == saved[1], b.logs()
        # each process wrote its own shards of the kernels split over "model"
        from kerasjob_trainer.runtimes.keras3.checkpoint import committed_steps

        newest = committed_steps(str(b.ckpt / "backup"))[-1]
        state = b.ckpt / "backup" / "orbax" / str(newest) / "state"
        assert {p.name for p in state.glob("ocdbt.process_*")} >= {
            "ocdbt.process_0",
            "ocdbt.process_1",
        }, sorted(p.name for p in state.iterdir())
        b.start()
        assert b.wait_all(TIMEOUT) == [0, 0], b.logs()
        disrupted = b.final_weights()
        ledger = json.loads((b.ckpt / "goodput" / "ledger.json").read_text())
        assert [e["cause"] for e in ledger["events"]] == [
            "preempted",
            "killed:worker1",
            "preempted",
        ]
    assert len(undisturbed) == len(disrupted) > 0
    for x, y in zip(undisturbed, disrupted, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)

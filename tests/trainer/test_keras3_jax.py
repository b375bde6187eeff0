"""Keras 3 on JAX (spec.trainer.backend: jax) in several real processes on CPU: the guarantees
of the tf-keras path, each tested as a worker sees it (`python -m kerasjob_trainer` with the
operator's identity env, gloo collectives over 127.0.0.1)."""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kerasjob_contract import LOG_PREEMPTED_RE, LOG_RESUMED_RE
from kerasjob_dev.trainer_procs import Group, Trainer, group, own_keras3_script, progress

pytestmark = [pytest.mark.tf, pytest.mark.slow]

PREEMPTED = re.compile(LOG_PREEMPTED_RE)
RESUMED = re.compile(LOG_RESUMED_RE)
TIMEOUT = 240.0
#: 200 steps: JAX's preemption sync point is agreed ~1 s after the SIGTERM (the notice goes
#: through the coordination service), so a disruption must leave that much training.
BASE: dict[str, Any] = {
    "model": "mnist-mlp",
    "epochs": 4,
    "stepsPerEpoch": 50,
    "saveFreq": 10,
    "batchSizePerReplica": 32,
    "logEverySteps": 1,
}


def _matches(pattern: re.Pattern[str], text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := pattern.match(line))]


def _disrupt(g: Group, *, at_step: int, how: str) -> list[int]:
    """One generation: wait for `at_step` on the chief, then SIGTERM worker 1 ("term") or
    SIGKILL it ("kill"); the exit codes of every process."""
    trainers = g.start()
    trainers[0].wait_for_step(at_step, TIMEOUT)
    trainers[1].signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
    return g.wait_all(TIMEOUT)


def _wait_committed(g: Group, step: int) -> None:
    """Until Orbax committed the backup of `step` (its directory gets the step's number only
    once every process wrote its part)."""
    deadline = time.monotonic() + TIMEOUT
    while not (g.ckpt / "backup" / "orbax" / str(step)).is_dir():
        assert time.monotonic() < deadline, f"the backup of step {step} was never committed"
        time.sleep(0.05)


def _wait_resumed(chief: Trainer) -> int:
    """The step the chief's generation resumed at (its one resume line)."""
    deadline = time.monotonic() + TIMEOUT
    while not (resumed := _matches(RESUMED, chief.text())):
        assert time.monotonic() < deadline, f"never resumed:\n{chief.tail()}"
        assert chief.proc.poll() is None, f"exited {chief.proc.returncode}:\n{chief.tail()}"
        time.sleep(0.05)
    assert len(resumed) == 1, chief.tail()
    return resumed[0]


def _finish(g: Group, workers: int | None = None) -> list[int]:
    g.start(workers)
    return g.wait_all(TIMEOUT)


def test_two_processes_train_to_the_end(tmp_path: Path) -> None:
    with group(tmp_path, BASE, backend="jax") as g:
        assert _finish(g) == [0, 0], g.logs()
        chief = g.trainers[0].text()
        assert "2 process(es), keras 3." in chief and "on jax" in chief
        assert re.search(r"^kerasjob: final test_accuracy=0\.(8|9)\d+ steps=200$", chief, re.M), (
            g.logs()
        )
        assert "kerasjob: done steps=200" in g.trainers[1].text()
        done = progress(g)
        assert done["done"] is True and done["step"] == 200
        assert not (g.ckpt / "backup").exists()  # deleted once the model is safe
        assert not (g.ckpt / "jax-cache").exists()  # the compilation cache too
        assert (g.output / "model.keras").is_file()


def test_sigterm_saves_at_one_step_and_resumes_there(tmp_path: Path) -> None:
    with group(tmp_path, BASE, backend="jax") as g:
        assert _disrupt(g, at_step=15, how="term") == [42, 42], g.logs()
        saved = [_matches(PREEMPTED, t.text()) for t in g.trainers]
        assert len(saved[0]) == 1 and saved[0] == saved[1], g.logs()  # one agreed step
        assert any((g.ckpt / "jax-cache").iterdir())  # the compiled programs, for the restart
        assert _finish(g) == [0, 0], g.logs()
        assert _matches(RESUMED, g.trainers[0].text()) == saved[0], g.logs()
        assert "cause=preempted" in g.trainers[0].text()


@pytest.mark.parametrize("victim", [0, 1], ids=["coordinator", "worker"])
def test_a_killed_peer_makes_the_survivor_exit_43(tmp_path: Path, victim: int) -> None:
    """Process 0 hosts JAX's coordination service: its loss aborts the others inside the JAX
    runtime (SIGABRT), which the supervisor turns into 43; a lost worker breaks the gloo
    collectives of process 0."""
    with group(tmp_path, {**BASE, "epochs": 40}, backend="jax") as g:
        trainers = g.start()
        trainers[0].wait_for_step(12, TIMEOUT)
        # backups are asynchronous: a kill before the commit of step 10 would resume at 0
        _wait_committed(g, 10)
        trainers[victim].signal(signal.SIGKILL)
        survivor = trainers[1 - victim]
        assert survivor.wait(90) == 43, survivor.tail()
        g.stop()
        # The next generation resumes from the committed backup and trains on: a few steps
        # past the resume are enough (training 2,000 steps to the end proved nothing more).
        chief = g.start()[0]
        resumed = _wait_resumed(chief)
        chief.wait_for_step(resumed + 2, TIMEOUT)
        assert resumed % 10 == 0 and resumed >= 10, g.logs()
        assert re.search(r"cause=killed:worker" + str(victim), chief.text()), g.logs()
        g.stop()


def test_disrupted_run_ends_with_the_undisturbed_weights_bit_for_bit(tmp_path: Path) -> None:
    """deterministic: the weights after 3 disruptions (SIGTERM, SIGKILL, SIGTERM) equal an
    undisturbed run's exactly, every global step trained on the same examples, and logged
    the same running loss and accuracy."""
    config = {**BASE, "deterministic": True}
    (tmp_path / "a").mkdir()
    env = {"KERASJOB_AUDIT_DIR": str(tmp_path / "a" / "audit")}
    with group(tmp_path / "a", config, backend="jax", env=env) as a:
        assert _finish(a) == [0, 0], a.logs()
        undisturbed = a.final_weights()
    env = {"KERASJOB_AUDIT_DIR": str(tmp_path / "b" / "audit")}
    (tmp_path / "b").mkdir()
    with group(tmp_path / "b", config, backend="jax", env=env) as b:
        for at_step, how in ((12, "term"), (50, "kill"), (90, "term")):
            codes = _disrupt(b, at_step=at_step, how=how)
            assert codes[0] in (42, 43) and codes[1] in (-9, 42), b.logs()
        assert _finish(b) == [0, 0], b.logs()
        disrupted = b.final_weights()
        ledger = json.loads((b.ckpt / "goodput" / "ledger.json").read_text())
        causes = [e["cause"] for e in ledger["events"]]
        assert causes == ["preempted", "killed:worker1", "preempted"]
    assert len(undisturbed) == len(disrupted) > 0
    for x, y in zip(undisturbed, disrupted, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    # the same logged running averages (loss, accuracy) at every step: a resume in mid-epoch
    # continues the epoch's metric totals from the backup
    ref_logs = {s: rs[0]["logs"] for s, rs in a.audit_steps("worker0").items()}
    for step, records in b.audit_steps("worker0").items():
        for r in records:
            assert r["logs"] == ref_logs[step], (step, r["logs"], ref_logs[step])
    # the same examples at every global step, in both runs, for both processes
    for name in ("worker0", "worker1"):
        ref = {r["step"]: r["indices"] for r in a.audit_records(f"data-{name}.jsonl")}
        got: dict[int, list[int]] = {}
        for r in b.audit_records(f"data-{name}.jsonl"):
            assert got.setdefault(r["step"], r["indices"]) == r["indices"]
        assert set(got) >= set(range(200)) and all(got[s] == ref[s] for s in range(200))


def test_elastic_resize_keeps_the_global_batch_and_the_data_position(tmp_path: Path) -> None:
    """Preferred 2 workers, resumed at 1: the one process trains on both shares."""
    from kerasjob_trainer.runtimes.keras3.data import global_batch_indices
    from kerasjob_trainer.shared.data import MNIST_SAMPLE_TRAIN

    config = {**BASE, "elastic": {"preferredWorkers": 2}}
    env = {"KERASJOB_AUDIT_DIR": str(tmp_path / "audit")}
    with group(tmp_path, config, backend="jax", env=env) as g:
        assert _disrupt(g, at_step=15, how="term") == [42, 42], g.logs()
        saved = _matches(PREEMPTED, g.trainers[0].text())[0]
        assert _finish(g, workers=1) == [0], g.logs()
        text = g.trainers[0].text()
        assert "elastic: 1 of 2 preferred workers; global batch 64 kept" in text, text
        assert _matches(RESUMED, text) == [saved] and "cause=resized:2->1" in text
        w0 = {r["step"]: r["indices"] for r in g.audit_records("data-worker0.jsonl")}
        w1 = {r["step"]: r["indices"] for r in g.audit_records("data-worker1.jsonl")}
        for step in (0, saved - 1, saved, 199):
            expected = global_batch_indices(step, 64, MNIST_SAMPLE_TRAIN, BASE.get("seed", 42))
            mine = w0[step] + w1[step] if step < saved else w0[step]
            assert mine == expected.tolist(), step


OWN_SCRIPT = own_keras3_script(4, 60, finish='metrics={"note": 1.0}')


def test_own_keras3_script_through_the_session_survives_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(OWN_SCRIPT))
    config = {"command": [sys.executable, str(script)], "saveFreq": 5}
    with group(tmp_path, config, backend="jax") as g:
        assert _disrupt(g, at_step=5, how="term") == [42, 42], g.logs()
        saved = _matches(PREEMPTED, g.trainers[0].text())
        assert _finish(g) == [0, 0], g.logs()
        assert _matches(RESUMED, g.trainers[0].text()) == saved
        assert progress(g)["step"] == 240


def test_bad_identity_exits_78_before_jax_starts(tmp_path: Path) -> None:
    with group(tmp_path, BASE, backend="jax", env={"KERAS_DISTRIBUTION_PROCESS_ID": "7"}) as g:
        g.start()
        assert g.wait_all(60) == [78, 78], g.logs()
        assert "kerasjob: invalid configuration: " in g.trainers[0].text()

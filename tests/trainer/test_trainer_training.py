"""Real TensorFlow, several trainer processes on 127.0.0.1: training, preemption, faults.

Timeouts are bounded everywhere; a generation of 2 workers x 120 steps takes 10-40 s
on 2 shared CPU cores, most of it TensorFlow start-up.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

import kerasjob_contract as contract
from kerasjob_contract import ExitCode
from kerasjob_dev.trainer_procs import (
    FINAL_LINE,
    PREEMPTED_LINE,
    RESUMED_LINE,
    Group,
    Trainer,
    group,
    progress,
)

pytestmark = pytest.mark.tf

SAVE_FREQ = 20
# 2 epochs, so a resumed run crosses an epoch boundary; every step logged for exact counts.
FT_CONFIG = {
    "epochs": 2,
    "stepsPerEpoch": 60,
    "saveFreq": SAVE_FREQ,
    "logEverySteps": 1,
    "batchSizePerReplica": 32,
}
FT_TOTAL = 120
KILL_AT = 30
GEN_TIMEOUT = 150


def _final(g: Group, index: int = 0) -> tuple[float | None, int]:
    for line in g.trainers[index].lines():
        if m := FINAL_LINE.match(line):
            return (float(m.group(1)) if m.group(1) else None), int(m.group(2))
    raise AssertionError(f"no final line:\n{g.logs()}")


def _resumed(g: Group) -> list[int]:
    out = []
    for t in g.trainers:
        found = [int(m.group(1)) for ln in t.lines() if (m := RESUMED_LINE.match(ln))]
        assert found, f"{t.name} did not resume:\n{t.tail()}"
        out.append(found[0])
    return out


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return None


@pytest.mark.timeout(240)
def test_two_workers_train_mnist_to_90_percent(tmp_path: Path) -> None:
    config = {"epochs": 3, "stepsPerEpoch": 100, "saveFreq": 50}
    with group(tmp_path, config) as g:
        g.start()
        chief = g.trainers[0]
        chief.wait_for_step(50, GEN_TIMEOUT)
        scraped = _scrape(g.metrics_port)  # served while training, by the chief only
        assert scraped and f"{contract.METRIC_STEP} " in scraped, scraped
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
        accuracy, steps = _final(g)
        assert steps == 300
        assert accuracy is not None and accuracy >= 0.90, g.logs()
        final = progress(g)
        assert final["done"] and final["step"] == 300 and final["updatedAt"]
        assert final["metrics"]["test_accuracy"] == pytest.approx(accuracy, abs=1e-4)
        assert (g.output / "model.keras").is_file()
        assert list((g.output / "tensorboard").glob("events.out.tfevents.*"))
        assert not any("final" in ln for ln in g.trainers[1].lines())  # chief-only outputs


@pytest.mark.timeout(300)
def test_sigkill_survivor_exits_43_and_resume_is_exact(tmp_path: Path) -> None:
    with group(tmp_path, FT_CONFIG) as g:
        survivor, victim = g.start()
        victim.wait_for_step(KILL_AT, GEN_TIMEOUT)
        killed_at = time.monotonic()
        victim.signal(signal.SIGKILL)
        code = survivor.wait(10)
        elapsed = time.monotonic() - killed_at
        assert code == ExitCode.PEER_LOST, survivor.tail()
        assert elapsed < 2.0, f"survivor took {elapsed:.2f}s"
        last_done = max(survivor.steps())

        g.start()
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
        resumed = _resumed(g)
        assert resumed[0] == resumed[1], resumed
        assert resumed[0] % SAVE_FREQ == 0 and resumed[0] > 0
        assert 0 <= last_done - resumed[0] <= SAVE_FREQ, (last_done, resumed)
        _, steps = _final(g)
        assert steps == FT_TOTAL and progress(g)["step"] == FT_TOTAL  # optimizer.iterations


def test_sigkill_survivor_restarts_in_place_and_only_the_lost_worker_starts_again(
    tmp_path: Path,
) -> None:
    """With in-place restarts on (as in a Pod): worker 1 SIGKILLed, worker 0's container
    process (the supervisor) lives on and its trainer restarts at once; only worker 1 is
    started again (as the operator re-creates only its Pod); the run ends exactly."""
    env = {contract.Env.IN_PLACE_RESTARTS.value: "3"}
    with group(tmp_path, FT_CONFIG, env=env) as g:
        survivor, victim = g.start()
        victim.wait_for_step(KILL_AT, GEN_TIMEOUT)
        victim.signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "restarted in place after exit 43" not in survivor.text():
            assert survivor.proc.poll() is None, survivor.tail()
            assert time.monotonic() < deadline, survivor.tail()
            time.sleep(0.1)
        replacement = Trainer(f"{victim.name}-again", tmp_path, victim.env)
        g.trainers = [survivor, replacement]
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
        banners = re.findall(contract.LOG_INCARNATION_RE, survivor.text(), re.M)
        assert banners == [("1", "worker-0"), ("2", "worker-0")], survivor.tail()
        resumed = _resumed(g)
        assert resumed[0] == resumed[1] and resumed[0] % SAVE_FREQ == 0, resumed
        _, steps = _final(g)
        assert steps == FT_TOTAL and progress(g)["step"] == FT_TOTAL
        logs = sorted((g.ckpt / contract.LOGS_SUBDIR / "worker-0").iterdir())
        assert [p.name for p in logs] == ["0001.log", "0002.log"]
        assert "kerasjob: final" in logs[1].read_text()


@pytest.mark.timeout(300)
def test_sigterm_saves_current_step_and_resume_redoes_nothing(tmp_path: Path) -> None:
    with group(tmp_path, FT_CONFIG) as g:
        chief, worker = g.start()
        chief.wait_for_step(KILL_AT, GEN_TIMEOUT)
        chief.signal(signal.SIGTERM)  # to ONE worker: the group agrees on the step to save at
        assert [chief.wait(20), worker.wait(20)] == [ExitCode.PREEMPTED_SAVED] * 2, g.logs()
        saved = []
        for t in (chief, worker):
            found = [int(m.group(1)) for ln in t.lines() if (m := PREEMPTED_LINE.match(ln))]
            assert len(found) == 1, t.tail()
            saved.append(found[0])
            # Both left through the group's barrier, once both had saved (not a fixed pause).
            assert not any("without the group's barrier" in ln for ln in t.lines()), t.tail()
        assert saved[0] == saved[1] == max(chief.steps()) == max(worker.steps()), saved
        assert not list((g.ckpt / "backup").glob("workertemp*"))

        g.start()
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
        assert _resumed(g) == saved  # redoes no step
        assert min(g.trainers[0].steps()) == saved[0] + 1
        _, steps = _final(g)
        assert steps == FT_TOTAL and progress(g)["step"] == FT_TOTAL


@pytest.mark.timeout(240)
def test_dedicated_chief_and_sidecar_evaluator(tmp_path: Path) -> None:
    config = {"epochs": 2, "stepsPerEpoch": 40, "saveFreq": 20, "batchSizePerReplica": 32}
    with group(tmp_path, config, workers=1, chief=True, evaluator=True) as g:
        g.start()
        assert g.wait_all(GEN_TIMEOUT) == [0, 0, 0], g.logs()
        _, steps = _final(g, 0)
        assert steps == 80
        evaluation = json.loads((g.output / "eval.json").read_text())
        assert evaluation["final"] and evaluation["step"] == 80 and evaluation["accuracy"] > 0.5
        assert any("eval step=80" in ln for ln in g.trainers[2].lines())


def _tree_digest(root: Path) -> dict[str, str]:
    """Every file under `root` but the incarnations' logs (contract.LOGS_SUBDIR), which the
    supervisor writes for every run, a failed one too."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != contract.LOGS_SUBDIR
    }


BAD_CONFIGS = {
    "unknown model": ({"TRAINER": {"model": "resnet-9000"}}, "neither a built-in"),
    "user module missing": ({"TRAINER": {"model": "no_such_pkg.models:build"}}, "cannot import"),
    "missing data path": (
        {"TRAINER": {"dataset": {"source": "path", "path": "/nope.npz"}}},
        "does not exist",
    ),
    "malformed TF_CONFIG": (
        {"TF_CONFIG": '{"cluster": {"worker": ["x"]}, "task": {}}'},
        "host:port",
    ),
    "batch size 0": ({"TRAINER": {"batchSizePerReplica": 0}}, "batchSizePerReplica"),
    "bad JSON": ({"TRAINER_TEXT": "{epochs: 3"}, "not valid JSON"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_fails_fast_and_keeps_backup(tmp_path: Path, case: str) -> None:
    overrides, message = BAD_CONFIGS[case]
    ckpt = tmp_path / "ckpt"
    backup = ckpt / "backup" / "chief"
    backup.mkdir(parents=True)
    (backup / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    (backup / "ckpt-3.index").write_bytes(bytes(range(256)) * 4)
    before = _tree_digest(ckpt)
    trainer_text = overrides.get("TRAINER_TEXT") or json.dumps(
        {"epochs": 1, "stepsPerEpoch": 10, **overrides.get("TRAINER", {})}
    )
    env = {
        contract.Env.TRAINER_CONFIG.value: trainer_text,
        contract.Env.CHECKPOINT_DIR.value: str(ckpt),
        contract.Env.TF_CONFIG.value: overrides.get("TF_CONFIG", ""),
    }
    started = time.monotonic()
    t = Trainer("bad", tmp_path, env)
    assert t.wait(60) == ExitCode.INVALID_CONFIG, t.text()
    assert time.monotonic() - started < 30
    errors = [ln for ln in t.lines() if ln.startswith("kerasjob: invalid configuration:")]
    assert len(errors) == 1 and message in errors[0], t.text()
    # ... and the same reason in the termination message, for the job's condition and event
    reason = contract.invalid_config_reason(t.termination_message())
    assert reason is not None and errors[0] == contract.invalid_config_line(reason), reason
    assert _tree_digest(ckpt) == before
    # The supervisor keeps the failed incarnation's output (when it got as far as a child).
    kept = sorted((ckpt / contract.LOGS_SUBDIR).rglob("*.log"))
    assert not kept or message in kept[-1].read_text(), [p.name for p in kept]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_checkpoint_directory_that_cannot_be_written_exits_78_at_once(
    tmp_path: Path, backend: str
) -> None:
    """A checkpoint directory the trainer cannot write was exit 1 (in the first save),
    retried until backoffLimit: now exit 78 before any framework starts, the termination
    message naming the path and the cause. Here the path goes through a regular file (root,
    as the tests run, writes anywhere else); a read-only volume's EROFS:
    tests/unit/test_context.py."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    ckpt = blocker / "ckpt"
    config = {"backend": backend, "epochs": 1, "stepsPerEpoch": 10}
    env = {
        contract.Env.TRAINER_CONFIG.value: json.dumps(config),
        contract.Env.CHECKPOINT_DIR.value: str(ckpt),
        contract.Env.TF_CONFIG.value: "",
    }
    started = time.monotonic()
    t = Trainer("unwritable", tmp_path, env)
    assert t.wait(60) == ExitCode.INVALID_CONFIG, t.text()
    assert time.monotonic() - started < 30
    reason = contract.invalid_config_reason(t.termination_message())
    assert reason is not None, t.termination_message()
    assert reason.startswith(
        f"checkpoint directory {ckpt} cannot be written: [Errno 20] Not a directory"
    ), reason
    assert contract.invalid_config_line(reason) in t.lines(), t.text()
    assert not any(re.match(contract.LOG_INCARNATION_RE, ln) for ln in t.lines())  # no child


@pytest.mark.timeout(240)
def test_silent_peer_is_detected_by_the_heartbeat(tmp_path: Path) -> None:
    """SIGSTOP: the peer's sockets stay open; the coordination heartbeat (10 s) catches it."""
    with group(tmp_path, FT_CONFIG) as g:
        survivor, victim = g.start()
        victim.wait_for_step(10, GEN_TIMEOUT)
        stopped = time.monotonic()
        victim.signal(signal.SIGSTOP)
        try:
            assert survivor.wait(40) == ExitCode.PEER_LOST, survivor.tail()
            assert time.monotonic() - stopped < 30
        finally:
            victim.signal(signal.SIGCONT)
        assert victim.wait(30) == ExitCode.PEER_LOST, victim.tail()


def _single(tmp_path: Path, config: dict, extra_env: dict | None = None) -> Trainer:
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = {
        contract.Env.TRAINER_CONFIG.value: json.dumps(config),
        contract.Env.CHECKPOINT_DIR.value: str(tmp_path / "ckpt"),
        contract.Env.TF_CONFIG.value: "",
        **(extra_env or {}),
    }
    t = Trainer("single", tmp_path, env)
    assert t.wait(GEN_TIMEOUT) == 0, t.text()
    return t


USER_MODULE = """
import numpy as np
import tensorflow as tf
import tf_keras as keras


def build(config):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x = np.random.default_rng(0).normal(size=(256, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return model, ds, ds.take(64)
"""


@pytest.mark.timeout(120)
def test_user_code_returning_model_and_datasets(tmp_path: Path) -> None:
    (tmp_path / "usermodel.py").write_text(USER_MODULE)
    t = _single(
        tmp_path,
        {
            "model": "usermodel:build",
            "epochs": 1,
            "stepsPerEpoch": 30,
            "batchSizePerReplica": 16,
            "saveFreq": 10,
        },
        {"PYTHONPATH": str(tmp_path)},
    )
    finals = [ln for ln in t.lines() if FINAL_LINE.match(ln)]
    assert finals and finals[0].endswith("steps=30"), t.tail()
    assert float(FINAL_LINE.match(finals[0]).group(1)) > 0.8


@pytest.mark.timeout(120)
def test_npz_and_tfrecord_datasets_from_a_path(tmp_path: Path) -> None:
    import numpy as np

    from kerasjob_trainer.shared.data import mnist_sample

    x_train, y_train, x_test, y_test = mnist_sample()
    npz = tmp_path / "mnist.npz"
    np.savez(
        npz,
        x_train=x_train[:1000],
        y_train=y_train[:1000],
        x_test=x_test[:200],
        y_test=y_test[:200],
    )
    records = tmp_path / "records"
    records.mkdir()
    _write_tfrecords(records / "train-0.tfrecord", x_train[:500], y_train[:500])
    _write_tfrecords(records / "test-0.tfrecord", x_test[:100], y_test[:100])
    # one process, two runs: npz, then TFRecord from a directory with the CNN (reshaped)
    base = {"epochs": 1, "stepsPerEpoch": 20, "saveFreq": 10, "batchSizePerReplica": 32}
    t = _single(tmp_path / "a", {**base, "dataset": {"source": "path", "path": str(npz)}})
    assert any(FINAL_LINE.match(ln) for ln in t.lines()), t.tail()
    t = _single(
        tmp_path / "b",
        {**base, "model": "mnist-cnn", "dataset": {"source": "path", "path": str(records)}},
    )
    final = next(m for ln in t.lines() if (m := FINAL_LINE.match(ln)))
    assert final.group(1) is not None and final.group(2) == "20"


def _write_tfrecords(path: Path, x, y) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for xi, yi in zip(x, y, strict=True):
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=xi.reshape(-1))),
                        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)])),
                    }
                )
            )
            w.write(ex.SerializeToString())


@pytest.mark.timeout(60)
def test_sigterm_before_the_first_step_exits_42_at_once(tmp_path: Path) -> None:
    env = {
        contract.Env.TRAINER_CONFIG.value: json.dumps({"epochs": 1, "stepsPerEpoch": 10}),
        contract.Env.CHECKPOINT_DIR.value: str(tmp_path / "ckpt"),
        contract.Env.TF_CONFIG.value: "",
    }
    t = Trainer("early", tmp_path, env)
    time.sleep(1.0)  # still importing TensorFlow
    t.signal(signal.SIGTERM)
    assert t.wait(10) == ExitCode.PREEMPTED_SAVED, t.text()
    assert "before the first step" in t.text()


@pytest.mark.timeout(120)
def test_sigterm_without_the_override_exits_43_and_keeps_the_backup(tmp_path: Path) -> None:
    """The fallback when the override is off (KERASJOB_SAVE_ON_SIGTERM=0 or an unpinned TF)."""
    env = {
        contract.Env.TRAINER_CONFIG.value: json.dumps(
            {"epochs": 1, "stepsPerEpoch": 100000, "saveFreq": 10, "logEverySteps": 1}
        ),
        contract.Env.CHECKPOINT_DIR.value: str(tmp_path / "ckpt"),
        contract.Env.TF_CONFIG.value: "",
        "KERASJOB_SAVE_ON_SIGTERM": "0",
    }
    t = Trainer("fallback", tmp_path, env)
    t.wait_for_step(25, 90)
    t.signal(signal.SIGTERM)
    assert t.wait(10) == ExitCode.PEER_LOST, t.tail()
    assert "without save-before-preemption" in t.text()
    assert list((tmp_path / "ckpt" / "backup" / "chief").glob("ckpt-*.index"))


@pytest.mark.timeout(300)
def test_a_long_fast_run_keeps_its_threads_bounded(tmp_path: Path) -> None:
    """Fast steps, many of them: each worker's thread count stays flat. With TensorFlow's
    collective timeout (a thread sleeping out the timeout per collective op) it grew by
    hundreds a second and the workers crashed ("Resource temporarily unavailable") after
    1,500-3,000 MNIST steps; see kerasjob_trainer.runtimes.tf_keras.strategy."""
    config = {
        "epochs": 1,
        # 1,200 steps: threads counted at 300 and 900, then the run ends normally.
        "stepsPerEpoch": 1200,
        "saveFreq": 500,
        "logEverySteps": 100,
        "batchSizePerReplica": 32,
    }
    with group(tmp_path, config) as g:
        workers = g.start()
        counts: dict[int, list[int]] = {}
        for step in (300, 900):
            for i, t in enumerate(workers):
                t.wait_for_step(step, GEN_TIMEOUT)
                threads = len(list(Path(f"/proc/{t.proc.pid}/task").iterdir()))
                counts.setdefault(i, []).append(threads)
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
    # Between step 300 and 900 (600 steps, ~10 collectives each) a worker may start a few
    # threads, not one per collective.
    for i, (at_300, at_900) in counts.items():
        assert at_900 - at_300 < 100, f"worker {i}: {at_300} threads at step 300, {at_900} at 900"
    print(f"\nthreads at steps 300/900: {counts}")

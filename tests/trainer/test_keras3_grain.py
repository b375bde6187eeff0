"""The Keras 3 trainer's input through Grain (`runtimes/keras3/grain_input.py`, `records.py`):
the same global order as the in-memory arrays' (a pure function of seed and pass), each
process its share of every global batch, a start at any step equal to reading up to it, with
and without worker processes; ArrayRecord files written and read back; and a 2-process job
reading ArrayRecord files from a directory, disrupted at a step and resumed at 1 process
(elastic): every step trained on exactly the examples of an undisturbed run."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kerasjob_contract import LOG_PREEMPTED_RE, LOG_RESUMED_RE
from kerasjob_dev.trainer_procs import group
from kerasjob_trainer.runtimes.keras3 import records
from kerasjob_trainer.runtimes.keras3.data import global_batch_indices, process_indices
from kerasjob_trainer.runtimes.keras3.grain_input import ArraySource, grain_source

SIZE, GLOBAL, SEED = 100, 8, 7


def _examples() -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(SIZE * 3, dtype=np.float32).reshape(SIZE, 3)
    return x, np.arange(SIZE, dtype=np.int64)


def _read(source: Any, steps: range, process: int, processes: int, workers: int) -> list[Any]:
    src = grain_source(source, GLOBAL, SEED, workers=workers)
    try:
        return [src.batch(s, process, processes)[1].tolist() for s in steps]
    finally:
        assert src.close is not None
        src.close()


@pytest.mark.parametrize("workers", [0, 1], ids=["threads", "worker-process"])
def test_each_process_reads_its_share_of_the_global_order_from_any_step(
    tmp_path: Path, workers: int
) -> None:
    x, y = _examples()
    records.write_split(str(tmp_path), "train", x, y, shards=3)
    files = records.Records(records.files(str(tmp_path)))
    assert len(files) == SIZE and files.shapes() == ((3,), np.dtype(np.float32))
    for source in (ArraySource(x, y), files):
        whole = _read(source, range(0, 30), 0, 1, workers)  # 30 steps: 2.4 passes
        for step in (0, 12, 25):
            assert whole[step] == global_batch_indices(step, GLOBAL, SIZE, SEED).tolist()
        halves = [_read(source, range(13, 30), p, 2, workers) for p in (0, 1)]
        for i, step in enumerate(range(13, 30)):  # started at step 13: the same batches
            assert halves[0][i] + halves[1][i] == whole[step]


def test_a_record_holds_its_example_bit_for_bit(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((5, 2, 2)).astype(np.float16), rng.integers(0, 9, 5)
    path = str(tmp_path / "train.array_record")
    assert records.write(path, zip(x, y, strict=True)) == 5
    got = records.Records(records.files(path))
    for i in range(5):
        gx, gy = got[i]
        assert gx.dtype == x.dtype and gx.tobytes() == x[i].tobytes()
        assert gy.shape == () and gy.dtype == y.dtype and gy == y[i]


def test_the_share_is_the_data_modules_indices() -> None:
    from kerasjob_trainer.runtimes.keras3.data import Permutations

    perms = Permutations(SIZE, SEED)
    x, y = _examples()
    got = _read(ArraySource(x, y), range(4, 6), 1, 4, 0)
    assert got == [process_indices(perms, s, 1, 4, GLOBAL).tolist() for s in (4, 5)]


PREEMPTED = re.compile(LOG_PREEMPTED_RE)
RESUMED = re.compile(LOG_RESUMED_RE)


@pytest.mark.tf
@pytest.mark.slow
def test_arrayrecord_job_resumes_at_the_next_example_after_a_disruption_and_a_resize(
    tmp_path: Path,
) -> None:
    """2 processes read ArrayRecord files (Grain, one worker process each), SIGTERM at step
    15, resumed at 1 process (elastic, KeepGlobalBatch): every global step's examples are
    an undisturbed run's, the one process reading both shares after the resize."""
    from kerasjob_trainer.shared.data import mnist_sample

    x, y, _, _ = mnist_sample()
    data = tmp_path / "data"
    records.write_split(str(data), "train", x, y, shards=2)
    config = {
        "model": "mnist-mlp",
        "epochs": 2,
        "stepsPerEpoch": 50,
        "saveFreq": 10,
        "batchSizePerReplica": 32,
        "logEverySteps": 1,
        "dataset": {"source": "path", "path": str(data), "format": "arrayrecord"},
        "elastic": {"preferredWorkers": 2},
    }
    env = {"KERASJOB_AUDIT_DIR": str(tmp_path / "audit"), "KERASJOB_DATA_WORKERS": "1"}
    with group(tmp_path, config, backend="jax", env=env) as g:
        trainers = g.start()
        trainers[0].wait_for_step(15, 240)
        trainers[1].signal(signal.SIGTERM)
        assert g.wait_all(240) == [42, 42], g.logs()
        saved = _matches(PREEMPTED, g.trainers[0].text())
        assert len(saved) == 1 and saved[0] >= 15, g.logs()
        g.start(1)
        assert g.wait_all(240) == [0], g.logs()
        text = g.trainers[0].text()
        assert _matches(RESUMED, text) == saved, text
        w0: dict[int, list[int]] = {}
        w1: dict[int, list[int]] = {}
        for r in g.audit_records("data-worker0.jsonl"):
            assert w0.setdefault(r["step"], r["indices"]) == r["indices"]
        for r in g.audit_records("data-worker1.jsonl"):
            w1.setdefault(r["step"], r["indices"])
        for step in range(100):
            mine = w0[step] + w1[step] if step < saved[0] else w0[step]
            assert mine == global_batch_indices(step, 64, len(y), 42).tolist(), step
        # TensorBoard without TensorFlow: the chief's loss at every logged step, both runs
        losses = _scalars(g.output / "tensorboard", "loss")
        assert sorted(losses) == list(range(1, 101)), sorted(losses)
        assert all(0 < v < 5 for v in losses.values())


def _matches(pattern: re.Pattern[str], text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := pattern.match(line))]


def _scalars(logdir: Path, tag: str) -> dict[int, float]:
    """{step: value} of `tag` in every event file (TFRecord framing, tensorboardX's protos)."""
    import struct

    from tensorboardX.proto import event_pb2

    found: dict[int, float] = {}
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert len(files) == 2, files  # one per incarnation of the chief
    for path in files:
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                if value.tag == tag:
                    found[event.step] = value.simple_value
    return found

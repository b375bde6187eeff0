"""Build the distribution strategy from the parsed TF_CONFIG."""

from __future__ import annotations

from typing import Any

from kerasjob_trainer.runtimes.tf_keras.cluster import ClusterInfo


def build_strategy(cluster: ClusterInfo) -> Any:
    """MultiWorkerMirroredStrategy: NCCL on GPUs, RING on CPU.
    Single-process runs get a 1-worker MWMS in local mode too, so SIGTERM handling and
    BackupAndRestore behave the same with one worker as with many. Must run before any
    other TensorFlow op: it configures the eager context.

    No ``timeout_seconds``: TensorFlow (2.21) enforces it with a thread per collective op
    that sleeps for the whole timeout, so a job holds collectives/s x timeout threads. A
    2-worker MNIST MLP (about 50 steps/s, several collectives a step) reached ~16,000 threads
    and crashed ("Resource temporarily unavailable") after 1,500-3,000 steps with the
    default 60 s. The trainer's watchdog enforces ``collectiveTimeoutSeconds`` instead
    (`session.Session`): a step whose collectives make no progress that long never ends.
    """
    import tensorflow as tf

    impl = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if tf.config.list_physical_devices("GPU")
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
    if not cluster.multi_worker:
        # An empty resolver, so a stray TF_CONFIG cannot turn this into multi-worker.
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({}), task_type="worker", task_id=0
        )
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
    # The evaluator is left out of the cluster: it never joins the collectives.
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster.training_cluster),
        task_type=cluster.role,
        task_id=cluster.index,
        rpc_layer="grpc",
    )
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=options
    )

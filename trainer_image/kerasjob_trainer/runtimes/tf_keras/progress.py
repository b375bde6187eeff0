"""The progress callback of the tf-keras runtime: the core's step bookkeeping (`StepLog`:
step lines, progress.json, /metrics, goodput) in a tf_keras callback, the running metrics
continued from the backup, the peer monitor armed, and TensorBoard scalars.

Used by `session.Session.callbacks` (so by the bundled trainer and by users' own scripts).
"""

from __future__ import annotations

import os
from typing import Any

from kerasjob_trainer.core.steplog import StepLog
from kerasjob_trainer.shared import startup
from kerasjob_trainer.shared.faults import say

TENSORBOARD_SUBDIR = "tensorboard"


def progress_callback(
    session: Any,
    *,
    total: int,
    steps_per_epoch: int,
    global_batch: int | None = None,
    start_step: int | None = None,
) -> Any:
    """A tf_keras callback that logs `kerasjob: step N/M ...` after the first step of the
    process and every log interval, reports progress (the chief) and beats the stall
    watchdog and arms the peer monitor on every step."""
    import tf_keras

    steplog = StepLog(
        session, total=total, steps_per_epoch=steps_per_epoch, global_batch=global_batch
    )
    tensorboard = _scalar_writer(session.output_dir) if session.reporter else None

    class ProgressCallback(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            self.step = -1  # known after BackupAndRestore (listed later) has restored

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self.step < 0:
                self._begin()

        def _begin(self) -> None:
            startup.mark("restore")
            self.step = int(self.model.optimizer.iterations.numpy())
            _check_position(start_step, self.step)
            self.epoch = self.step // steps_per_epoch
            self.resumed_at = self.step
            steplog.begin(self.step)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            first = steplog.counted()
            if first and logs is not None and session.metric_state is not None:
                # The metrics exist now: continue their running state from the backup and
                # correct this step's logs in place (the callbacks after this one see them).
                state = session.metric_state
                if state.continue_from_backup(self.resumed_at, steps_per_epoch):
                    logs.update(state.logs())
                    say(f"metrics: running averages continued from step {self.resumed_at}")
            steplog.beat(self.step)
            session.peers.arm()
            if steplog.due(self.step, first):
                scalars = steplog.log(self.step, self.epoch, logs or {})
                if tensorboard:
                    tensorboard(self.step, scalars)

    return ProgressCallback()


def _check_position(start_step: int | None, step: int) -> None:
    """The input pipeline started at `start_step`: training on from another step would
    silently feed the wrong batches."""
    if start_step is not None and step != start_step:
        raise RuntimeError(
            f"data position mismatch: the pipeline starts at step "
            f"{start_step}, the restored optimizer at {step}"
        )


def _scalar_writer(output_dir: str) -> Any:
    """write(step, scalars): TensorBoard scalars in output_dir/tensorboard."""
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    # tf.summary.scalar lives in the tensorboard package, which tensorflow-cpu does not
    # install; write() + this metadata is the same.
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    ).SerializeToString()
    writer = tf.summary.create_file_writer(os.path.join(output_dir, TENSORBOARD_SUBDIR))

    def write(step: int, scalars: dict[str, float | None]) -> None:
        with writer.as_default(step=step):
            for k, v in scalars.items():
                if v is not None:
                    tf.summary.write(k, tf.constant(v, tf.float32), metadata=metadata)
        writer.flush()

    return write

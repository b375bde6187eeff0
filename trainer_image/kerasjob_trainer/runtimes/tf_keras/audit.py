"""The data and step audit's hooks into tf.data and tf_keras (the writer: `shared/audit.py`)."""

from __future__ import annotations

from typing import Any

from kerasjob_trainer.shared.audit import Audit


def pipeline_hook(audit: Audit) -> Any:
    """(steps [n], replicas [n], indices [n, b]) -> indices inside tf.data, recording each
    (step, replica, indices) row as the pipeline produces it."""
    import tensorflow as tf

    def record(s: Any, r: Any, idx: Any) -> Any:
        for step, replica, row in zip(
            s.numpy().tolist(), r.numpy().tolist(), idx.numpy().tolist(), strict=True
        ):
            audit.data(step, replica, row)
        return idx

    def hook(steps: Any, replicas: Any, indices: Any) -> Any:
        out = tf.py_function(record, [steps, replicas, indices], tf.int64)
        out.set_shape(indices.shape)
        return out

    return hook


def callback(audit: Audit) -> Any:
    """A tf_keras callback writing each trained step's record, with its learning rate."""
    import tf_keras

    class StepAudit(tf_keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = int(epoch)  # a numpy int after a resume

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            optimizer = self.model.optimizer
            step = int(optimizer.iterations.numpy()) - 1
            audit.trained(step, self.epoch, batch, logs, lr=learning_rate(optimizer, step))

    return StepAudit()


def learning_rate(optimizer: Any, step: int) -> float:
    """The learning rate used at `step` (0-based), also when it is a schedule."""
    import tf_keras

    lr = getattr(optimizer, "_learning_rate", None)
    if isinstance(lr, tf_keras.optimizers.schedules.LearningRateSchedule):
        return float(lr(step))
    return float(
        optimizer.learning_rate.numpy()
        if hasattr(optimizer.learning_rate, "numpy")
        else optimizer.learning_rate
    )

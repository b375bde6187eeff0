"""Keras's running metric averages in the backup: the logged curves have no seam at a resume.

`model.fit` logs, at every step, the running value of each metric since the epoch began
(the mean loss, the accuracy so far...), kept in the metrics' state variables (a total and a
count for a mean). tf_keras keeps those out of checkpoints and resets them when an epoch
begins, so a run resumed in mid-epoch would log averages over the resumed steps only: a
visible jump in the step log, `status.progress` and TensorBoard.

What this module does, at each backup (periodic or on SIGTERM, the one
`write_checkpoint_manager.save` both use; every worker saves at the same step):

1. each replica flattens its metrics' state variables; one all-gather makes the whole
   group's state (replicas x values) known everywhere, and it is put, with the step and a
   layout of the metrics, into a tracked object of the model, so the backup holds it;
2. after the first step of a process resumed in mid-epoch (the metrics exist only once a
   step has run), every replica *adds* its saved row to its state. A metric's state after
   `reset + one batch + saved` equals `saved + one batch` exactly (float addition commutes),
   so from that step on each replica logs what an undisturbed run logs, bit for bit when the
   run is deterministic; the step's own logs are recomputed before anyone sees them.

Limits (logged, never silent): only states that accumulate by addition are continued (every
metric of tf_keras; a custom `Metric` subclass is assumed not to be and restarts its running
value at the resume); a resume at another number of replicas (an elastic resize) gives the
group's summed state to replica 0, so the epoch's global values continue exactly and the
chief's per-step figures are a blend for the rest of that epoch; a backup from before this
feature (no saved state) or whose metrics differ (a changed model) continues nothing.
"""

from __future__ import annotations

import json
from typing import Any

from kerasjob_trainer.shared.faults import say

#: The model attribute under which the state is tracked (so it is in every backup, but not
#: in model.keras and not among the model's weights).
ATTRIBUTE = "_kerasjob_metric_state"


def _additive(metric: Any) -> bool:
    return type(metric).__module__.startswith("tf_keras.")


class MetricState:
    """The saved metric state of one model (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        import tensorflow as tf
        from tensorflow.python.trackable.autotrackable import AutoTrackable

        self.model = model
        holder = AutoTrackable()
        with tf.device("/cpu:0"):
            holder.values = tf.Variable(
                tf.zeros([0], tf.float64),
                shape=tf.TensorShape([None]),
                trainable=False,
                name="metric_values",
            )
            holder.replicas = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="metric_replicas"
            )
            holder.step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="metric_step")
            holder.layout = tf.Variable("", dtype=tf.string, trainable=False, name="metric_layout")
        self.holder = holder
        setattr(model, ATTRIBUTE, holder)
        self._gather: Any = None
        self._saved_layout = ""

    # -- what is saved ------------------------------------------------------------------------

    def _metrics(self) -> list[Any]:
        return [m for m in self.model.metrics if _additive(m)]

    def _layout(self) -> str:
        return json.dumps(
            [[m.name, [list(v.shape) for v in m.variables]] for m in self._metrics()],
            separators=(",", ":"),
        )

    def snapshot(self) -> None:
        """Before a backup is written: the group's metric state into the tracked variables.
        Every worker calls it at the same step (a backup is a collective save)."""
        import tensorflow as tf

        if self._gather is None:  # traced once (the metrics exist from the first step on)
            metrics = self._metrics()
            strategy = self.model.distribute_strategy

            def flat() -> Any:
                parts = [
                    tf.reshape(tf.cast(v, tf.float64), [1, -1])
                    for m in metrics
                    for v in m.variables
                ]
                return tf.concat(parts, axis=1) if parts else tf.zeros([1, 0], tf.float64)

            @tf.function
            def gather() -> Any:  # [replicas, values] on every worker: one all-gather
                return strategy.gather(strategy.run(flat), axis=0)

            self._gather = gather
            self._saved_layout = self._layout()
        rows = self._gather()
        self.holder.values.assign(tf.reshape(rows, [-1]))
        self.holder.replicas.assign(int(rows.shape[0]))
        self.holder.step.assign(int(self.model.optimizer.iterations.numpy()))
        self.holder.layout.assign(self._saved_layout)

    def keep_in(self, write_manager: Any) -> None:
        """Snapshot before every save of `write_manager` (BackupAndRestore's, which both the
        periodic backups and the save on SIGTERM go through)."""
        save = write_manager.save

        def save_with_metrics(*args: Any, **kwargs: Any) -> Any:
            self.snapshot()
            return save(*args, **kwargs)

        write_manager.save = save_with_metrics

    # -- what is continued --------------------------------------------------------------------

    def continue_from_backup(self, restored_step: int, steps_per_epoch: int) -> bool:
        """After the first step of a resumed process: add the saved state (if it belongs to
        this epoch and these metrics). Returns whether the metrics were continued."""
        import numpy as np
        import tensorflow as tf

        if restored_step <= 0 or restored_step % steps_per_epoch == 0:
            return False  # a fresh run or a resume at an epoch boundary: nothing to continue
        saved_step = int(self.holder.step.numpy())
        if saved_step != restored_step:
            say(
                f"metrics: the backup holds no running metric state for step {restored_step} "
                f"(found {saved_step}); the logged averages restart at this resume"
            )
            return False
        skipped = [m.name for m in self.model.metrics if not _additive(m)]
        if skipped:
            say(
                f"metrics: {', '.join(skipped)} (custom Metric classes) restart their running "
                f"value at this resume; the others continue"
            )
        layout = self.holder.layout.numpy().decode()
        if layout != self._layout():
            say(
                "metrics: the saved running metric state is for other metrics "
                "(the model changed); the logged averages restart at this resume"
            )
            return False
        strategy = self.model.distribute_strategy
        replicas = int(strategy.num_replicas_in_sync)
        saved = int(self.holder.replicas.numpy())
        rows = self.holder.values.numpy().reshape(saved, -1)
        if saved != replicas:
            summed = np.zeros((replicas, rows.shape[1]))
            summed[0] = rows.sum(axis=0)
            rows = summed
            say(
                f"metrics: saved by {saved} replicas, resumed on {replicas}: the group's sum "
                f"continues on replica 0"
            )
        table = tf.constant(rows, tf.float64)
        metrics = self._metrics()

        def add() -> None:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            row = table[replica]
            offset = 0
            for m in metrics:
                for v in m.variables:
                    size = int(np.prod(v.shape))
                    part = tf.reshape(row[offset : offset + size], v.shape)
                    v.assign_add(tf.cast(part, v.dtype))
                    offset += size

        tf.function(lambda: strategy.run(add))()
        return True

    def logs(self) -> dict[str, float]:
        """This process's first replica's metric results (what fit logs, reduction "first")."""
        import tensorflow as tf

        strategy = self.model.distribute_strategy
        results = tf.function(lambda: strategy.run(self.model.get_metrics_result))()
        local = strategy.experimental_local_results(results)[0]
        return {k: float(v) for k, v in local.items()}

"""The progress callback: the stable step log lines, progress.json, /metrics, TensorBoard.

Used by `session.Session.callbacks` (so by the bundled trainer and by users' own scripts).
"""

from __future__ import annotations

import os
import time
from typing import Any

from kerasjob_trainer import goodput, startup
from kerasjob_trainer.faults import say

TENSORBOARD_SUBDIR = "tensorboard"
_SCALAR_METADATA: bytes = b""


def progress_callback(
    session: Any,
    *,
    total: int,
    steps_per_epoch: int,
    interval: int,
    global_batch: int | None = None,
    start_step: int | None = None,
) -> Any:
    """A tf_keras callback that logs `kerasjob: step N/M ...` after the first step of the
    process and every ``interval`` steps, reports progress (the chief) and beats the stall
    watchdog and arms the peer monitor on every step."""
    import tensorflow as tf
    import tf_keras
    from tensorflow.core.framework import summary_pb2

    from kerasjob_trainer.steps import first_step, step_done

    global _SCALAR_METADATA
    _SCALAR_METADATA = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    ).SerializeToString()
    reporter = session.reporter
    writer = (
        tf.summary.create_file_writer(os.path.join(session.output_dir, TENSORBOARD_SUBDIR))
        if reporter
        else None
    )

    class ProgressCallback(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            self.step = -1  # known after BackupAndRestore (listed later) has restored

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self.step < 0:
                self._begin()

        def _begin(self) -> None:
            startup.mark("restore")
            self.step = int(self.model.optimizer.iterations.numpy())
            if start_step is not None and self.step != start_step:
                # The input pipeline started at start_step: training on would silently
                # feed the wrong batches.
                raise RuntimeError(
                    f"data position mismatch: the pipeline starts at step "
                    f"{start_step}, the restored optimizer at {self.step}"
                )
            self.epoch = self.step // steps_per_epoch
            self.resumed_at = self.step
            self.mark = (time.monotonic(), self.step)
            if self.step:
                say(f"resumed at step {self.step}")
            else:
                say(f"starting at step 0 of {total}")
            if reporter:
                reporter.update(step=self.step, epoch=self.epoch, total_steps=total)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            step_done()
            if first_step():
                startup.mark("first_step")
                say(startup.line())
            if first_step() and logs is not None and session.metric_state is not None:
                # The metrics exist now: continue their running state from the backup and
                # correct this step's logs in place (the callbacks after this one see them).
                state = session.metric_state
                if state.continue_from_backup(self.resumed_at, steps_per_epoch):
                    logs.update(state.logs())
                    say(f"metrics: running averages continued from step {self.resumed_at}")
            session.watchdog.beat()
            session.peers.arm()
            found = session.goodput.step_done(self.step)
            if found:
                ledger = session.goodput.ledger
                say(goodput.log_line(len(ledger.disruptions), found, ledger.goodput))
                if reporter:
                    reporter.update(goodput=ledger.totals())
            if first_step() or self.step % interval == 0 or self.step == total:
                self._log(logs or {})

        def _log(self, logs: dict[str, Any]) -> None:
            now = time.monotonic()
            then, then_step = self.mark
            self.mark = (now, self.step)
            rate = (
                (self.step - then_step) * global_batch / max(now - then, 1e-9)
                if global_batch
                else None
            )
            metrics = {k: float(v) for k, v in logs.items() if k != "loss"}
            loss = float(logs["loss"]) if "loss" in logs else None
            text = " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
            loss_text = f"{loss:.4f}" if loss is not None else "nan"
            rate_text = f" samples/s={rate:.0f}" if rate is not None else ""
            say(f"step {self.step}/{total} epoch {self.epoch} loss={loss_text} {text}{rate_text}")
            if reporter:
                ledger = session.goodput.ledger  # productive seconds grow as training goes on
                reporter.update(
                    step=self.step,
                    epoch=self.epoch,
                    loss=loss,
                    metrics=metrics,
                    samples_per_second=round(rate, 1) if rate else None,
                    **({"goodput": ledger.totals()} if ledger.disruptions else {}),
                )
            if writer:
                scalars = {"loss": loss, **metrics, "samples_per_second": rate}
                with writer.as_default(step=self.step):
                    for k, v in scalars.items():
                        if v is not None:
                            # tf.summary.scalar lives in the tensorboard package, which
                            # tensorflow-cpu does not install; write() + metadata is the same.
                            tf.summary.write(
                                k, tf.constant(v, tf.float32), metadata=_SCALAR_METADATA
                            )
                writer.flush()

    return ProgressCallback()

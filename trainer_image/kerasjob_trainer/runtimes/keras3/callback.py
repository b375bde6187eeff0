"""The Keras 3 runtime's training callback: after every step the core's bookkeeping
(`StepLog`: step lines, progress, goodput, the watchdog), the audit, the backup every
saveFreq steps (Orbax, asynchronous, every process), and the save at the step the group
agreed on after a SIGTERM (waited for until committed, then exit 42). This callback is the
one mechanism that acts on a SIGTERM: Orbax's own is off (`checkpoint._TrainerDecides`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.core.steplog import StepLog
from kerasjob_trainer.runtimes.keras3 import checkpoint, tensorboard
from kerasjob_trainer.shared.faults import hard_exit, say

#: SIGTERM seen by this process after its first step (one process; JAX's sync point otherwise).
SIGTERM_SEEN = threading.Event()


class Preemption:
    """Whether every process should stop after `step`: JAX's preemption sync point (the
    coordination service agrees on one step for all when any process got SIGTERM), or the
    local flag for one process."""

    def __init__(self, multi_process: bool) -> None:
        self.sync = None
        if multi_process:
            from jax.experimental import multihost_utils

            self.sync = multihost_utils.reached_preemption_sync_point

    def reached(self, step: int) -> bool:
        if self.sync is not None:
            return bool(self.sync(step))
        return SIGTERM_SEEN.is_set()


class StepCallback:
    """Progress, backups, save-on-SIGTERM, goodput and the watchdog, after every step.
    A keras.callbacks.Callback (`keras_callback` mixes it in once Keras is imported)."""

    def __init__(
        self,
        session: Any,
        model: Any,
        *,
        total: int,
        steps_per_epoch: int,
        start: int,
        global_batch: int,
        totals: dict[str, Any] | None = None,
        backups: checkpoint.Backups | None = None,
        data_position: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        self.session, self.total, self.spe = session, total, steps_per_epoch
        self.step, self.global_batch = start, global_batch
        self.steplog = StepLog(
            session, total=total, steps_per_epoch=steps_per_epoch, global_batch=global_batch
        )
        self.preemption = Preemption(session.identity.multi_process)
        self._kj_model = model
        self._totals = totals or {}
        self._backups = backups
        self._data_position = data_position
        chief = session.reporter is not None
        self.tensorboard = tensorboard.open_scalars(session.output_dir) if chief else None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        """After Keras reset the metrics for this `fit` (one per epoch segment): the first
        segment of a run resumed in mid-epoch takes the saved running totals instead."""
        if self._totals:
            totals, self._totals = self._totals, {}
            if checkpoint.restore_metric_totals(self._kj_model, totals):
                say(f"metrics: running averages continued from step {self.step}")

    def begin(self) -> None:
        iterations = int(self._kj_model.optimizer.iterations.numpy())
        if iterations != self.step:
            hard_exit(
                ExitCode.FAILURE,
                f"data position mismatch: the input starts at step "
                f"{self.step}, the restored optimizer at {iterations}",
            )
        self.steplog.begin(self.step)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        s = self.session
        self.step += 1
        first = self.steplog.counted()
        self.steplog.beat(self.step)
        epoch = (self.step - 1) // self.spe
        if s.audit is not None:
            s.audit.trained(self.step - 1, epoch, batch, logs)
        if self.steplog.due(self.step, first):
            scalars = self.steplog.log(self.step, epoch, logs or {})
            if self.tensorboard is not None:
                self.tensorboard.write(self.step, scalars)
        if self.preemption.reached(self.step):
            self._save()
            if self._backups is not None:
                self._backups.wait()  # committed before the exit says so
            s.watchdog.pause()
            hard_exit(
                ExitCode.PREEMPTED_SAVED,
                f"preempted: state saved at step {self.step}; "
                f"exiting {int(ExitCode.PREEMPTED_SAVED)}",
            )
        if self.step % s.config.save_freq == 0 and self.step < self.total:
            self._save()

    def _save(self) -> None:
        """Every process: each writes the shards it holds (Orbax)."""
        if self._backups is None:
            return
        position = self._data_position(self.step) if self._data_position else None
        self._backups.save(
            self._kj_model,
            checkpoint.Header(
                step=self.step,
                processes=self.session.num_workers,
                global_batch=self.global_batch,
                data=position,
            ),
        )


def keras_callback() -> type:
    import keras

    class KerasJobCallback(StepCallback, keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            keras.callbacks.Callback.__init__(self)
            StepCallback.__init__(self, *args, **kwargs)

    return KerasJobCallback

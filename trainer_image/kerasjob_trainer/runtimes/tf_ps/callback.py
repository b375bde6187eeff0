"""After each execution `fit` hands to the workers (every `steps_per_execution` steps): the
step bookkeeping (`core.steplog`: step lines, progress, goodput, the watchdog), the periodic
backup (deferred while a worker is missing: `recovery`), and the stop at a step boundary
(`stop`). ParameterServerStrategy allows batch-level callbacks only when they take the
coordinator's RemoteValues as logs: this one fetches them only for a step line, so
scheduling never waits on a worker."""

from __future__ import annotations

from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.core.steplog import StepLog
from kerasjob_trainer.runtimes.tf_ps import stop
from kerasjob_trainer.runtimes.tf_ps.backup import Backup
from kerasjob_trainer.shared.faults import hard_exit, say


class Position:
    """Where one `fit` call starts: its first epoch begins `offset` steps in (a resume in
    mid-epoch trains the rest of that epoch as a `fit` of its own)."""

    def __init__(self, first_epoch: int, offset: int, steps_per_epoch: int) -> None:
        self.first_epoch, self.offset, self.steps_per_epoch = first_epoch, offset, steps_per_epoch

    def base(self, epoch: int) -> int:
        """The global step before the epoch's first batch in this `fit`."""
        return epoch * self.steps_per_epoch + (self.offset if epoch == self.first_epoch else 0)


def save_now(since: int, save_freq: int, why: str | None, session: Any) -> bool:
    """Whether the chief saves now, `since` steps after its last backup: on a stop request
    always; a periodic backup once due and no worker is missing (`session.worker_missing`):
    its new function would wait on the lost worker (`recovery`). Asked again after the
    steps in flight are joined, with every worker's server tried: a worker lost in the
    meantime (its closure failed and was run elsewhere) defers the backup too (once seen
    on the real node: the backup at the step of the loss, then 24 s of no steps)."""
    return why is not None or (since >= save_freq and not session.worker_missing())


#: A stop's save: how long its commit waits for a periodic one still being pushed.
PUSH_WAIT_SECONDS = 10.0


def commit(bucket: Any, step: int, *, stopping: bool) -> None:
    """A backup just written, committed to the job's bucket (if it has one): a periodic
    one in the background, a stop's here and now (its ps waits for the answer)."""
    if bucket is None:
        return
    if not stopping:
        bucket.push_later(step)
        return
    bucket.wait(PUSH_WAIT_SECONDS)
    if bucket.push_now(step):
        say(f"backup of step {step} committed to {bucket.config.location}")


def ps_callback(
    session: Any, steplog: StepLog, backup: Backup, position: Position, saved_at: list[int]
) -> Any:
    """The callback of one `fit` call; `saved_at[0]`: the step of the latest backup (shared
    by the calls of one run)."""
    import tf_keras
    from tf_keras.src.utils import tf_utils

    class PsCallback(tf_keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # RemoteValues, fetched only when logged
            self.base = 0
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch, self.base = epoch, position.base(epoch)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            step = self.base + batch + 1
            first = steplog.counted()
            steplog.beat(step)
            session.peers.arm()
            session.workers.note_step(step)
            if session.workers.settle(session.goodput.ledger) and session.reporter:
                session.reporter.update(goodput=session.goodput.ledger.totals())
            if first or step // steplog.interval > session.logged // steplog.interval:
                session.logged = step
                values = tf_utils.sync_to_numpy_or_python_type(logs or {})
                steplog.log(step, self.epoch, {k: float(v) for k, v in values.items()})
            why = stop.requested(session.board)
            if save_now(step - saved_at[0], session.config.save_freq, why, session):
                self.model._cluster_coordinator.join()  # every step up to `step` done
                if why is None and session.worker_missing(probe=True):
                    return  # a worker lost while its steps finished elsewhere: later
                backup.save(step)
                saved_at[0] = step
                commit(session.bucket, step, stopping=why is not None)
                if why is not None:
                    stop.saved(session.board, step)
                    code = int(ExitCode.PREEMPTED_SAVED)
                    hard_exit(code, f"preempted: state saved at step {step}; exiting {code}")

    say("backups: the chief's TF checkpoint at step boundaries")
    return PsCallback()

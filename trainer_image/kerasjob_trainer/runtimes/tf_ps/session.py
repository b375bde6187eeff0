"""The chief of a parameter-server job: ParameterServerStrategy with `Model.fit` on a
`DatasetCreator`, backups, resume at the exact step; the library API of an own PS script.

    from kerasjob_trainer.runtimes.tf_ps import session

    job = session.start()                       # TF_CONFIG with ps tasks; on a ps or a
                                                # worker it serves and never returns
    with job.strategy.scope():
        model = build_and_compile()             # tf_keras
    job.fit(model, dataset_fn, epochs=3, steps_per_epoch=200)
    job.finish(model)

`dataset_fn(input_context)` returns each worker's batched, repeated tf.data.Dataset. One
script runs in every Pod (`spec.trainer.command`): on a ps or worker task `start()` serves
the chief (`server`) and exits 0 once it is done; the rest runs on the chief only.

What holds (asynchronous training): the job trains exactly epochs x stepsPerEpoch steps as
`fit` schedules them; a backup is taken at a step boundary with every scheduled step done,
and a restart resumes at exactly that step. A worker lost mid-step has its steps run again
on another worker: an update it had already applied to the ps counts twice, so
`optimizer.iterations` may end above the step count (by at most steps_per_execution per
lost worker). The weights are not bit-identical to another run's (the order in which
workers' updates reach the ps is a race), nor is the order of examples.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.core import lifecycle
from kerasjob_trainer.core.lifecycle import Lifecycle
from kerasjob_trainer.core.steplog import StepLog
from kerasjob_trainer.runtimes.tf_keras import errors
from kerasjob_trainer.runtimes.tf_ps import recovery, server, stop, workers
from kerasjob_trainer.runtimes.tf_ps.backup import Backup, claim_and_pull, latest_step
from kerasjob_trainer.runtimes.tf_ps.board import board_for
from kerasjob_trainer.runtimes.tf_ps.callback import Position, ps_callback
from kerasjob_trainer.runtimes.tf_ps.context import PsContext, build_context
from kerasjob_trainer.shared import faults, leader, startup
from kerasjob_trainer.shared.bucket_sync import BucketSync
from kerasjob_trainer.shared.faults import hard_exit, say

#: Steps in one closure the coordinator sends a worker (fewer round trips); a divisor of
#: stepsPerEpoch so that epochs end on an execution boundary.
STEPS_PER_EXECUTION = 10


class Session(Lifecycle):
    """The chief's session (see the module docstring). Made by `start()`."""

    ctx: PsContext

    def __init__(
        self,
        ctx: PsContext,
        strategy: Any,
        reconnecting: threading.Event,
        bucket: BucketSync | None = None,
    ) -> None:
        super().__init__(ctx)
        self.strategy, self.logged = strategy, 0  # logged: the step of the last step line
        self.reconnecting = reconnecting  # set while the coordinator reconnects a worker
        # A lost ps: restart from the backup at once (its variables are gone).
        self.peers = faults.PeerMonitor(ctx.identity.addresses("ps"))
        self.workers = workers.watch(ctx.identity)  # a lost worker: its cost in goodput
        self.board = board_for(ctx.checkpoint_dir, os.environ)  # stop requests, done
        stop.forget(self.board)
        #: With spec.checkpoint.location: the backups' bucket (claimed and pulled already).
        self.bucket = bucket

    def worker_missing(self, *, probe: bool = False) -> bool:
        """A worker is gone or being reconnected: no periodic backup now (see `recovery`).
        `probe`: also try each worker's server now (a connect each, ~1 ms when it serves),
        for a loss the watch and the coordinator have not seen yet."""
        if self.reconnecting.is_set() or self.workers.any_gone():
            return True
        return probe and bool(recovery.all_serving(self.ctx.identity.cluster["worker"]))

    def global_batch_size(self, per_replica: int) -> int:
        """The batch of one step (one worker's): `per_replica` x its replicas."""
        return int(per_replica) * int(self.strategy.num_replicas_in_sync)

    @property
    def backups(self) -> str:
        """The backups' directory: on the volume, or the Pod's copy of the bucket's."""
        return self.bucket.chief_dir if self.bucket is not None else self.backup_dir

    def restored_step(self, steps_per_epoch: int) -> int:
        del steps_per_epoch
        return latest_step(self.backups)

    def steps_per_execution(self, steps_per_epoch: int) -> int:
        return math.gcd(STEPS_PER_EXECUTION, steps_per_epoch)

    def fit(
        self,
        model: Any,
        dataset_fn: Callable[[Any], Any],
        *,
        epochs: int,
        steps_per_epoch: int,
        global_batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        """model.fit on `DatasetCreator(dataset_fn)` from the last backup's step: backups
        every saveFreq steps and on SIGTERM (exit 42), a lost ps -> 43, other errors -> 1."""
        import tf_keras

        total = epochs * steps_per_epoch
        backup = Backup(self.backups, model, local=self.bucket is not None)
        start = backup.restore()
        steplog = StepLog(
            self, total=total, steps_per_epoch=steps_per_epoch, global_batch=global_batch_size
        )
        self._say_shape(epochs, steps_per_epoch, start)
        steplog.begin(start)
        self.logged, saved_at = start, [start]
        creator = tf_keras.utils.experimental.DatasetCreator(dataset_fn)
        for first_epoch, offset, steps in fit_calls(start, epochs, steps_per_epoch):
            position = Position(first_epoch, offset, steps_per_epoch)
            callback = ps_callback(self, steplog, backup, position, saved_at)
            try:
                model.fit(
                    creator,
                    initial_epoch=first_epoch,
                    epochs=first_epoch + 1 if offset else epochs,
                    steps_per_epoch=steps,
                    callbacks=[callback],
                    verbose=0,
                    **kwargs,
                )
            except Exception as e:  # every error must end in a contract exit code, fast
                self.fail(e)
        self.watchdog.pause()
        self.peers.stop()
        self.steps = total

    def _say_shape(self, epochs: int, steps_per_epoch: int, start: int) -> None:
        me = self.ctx.identity
        say(
            f"chief of {me.workers} worker(s) and {len(me.cluster['ps'])} ps, "
            f"{epochs}x{steps_per_epoch} steps, backup every {self.config.save_freq}"
            + (f", resuming at step {start}" if start else "")
        )

    def classify(self, error: BaseException) -> ExitCode:
        return errors.classify(error)

    def final_step(self, model: Any) -> int:
        return self.steps

    def after_final_save(self) -> None:
        stop.saved(self.board, self.steps)  # a ps waiting on a save is answered
        stop.finish(self.board, self.steps)  # the ps and the workers leave

    def leave(self) -> None:
        """Done and saved: the coordinator's teardown only waits on servers that are
        leaving too (tens of seconds), so the chief leaves at once."""
        hard_exit(ExitCode.SUCCESS)


def fit_calls(start: int, epochs: int, steps_per_epoch: int) -> list[tuple[int, int, int]]:
    """The `fit` calls that train from global step `start` on: (first epoch, steps already
    done in it, steps per epoch of the call). A resume in mid-epoch first finishes that
    epoch in a call of its own."""
    epoch, offset = divmod(start, steps_per_epoch)
    calls = []
    if offset:
        calls.append((epoch, offset, steps_per_epoch - offset))
        epoch += 1
    if epoch < epochs:
        calls.append((epoch, 0, steps_per_epoch))
    return calls


def start(argv: list[str] | None = None) -> Session:
    """The chief's Session (an own PS script's entry point): the configuration checked
    before TensorFlow starts (exit 78), then ParameterServerStrategy with every ps and
    worker reachable."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    return lifecycle.start(argv, build_context, session_for, stop.requested_by_signal)


def session_for(ctx: PsContext) -> Session:
    import tensorflow as tf

    from kerasjob_trainer.runtimes.tf_keras.session import make_deterministic

    startup.mark("tensorflow")
    me = ctx.identity
    if not me.is_chief:
        server.serve(ctx)  # never returns: exit 0 when the chief is done, 42/43 else
    if ctx.config.deterministic:
        make_deterministic()
    bucket = BucketSync.from_env(os.environ, ctx.backup_dir)
    if bucket is not None:  # the chief alone reads and writes the backups
        claim_and_pull(bucket)
    leader.before_the_group_forms(own=me.own_address, leader=None)
    for address in me.addresses("ps", "worker"):  # the coordinator connects to every task
        leader.wait_for_leader(address)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(me.cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    try:
        strategy = tf.distribute.ParameterServerStrategy(resolver)
    except Exception as e:  # a task that died while the cluster formed
        faults.exit_for(e, errors.classify(e))
    reconnecting = recovery.gate_cluster_updates(me.cluster["worker"], me.cluster["ps"])
    startup.mark("cluster")
    tf.keras.utils.set_random_seed(ctx.config.seed)
    return Session(ctx, strategy, reconnecting, bucket)

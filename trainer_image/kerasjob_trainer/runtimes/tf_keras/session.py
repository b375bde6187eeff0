"""Your own `model.fit` script as a KerasJob trainer: the library API.

What the bundled trainer does for its models, for any tf_keras script, in a few lines:

    from kerasjob_trainer import session

    job = session.start()                      # TF_CONFIG, MWMS strategy, dirs, SIGTERM guard
    with job.strategy.scope():
        model = build_and_compile_my_model()   # a tf_keras model
    data = my_dataset().repeat().batch(job.global_batch_size(64))
    job.fit(model, data, epochs=3, steps_per_epoch=200)   # backups, SIGTERM -> 42, peers -> 43
    job.finish(model)                          # the chief writes model.keras; exit 0

- **TF_CONFIG**: read by `start()` (none: one local worker); ``job.is_chief``, ``job.role``,
  ``job.index``, ``job.num_workers``; `strategy` is MultiWorkerMirroredStrategy (NCCL on GPUs).
- **Backup directory**: `<KERASJOB_CHECKPOINT_DIR>/backup`, BackupAndRestore every
  `saveFreq` steps (spec.checkpoint.saveFreq): a restarted job resumes at the exact step.
  The model must be built inside ``job.strategy.scope()`` and the data must be batched to
  the *global* batch (``job.global_batch_size(per_replica)``) and repeat.
- **SIGTERM** (eviction, preemption, `kubectl delete pod`): every worker saves at one agreed
  step and exits 42; a lost peer exits 43 at once; both are restarts that never use up
  backoffLimit. Any other exception in `fit` exits 1 (a failure).
- **Progress**: the chief writes progress.json and serves /metrics (the operator's
  status.progress, `kerasjob get`), and logs the stable `kerasjob: step N/M ...` lines.
- A bad environment (TF_CONFIG, config) exits 78 before TensorFlow starts.

The bundled trainer (`train`) is itself written on this API; what every runtime's session
shares is the core's `Lifecycle`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.core import lifecycle
from kerasjob_trainer.core.lifecycle import Lifecycle
from kerasjob_trainer.runtimes.tf_keras import audit, errors, preemption
from kerasjob_trainer.runtimes.tf_keras.cluster import ClusterInfo
from kerasjob_trainer.runtimes.tf_keras.context import RunContext, build_context
from kerasjob_trainer.runtimes.tf_keras.metric_state import MetricState
from kerasjob_trainer.runtimes.tf_keras.progress import progress_callback
from kerasjob_trainer.shared import bucket_sync, faults, leader, startup
from kerasjob_trainer.shared.bucket_sync import BucketSync
from kerasjob_trainer.shared.faults import hard_exit, say

#: Without the group's barrier: how long a preempted worker waits after its save before it
#: exits, so peers still pulling its last collective chunks do not see a lost peer (43).
PREEMPTED_EXIT_DELAY_SECONDS = 0.3

#: With a bucket: how long the end of `fit` waits for the last periodic backup's push.
BUCKET_FLUSH_SECONDS = 60.0
#: ... and how long a chief leaving (a lost peer: 43; SIGTERM: 42, before its own save's
#: push) lets a periodic backup's push in flight finish.
BUCKET_EXIT_WAIT_SECONDS = 10.0


class Session(Lifecycle):
    """One trainer process of a KerasJob (see the module docstring). Made by `start()`."""

    ctx: RunContext

    def __init__(self, ctx: RunContext, strategy: Any, bucket: BucketSync | None = None) -> None:
        super().__init__(ctx)
        self.strategy = strategy
        #: With spec.checkpoint.location: the backups' bucket (pulled already).
        self.bucket = bucket
        if bucket is not None and self.is_chief:
            faults.on_hard_exit(self._finish_push)
        self.peers = faults.PeerMonitor(_peer_addresses(ctx.identity))
        self.metric_state: MetricState | None = None  # made by callbacks()

    @property
    def role(self) -> str:
        return self.ctx.identity.role

    def global_batch_size(self, per_replica: int) -> int:
        """The global batch: `per_replica` x the replicas in sync, or, for an elastic job
        (KeepGlobalBatch), x the replicas of the job at its preferred size, so a job running
        short of workers trains on the same batches (each replica takes a larger share)."""
        replicas = int(self.strategy.num_replicas_in_sync)
        elastic = self.config.elastic
        if elastic is None:
            return int(per_replica) * replicas
        chief = 1 if self.ctx.identity.training_cluster.get("chief") else 0
        preferred = (elastic.preferred_workers + chief) * replicas // self.num_workers
        return self.keep_global_batch(
            per_replica, replicas, preferred, "replica", self.num_workers - chief
        )

    def restored_step(self, steps_per_epoch: int) -> int:
        """The global step `fit` will resume at (0 for a fresh job), read from the backup
        before `fit`: start the input pipeline there (see data position in the README)."""
        return preemption.restored_step(self.backup_dir, steps_per_epoch)

    # -- training -----------------------------------------------------------------------------

    def callbacks(
        self,
        model: Any,
        *,
        epochs: int,
        steps_per_epoch: int,
        global_batch_size: int | None = None,
        start_step: int | None = None,
    ) -> list[Any]:
        """Progress (first: a step is logged before it is saved) and BackupAndRestore with
        save-on-SIGTERM. `fit` adds them; use this only to call model.fit yourself.
        `start_step`: the step the input pipeline starts at, checked at the first step."""
        if model.distribute_reduction_method == "auto":
            # "auto" sums per-replica batch logs under MWMS (2 workers log accuracy 1.9);
            # "first" logs the local replica's own batch, the honest per-step figure.
            model.distribute_reduction_method = "first"
        self.peers.quiet_when(lambda: preemption.preemption_in_progress(model))
        if self.ctx.identity.multi_process:
            # From here (fit about to start: model and data made) to the first step, too,
            # a silent peer must end the process: the peer monitor is armed only after the
            # first step, and a first collective has no timeout of its own (`strategy`).
            self.watchdog.until_first_step(self.config.stall_timeout_seconds)
        if self.config.deterministic and preemption.checkpoint_random_state(model):
            say("deterministic: the random layers' generator state is in every backup")
        # Before BackupAndRestore restores (on_train_begin): the running metrics' state is
        # part of the backup, so the logged averages continue at a resume in mid-epoch.
        self.metric_state = MetricState(model)

        cfg = self.config
        say(
            f"{self.role}:{self.index} of {self.num_workers} worker(s), "
            f"{self.strategy.num_replicas_in_sync} replica(s), {epochs}x{steps_per_epoch} "
            f"steps, backup every {cfg.save_freq}"
            f"{', deterministic' if cfg.deterministic else ''}"
        )
        return [
            progress_callback(
                self,
                total=epochs * steps_per_epoch,
                steps_per_epoch=steps_per_epoch,
                global_batch=global_batch_size,
                start_step=start_step,
            ),
            *([audit.callback(self.audit)] if self.audit else []),
            preemption.backup_and_restore(
                self.backup_dir,
                cfg.save_freq,
                lambda: self._preempted_saved(model),
                self.metric_state,
                on_backup=self._backed_up if self.bucket and self.is_chief else None,
            ),
        ]

    def _finish_push(self, code: int) -> None:
        """On a hard exit (a lost peer: 43): a complete backup's push in flight may end (42
        waited already, before its own save's push)."""
        assert self.bucket is not None
        if code != ExitCode.PREEMPTED_SAVED:
            self.bucket.wait(BUCKET_EXIT_WAIT_SECONDS)

    def _backed_up(self, step: int) -> None:
        """The chief's periodic backup of `step` is on its disk: commit it to the bucket."""
        assert self.bucket is not None
        self.bucket.push_later(step)

    def _preempted_saved(self, model: Any) -> None:
        """The group saved at the agreed step: leave together, exit 42."""
        step = int(model.optimizer.iterations.numpy())
        if self.num_workers > 1:
            # Every worker leaves once all have saved (`preemption.leave_together`);
            # without the barrier, a brief pause instead.
            why = preemption.leave_together(step, self.config.collective_timeout_seconds)
            if why is not None:
                say(f"preempted: leaving without the group's barrier ({why})")
                time.sleep(PREEMPTED_EXIT_DELAY_SECONDS)
        if self.bucket is not None and self.is_chief:
            # The peers are gone (the barrier); the save is committed within the grace
            # period, or the last committed step stays the one a restart restores.
            self.bucket.wait(BUCKET_EXIT_WAIT_SECONDS)
            if self.bucket.push_now(step):
                say(f"backup of step {step} committed to {self.bucket.config.location}")
        hard_exit(
            ExitCode.PREEMPTED_SAVED,
            f"preempted: state saved at step {step}; exiting {int(ExitCode.PREEMPTED_SAVED)}",
        )

    def fit(
        self,
        model: Any,
        x: Any,
        *,
        epochs: int,
        steps_per_epoch: int,
        callbacks: list[Any] | None = None,
        global_batch_size: int | None = None,
        start_step: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """model.fit with backups, save-on-SIGTERM and progress; resumes where the job was.

        `start_step`: where `x` starts (`restored_step`); checked against the restored
        optimizer at the first step (exit 1 on a mismatch). Errors end the process with the
        contract's exit code (43 for a lost peer, else 1).
        """
        ours = self.callbacks(
            model,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            global_batch_size=global_batch_size or _batch_size(x),
            start_step=start_step,
        )
        try:
            history = model.fit(
                x,
                epochs=epochs,
                steps_per_epoch=steps_per_epoch,
                callbacks=[*ours, *(callbacks or [])],
                verbose=kwargs.pop("verbose", 0),
                **kwargs,
            )
        except Exception as e:  # every error must end in a contract exit code, fast
            self.fail(e)
        if self.bucket is not None and not self.bucket.wait(BUCKET_FLUSH_SECONDS):
            say("the last backup's push to the bucket is still running; finishing")
        self.watchdog.pause()
        self.peers.stop()  # peers finish and leave on their own from here on
        self.steps = int(model.optimizer.iterations.numpy())
        return history

    def classify(self, error: BaseException) -> ExitCode:
        return errors.classify(error)

    def final_step(self, model: Any) -> int:
        return self.steps or int(model.optimizer.iterations.numpy())


def start(argv: list[str] | None = None) -> Session:
    """This process's Session: configuration from the environment the operator sets
    (TF_CONFIG, KERASJOB_*), checked before TensorFlow starts (exit 78 when it cannot work),
    then the MultiWorkerMirroredStrategy. Call it before any other TensorFlow op."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    return lifecycle.start(argv, build_context, session_for, preemption.sigterm_without_save)


def session_for(ctx: RunContext) -> Session:
    import tensorflow as tf

    from kerasjob_trainer.runtimes.tf_keras.strategy import build_strategy

    startup.mark("tensorflow")

    if ctx.config.deterministic:
        make_deterministic()
    bucket = BucketSync.from_env(os.environ, ctx.backup_dir)
    if bucket is not None and ctx.identity.is_chief:
        # Before the group forms: the peers pull the step this claim names once it has.
        _pull(bucket, claim=True)
    if ctx.identity.multi_worker:
        # Its own name at its own address, then the leader's server (`leader.py`): either
        # too early costs gRPC's 30 s re-resolution back-off.
        cluster = ctx.identity
        leader.before_the_group_forms(
            own=cluster.training_cluster[cluster.role][cluster.index],
            leader=None if cluster.is_chief else leader.leader_address(cluster.training_cluster),
        )
    try:
        strategy = build_strategy(ctx.identity)
    except Exception as e:  # e.g. a peer that died while the group was forming
        multi = ctx.identity.multi_process
        faults.exit_for(e, errors.classify(e) if multi else ExitCode.FAILURE)
    startup.mark("cluster")
    if bucket is not None and not ctx.identity.is_chief:
        _pull(bucket, claim=False)
    tf.keras.utils.set_random_seed(ctx.config.seed)
    return Session(ctx, strategy, bucket)


def _pull(bucket: BucketSync, *, claim: bool) -> None:
    """The chief claims this incarnation's generation (the step every process restores);
    every process then replaces its local backup with that step's files. A store that
    fails here (it answered the start's check) is a failure (exit 1)."""
    began = time.monotonic()
    try:
        committed = bucket.claim() if claim else bucket.chosen()
        size = bucket.pull(committed)
    except Exception as e:
        faults.exit_for(e, ExitCode.FAILURE)
    took = f" in {time.monotonic() - began:.2f}s"
    claimed = f"; this incarnation is generation {bucket.generation}" if claim else ""
    say(bucket_sync.describe_pull(committed, size, bucket.config) + took + claimed)


def make_deterministic() -> None:
    """Reproducible runs: deterministic kernels and a checkpointed random state.

    Before any op (the strategy configures the eager context). tf_keras's
    `enable_tf_random_generator` makes layers that draw random numbers (Dropout, ...) use a
    `tf.random.Generator` whose state is a variable; `preemption.checkpoint_random_state`
    puts it in the backup, so a resumed run continues the same random stream.
    """
    import tensorflow as tf
    import tf_keras

    tf.config.experimental.enable_op_determinism()
    tf_keras.backend.experimental.enable_tf_random_generator()


def _batch_size(x: Any) -> int | None:
    """The static global batch of a batched tf.data.Dataset (drop_remainder=True), else None."""
    try:
        import tensorflow as tf

        spec = tf.nest.flatten(x.element_spec)[0]
        return int(spec.shape[0]) if spec.shape.rank and spec.shape[0] is not None else None
    except (AttributeError, TypeError, ValueError, IndexError):
        return None


def _peer_addresses(cluster: ClusterInfo) -> list[str]:
    mine = cluster.training_cluster.get(cluster.role, [])[cluster.index : cluster.index + 1]
    return [a for addrs in cluster.training_cluster.values() for a in addrs if a not in mine]

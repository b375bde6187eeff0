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

The bundled trainer (`kerasjob_trainer.train`) is itself written on this API.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from typing import Any, NoReturn

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError, TrainerConfig
from kerasjob_trainer import faults, goodput, leader, preemption, startup, steps
from kerasjob_trainer.audit import Audit
from kerasjob_trainer.faults import hard_exit, say
from kerasjob_trainer.metric_state import MetricState
from kerasjob_trainer.metrics import ProgressReporter
from kerasjob_trainer.outputs import open_reporter, save_model
from kerasjob_trainer.progress import progress_callback

#: A successful run that is still tearing TensorFlow down after this long exits anyway.
SUCCESS_TEARDOWN_SECONDS = 20.0
#: Without the group's barrier: how long a preempted worker waits after its save before it
#: exits, so peers still pulling its last collective chunks do not see a lost peer (43).
PREEMPTED_EXIT_DELAY_SECONDS = 0.3


def install_early_sigterm_handler() -> None:
    """SIGTERM before fit() installs TensorFlow's handler, or when the override is off.

    With no step done in this process the backup *is* the current state: exit 42. After
    steps without save-before-preemption, the work since the last backup is lost: exit 43
    ("restart me"), which the operator also treats as a disruption.
    """

    def handler(signum: int, frame: Any) -> None:
        if steps.steps_this_process() == 0:
            hard_exit(
                ExitCode.PREEMPTED_SAVED,
                "SIGTERM before the first step: the backup is current; exiting 42",
            )
        hard_exit(
            ExitCode.PEER_LOST,
            "SIGTERM without save-before-preemption: resuming from the last backup; exiting 43",
        )

    signal.signal(signal.SIGTERM, handler)


class Session:
    """One trainer process of a KerasJob (see the module docstring). Made by `start()`."""

    def __init__(self, ctx: Any, strategy: Any) -> None:
        self.ctx = ctx  # kerasjob_trainer.context.RunContext
        self.strategy = strategy
        self.reporter: ProgressReporter | None = (
            open_reporter(ctx.output_dir, ctx.metrics_port) if self.is_chief else None
        )
        # A step stuck on a collective for collectiveTimeoutSeconds is a lost peer (not
        # TensorFlow's per-op timeout: `strategy.build_strategy`); stallTimeoutSeconds caps it.
        cfg = ctx.config
        self.watchdog = faults.Watchdog(
            min(cfg.collective_timeout_seconds, cfg.stall_timeout_seconds)
        )
        self.peers = faults.PeerMonitor(_peer_addresses(ctx.cluster))
        self.steps = 0
        self.metric_state: MetricState | None = None  # made by callbacks()
        self._elastic_said = False
        #: The data and step audit (KERASJOB_AUDIT_DIR), None when off.
        self.audit = Audit.from_env(f"{ctx.cluster.role}{ctx.cluster.index}")
        # Before fit: the chief reads the previous generation's goodput records now.
        self.goodput = goodput.Recorder(
            ctx.checkpoint_dir,
            f"{ctx.cluster.role}{ctx.cluster.index}",
            self.is_chief,
            workers=self.num_workers,
        )
        faults.on_hard_exit(self.goodput.exiting)
        if self.reporter is not None:  # the exact last progress, for the operator
            faults.on_hard_exit(self._leave_progress)

    def _leave_progress(self, code: int) -> None:
        """On every hard exit of the chief: the latest totals in the termination message."""
        assert self.reporter is not None
        if self.goodput.ledger.disruptions:
            self.reporter.update(goodput=self.goodput.ledger.totals())
        self.reporter.write_termination_message()

    # -- who and where ------------------------------------------------------------------------

    @property
    def config(self) -> TrainerConfig:
        """The job's spec.trainer (+ saveFreq), parsed (KERASJOB_TRAINER_CONFIG)."""
        return self.ctx.config  # type: ignore[no-any-return]

    @property
    def is_chief(self) -> bool:
        return bool(self.ctx.cluster.is_chief)

    @property
    def role(self) -> str:
        return str(self.ctx.cluster.role)

    @property
    def index(self) -> int:
        return int(self.ctx.cluster.index)

    @property
    def num_workers(self) -> int:
        return max(int(self.ctx.cluster.num_workers), 1)

    @property
    def checkpoint_dir(self) -> str:
        return str(self.ctx.checkpoint_dir)

    @property
    def backup_dir(self) -> str:
        return str(self.ctx.backup_dir)

    @property
    def output_dir(self) -> str:
        """Where the chief writes model.keras, progress.json and TensorBoard logs."""
        return str(self.ctx.output_dir)

    def global_batch_size(self, per_replica: int) -> int:
        """The global batch: `per_replica` x the replicas in sync, or, for an elastic job
        (KeepGlobalBatch), x the replicas of the job at its preferred size, so a job running
        short of workers trains on the same batches (each replica takes a larger share)."""
        replicas = int(self.strategy.num_replicas_in_sync)
        elastic = self.config.elastic
        if elastic is None:
            return int(per_replica) * replicas
        chief = 1 if self.ctx.cluster.training_cluster.get("chief") else 0
        preferred = (elastic.preferred_workers + chief) * replicas // self.num_workers
        global_batch = int(per_replica) * preferred
        if global_batch % replicas:
            hard_exit(
                ExitCode.INVALID_CONFIG,
                f"elastic: the global batch {global_batch} ({per_replica} x {preferred} "
                f"replicas at the preferred size) cannot be split evenly across the "
                f"{replicas} replicas now in the job; choose a per-replica batch that "
                f"every size between minWorkers and workers divides",
            )
        if preferred != replicas and not self._elastic_said:
            self._elastic_said = True
            say(
                f"elastic: {self.num_workers - chief} of {elastic.preferred_workers} preferred "
                f"workers; global batch {global_batch} kept ({elastic.batch_policy}): "
                f"{global_batch // replicas} per replica instead of {per_replica}"
            )
        return global_batch

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
        if self.config.deterministic and preemption.checkpoint_random_state(model):
            say("deterministic: the random layers' generator state is in every backup")
        # Before BackupAndRestore restores (on_train_begin): the running metrics' state is
        # part of the backup, so the logged averages continue at a resume in mid-epoch.
        self.metric_state = MetricState(model)

        def on_preempted_saved() -> None:
            step = int(model.optimizer.iterations.numpy())
            if self.num_workers > 1:
                # Every worker leaves once all have saved (`preemption.leave_together`);
                # without the barrier, a brief pause instead.
                why = preemption.leave_together(step, self.config.collective_timeout_seconds)
                if why is not None:
                    say(f"preempted: leaving without the group's barrier ({why})")
                    time.sleep(PREEMPTED_EXIT_DELAY_SECONDS)
            hard_exit(
                ExitCode.PREEMPTED_SAVED,
                f"preempted: state saved at step {step}; exiting {int(ExitCode.PREEMPTED_SAVED)}",
            )

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
                interval=cfg.log_every_steps or cfg.save_freq,
                global_batch=global_batch_size,
                start_step=start_step,
            ),
            *([self.audit.callback()] if self.audit else []),
            preemption.backup_and_restore(
                self.backup_dir, cfg.save_freq, on_preempted_saved, self.metric_state
            ),
        ]

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
        self.watchdog.pause()
        self.peers.stop()  # peers finish and leave on their own from here on
        self.steps = int(model.optimizer.iterations.numpy())
        return history

    def fail(self, error: BaseException) -> NoReturn:
        """Exit with the code the error means (43: the group broke; else 1)."""
        code = faults.classify(error) if self.num_workers > 1 else ExitCode.FAILURE
        hard_exit(code, f"{type(error).__name__}: {faults.summary(error)} -> exiting {int(code)}")

    def finish(
        self, model: Any, *, metrics: dict[str, float] | None = None, exit: bool = True
    ) -> int:
        """Save the final model (the chief keeps it in output_dir/model.keras), delete the
        backup, mark progress done; then exit 0 (TensorFlow's teardown may take 20 s at
        most). Every worker must call it: saving reads metric variables collectively."""
        try:
            save_model(model, self.output_dir, self.is_chief)
            if self.is_chief:
                shutil.rmtree(self.backup_dir, ignore_errors=True)  # the model is safe now
        except Exception as e:
            self.fail(e)
        steps = self.steps or int(model.optimizer.iterations.numpy())
        self.goodput.exiting(int(ExitCode.SUCCESS))
        if self.reporter is not None:
            final = {**self.reporter.progress.metrics, **(metrics or {})}
            self.reporter.update(
                step=steps, metrics=final, done=True, goodput=self.goodput.ledger.totals()
            )
            self.reporter.write_termination_message()
            acc = final.get("test_accuracy")
            say(f"final {f'test_accuracy={acc:.4f} ' if acc is not None else ''}steps={steps}")
            self.reporter.close()
        else:
            say(f"done steps={steps}")
        _exit_after_teardown()
        if exit:
            sys.stdout.flush()
            sys.exit(int(ExitCode.SUCCESS))
        return int(ExitCode.SUCCESS)


def start(argv: list[str] | None = None) -> Session:
    """This process's Session: configuration from the environment the operator sets
    (TF_CONFIG, KERASJOB_*), checked before TensorFlow starts (exit 78 when it cannot work),
    then the MultiWorkerMirroredStrategy. Call it before any other TensorFlow op."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from kerasjob_trainer.context import build_context

    install_early_sigterm_handler()
    try:
        ctx = build_context(argv if argv is not None else [], check_model=False)
    except ConfigError as e:
        print(f"kerasjob: invalid configuration: {e}", file=sys.stderr, flush=True)
        os._exit(int(ExitCode.INVALID_CONFIG))
    return session_for(ctx)


def session_for(ctx: Any) -> Session:
    import tensorflow as tf

    from kerasjob_trainer.strategy import build_strategy

    startup.mark("tensorflow")

    if ctx.config.deterministic:
        make_deterministic()
    if ctx.cluster.multi_worker:
        # Its own name at its own address, then the leader's server (`leader.py`): either
        # too early costs gRPC's 30 s re-resolution back-off.
        cluster = ctx.cluster
        leader.before_the_group_forms(
            own=cluster.training_cluster[cluster.role][cluster.index],
            leader=None if cluster.is_chief else leader.leader_address(cluster.training_cluster),
        )
    try:
        strategy = build_strategy(ctx.cluster)
    except Exception as e:  # e.g. a peer that died while the group was forming
        code = faults.classify(e) if ctx.cluster.num_workers > 1 else ExitCode.FAILURE
        hard_exit(code, f"{type(e).__name__}: {faults.summary(e)} -> exiting {int(code)}")
    startup.mark("cluster")
    tf.keras.utils.set_random_seed(ctx.config.seed)
    return Session(ctx, strategy)


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


def _peer_addresses(cluster: Any) -> list[str]:
    mine = cluster.training_cluster.get(cluster.role, [])[cluster.index : cluster.index + 1]
    return [a for addrs in cluster.training_cluster.values() for a in addrs if a not in mine]


def _exit_after_teardown() -> None:
    """Let TensorFlow's shutdown barrier run, but never let it keep a finished job alive."""
    timer = threading.Timer(
        SUCCESS_TEARDOWN_SECONDS, lambda: hard_exit(ExitCode.SUCCESS, "teardown slow; exiting 0")
    )
    timer.daemon = True
    timer.start()

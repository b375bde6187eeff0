"""Your own Keras 3 script as a KerasJob trainer (backend jax): the library API.

The twin of `kerasjob_trainer.session` for Keras 3 on JAX, in as few lines:

    from kerasjob_trainer.keras3 import session

    job = session.start()                 # identity env, jax.distributed, DataParallel
    model = build_and_compile_my_model()  # a Keras 3 model, built after start()
    job.fit(model, (x_train, y_train), epochs=3, steps_per_epoch=200,
            global_batch_size=job.global_batch_size(64))
    job.finish(model)                     # the chief writes model.keras; exit 0

- **Identity**: KERAS_DISTRIBUTION_* / JAX_* (none: one local process); ``job.is_chief``
  (process 0), ``job.index``, ``job.num_workers``. The variables are replicated over every
  device of every process (`keras.distribution.DataParallel`); each process feeds its share
  of each global batch.
- **Data**: in-memory (x, y) arrays are fed by global step (`data.py`): a resumed run
  continues at the exact example, at any number of processes. Or pass a function
  ``batch(step, process, processes) -> (x, y)`` that returns this process's share.
- **Backups**: every `saveFreq` steps process 0 writes `checkpoint.STATE_FILE` (every
  variable, bit for bit); a restarted job resumes at the exact step.
- **SIGTERM** (eviction, preemption): JAX's preemption sync point makes every process stop
  after the same step; the chief saves, all exit 42. A lost peer: 43 (an error in a
  collective, the stall watchdog, or the JAX runtime's abort, turned into 43 by
  `supervisor`). Any other error in `fit`: 1.
- **Progress and goodput**: the chief writes progress.json, serves /metrics and logs the
  stable `kerasjob: step N/M ...` lines, as the tf-keras path does.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError, TrainerConfig
from kerasjob_trainer import faults, goodput, leader, startup, steps
from kerasjob_trainer.audit import Audit
from kerasjob_trainer.faults import hard_exit, say
from kerasjob_trainer.keras3 import checkpoint
from kerasjob_trainer.keras3 import data as k3data
from kerasjob_trainer.keras3.context import Context
from kerasjob_trainer.keras3.identity import Identity
from kerasjob_trainer.metrics import ProgressReporter
from kerasjob_trainer.outputs import open_reporter, save_model
from kerasjob_trainer.pipeline import Indexed

SUCCESS_TEARDOWN_SECONDS = 20.0
#: Errors of a multi-process step that mean "the group broke" (gloo, the coordination service).
#: The message, not the type, tells: JAX raises them as JaxRuntimeError or ValueError.
_PEER_HINTS = (
    "gloo",
    "connection reset",
    "connection closed",
    "connection refused",
    "socket closed",
    "unavailable:",
    "coordination service",
    "heartbeat",
    "barrier",
    "deadline_exceeded",
)


class _Signal:
    """SIGTERM seen by this process (the one-process case; JAX's sync point otherwise)."""

    term = threading.Event()


def install_early_sigterm_handler() -> None:
    """Before the first step the backup is the state: exit 42 at once. After it, one local
    process stops at the next step boundary and saves (several: see `_Preemption`)."""

    def handler(signum: int, frame: Any) -> None:
        if steps.steps_this_process() == 0:
            hard_exit(
                ExitCode.PREEMPTED_SAVED,
                "SIGTERM before the first step: the backup is current; exiting 42",
            )
        _Signal.term.set()

    signal.signal(signal.SIGTERM, handler)


def classify(error: BaseException, multi_process: bool) -> ExitCode:
    if not multi_process:
        return ExitCode.FAILURE
    message = str(error).lower()
    return ExitCode.PEER_LOST if any(h in message for h in _PEER_HINTS) else ExitCode.FAILURE


class Session:
    """One Keras 3 trainer process of a KerasJob (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.reporter: ProgressReporter | None = (
            open_reporter(ctx.output_dir, ctx.metrics_port) if self.is_chief else None
        )
        cfg = ctx.config
        self.watchdog = faults.Watchdog(
            min(cfg.collective_timeout_seconds, cfg.stall_timeout_seconds)
        )
        self.audit = Audit.from_env(ctx.identity.name)
        self.goodput = goodput.Recorder(
            ctx.checkpoint_dir, ctx.identity.name, self.is_chief, workers=self.num_workers
        )
        self.steps = 0
        self._elastic_said = False
        faults.on_hard_exit(self.goodput.exiting)
        if self.reporter is not None:
            faults.on_hard_exit(self._leave_progress)

    def _leave_progress(self, code: int) -> None:
        assert self.reporter is not None
        if self.goodput.ledger.disruptions:
            self.reporter.update(goodput=self.goodput.ledger.totals())
        self.reporter.write_termination_message()

    # -- who and where ------------------------------------------------------------------------

    @property
    def config(self) -> TrainerConfig:
        return self.ctx.config

    @property
    def is_chief(self) -> bool:
        return self.ctx.identity.is_chief

    @property
    def index(self) -> int:
        return self.ctx.identity.process_id

    @property
    def num_workers(self) -> int:
        return self.ctx.identity.num_processes

    @property
    def checkpoint_dir(self) -> str:
        return self.ctx.checkpoint_dir

    @property
    def backup_dir(self) -> str:
        return self.ctx.backup_dir

    @property
    def output_dir(self) -> str:
        return self.ctx.output_dir

    def global_batch_size(self, per_replica: int) -> int:
        """per_replica x every device of the job; for an elastic job (KeepGlobalBatch), x the
        devices of the job at its preferred size, split over the processes there are now."""
        import jax

        devices = jax.device_count()
        elastic = self.config.elastic
        if elastic is None:
            return int(per_replica) * devices
        preferred = elastic.preferred_workers * jax.local_device_count()
        global_batch = int(per_replica) * preferred
        if global_batch % devices:
            hard_exit(
                ExitCode.INVALID_CONFIG,
                f"elastic: the global batch {global_batch} ({per_replica} x {preferred} "
                f"devices at the preferred size) cannot be split evenly across the "
                f"{devices} devices now in the job; choose a per-replica batch that "
                f"every size between minWorkers and workers divides",
            )
        if preferred != devices and not self._elastic_said:
            self._elastic_said = True
            say(
                f"elastic: {self.num_workers} of {elastic.preferred_workers} preferred "
                f"workers; global batch {global_batch} kept ({elastic.batch_policy}): "
                f"{global_batch // devices} per device instead of {per_replica}"
            )
        return global_batch

    def restored_step(self) -> int:
        """The global step a resumed job starts at (0: no backup)."""
        header = checkpoint.read_header(self.backup_dir)
        return header.step if header else 0

    # -- training -----------------------------------------------------------------------------

    def fit(
        self,
        model: Any,
        train: Indexed | tuple[Any, Any] | k3data.BatchFn,
        *,
        epochs: int,
        steps_per_epoch: int,
        global_batch_size: int,
        callbacks: list[Any] | None = None,
        **kwargs: Any,
    ) -> int:
        """Restore the backup, then model.fit epoch by epoch from the restored step, with
        backups, save-on-SIGTERM, progress and goodput. Returns the steps done."""
        source = self._source(train, global_batch_size)
        try:
            header = checkpoint.restore(self.backup_dir, model)
        except ValueError as e:
            hard_exit(ExitCode.FAILURE, f"cannot resume: {e}")
        step = header.step if header else 0
        # A resume in mid-epoch continues the epoch's running averages (not at an epoch start:
        # Keras resets them there anyway).
        totals = checkpoint.metric_totals(self.backup_dir) if step % steps_per_epoch else {}
        startup.mark("restore")
        total = epochs * steps_per_epoch
        ours = _keras_callback()(
            self,
            model,
            total=total,
            steps_per_epoch=steps_per_epoch,
            start=step,
            global_batch=global_batch_size,
            totals=totals,
        )
        cfg = self.config
        say(
            f"worker:{self.index} of {self.num_workers} process(es), keras {_keras_version()} "
            f"on jax, {epochs}x{steps_per_epoch} steps, global batch {global_batch_size}, "
            f"backup every {cfg.save_freq}{', deterministic' if cfg.deterministic else ''}"
        )
        ours.begin()
        while step < total:
            epoch = step // steps_per_epoch
            steps = (epoch + 1) * steps_per_epoch - step
            x = k3data.step_input(source, step, steps, self.index, self.num_workers)
            try:
                model.fit(
                    x,
                    epochs=epoch + 1,
                    initial_epoch=epoch,
                    steps_per_epoch=steps,
                    callbacks=[ours, *(callbacks or [])],
                    verbose=0,
                    shuffle=False,
                    **kwargs,
                )
            except Exception as e:  # every error must end in a contract exit code, fast
                self.fail(e)
            step += steps
        self.watchdog.pause()
        self.steps = step
        return step

    def _source(self, train: Any, global_batch: int) -> k3data.StepSource:
        if callable(train):
            return k3data.StepSource(train)
        if isinstance(train, tuple):
            train = Indexed(*train)
        k3data.share(global_batch, self.num_workers)
        return k3data.indexed_source(train, global_batch, self.config.seed, self.audit)

    def fail(self, error: BaseException) -> NoReturn:
        code = classify(error, self.ctx.identity.multi_process)
        if code == ExitCode.FAILURE:  # a program error: its traceback is the user's clue
            traceback.print_exception(error, file=sys.stderr)
        hard_exit(code, f"{type(error).__name__}: {faults.summary(error)} -> exiting {int(code)}")

    def evaluate(self, model: Any, test: tuple[Any, Any], global_batch: int) -> dict[str, float]:
        """Every process evaluates its equal share of the test set (a collective)."""
        x, y = test
        n = self.num_workers
        per = len(y) // n
        mine = slice(self.index * per, (self.index + 1) * per)
        try:
            result = model.evaluate(
                x[mine], y[mine], batch_size=max(global_batch // n, 1), verbose=0, return_dict=True
            )
        except Exception as e:
            self.fail(e)
        return {k: float(v) for k, v in result.items()}

    def finish(
        self, model: Any, *, metrics: dict[str, float] | None = None, exit: bool = True
    ) -> int:
        """The chief saves output_dir/model.keras (every process must call this: the save is
        a collective) and deletes the backup; progress is marked
        done; every process leaves the JAX runtime together; exit 0."""
        try:
            save_model(model, self.output_dir, self.is_chief)
            if self.is_chief:
                shutil.rmtree(self.backup_dir, ignore_errors=True)  # the model is safe now
                shutil.rmtree(
                    os.path.join(self.checkpoint_dir, JAX_CACHE_SUBDIR), ignore_errors=True
                )
        except Exception as e:
            self.fail(e)
        steps = self.steps
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
        _leave_together(self.ctx.identity)
        if exit:
            sys.stdout.flush()
            sys.exit(int(ExitCode.SUCCESS))
        return int(ExitCode.SUCCESS)


class _Preemption:
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
        return _Signal.term.is_set()


class _Callback:
    """Progress, backups, save-on-SIGTERM, goodput and the watchdog, after every step.
    A keras.callbacks.Callback (`_keras_callback` mixes it in once Keras is imported)."""

    def __init__(
        self,
        session: Session,
        model: Any,
        *,
        total: int,
        steps_per_epoch: int,
        start: int,
        global_batch: int,
        totals: dict[str, Any] | None = None,
    ) -> None:
        self.session, self.total, self.spe = session, total, steps_per_epoch
        self.step, self.resumed_at, self.global_batch = start, start, global_batch
        self.interval = session.config.log_interval
        self.preemption = _Preemption(session.ctx.identity.multi_process)
        self._kj_model = model
        self._totals = totals or {}

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
        self.mark = (time.monotonic(), self.step)
        say(f"resumed at step {self.step}" if self.step else f"starting at step 0 of {self.total}")
        if self.session.reporter:
            self.session.reporter.update(
                step=self.step, epoch=self.step // self.spe, total_steps=self.total
            )

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        s = self.session
        self.step += 1
        steps.step_done()
        first = steps.first_step()
        if first:
            startup.mark("first_step")
            say(startup.line())
        s.watchdog.beat()
        found = s.goodput.step_done(self.step)
        if found:
            ledger = s.goodput.ledger
            say(goodput.log_line(len(ledger.disruptions), found, ledger.goodput))
            if s.reporter:
                s.reporter.update(goodput=ledger.totals())
        if s.audit is not None:
            s.audit.step(
                {
                    "step": self.step - 1,
                    "epoch": (self.step - 1) // self.spe,
                    "batch": int(batch),
                    "iterations": self.step,
                    "loss": float((logs or {}).get("loss", float("nan"))),
                    "logs": {k: float(v) for k, v in (logs or {}).items()},
                    "pid": os.getpid(),
                    "time": time.time(),
                }
            )
        if first or self.step % self.interval == 0 or self.step == self.total:
            self._log(logs or {})
        if self.preemption.reached(self.step):
            self._save()
            s.watchdog.pause()
            hard_exit(
                ExitCode.PREEMPTED_SAVED,
                f"preempted: state saved at step {self.step}; "
                f"exiting {int(ExitCode.PREEMPTED_SAVED)}",
            )
        if self.step % s.config.save_freq == 0 and self.step < self.total:
            self._save()

    def _save(self) -> None:
        if self.session.is_chief:
            checkpoint.save(
                self.session.backup_dir,
                self._kj_model,
                checkpoint.Header(
                    step=self.step,
                    processes=self.session.num_workers,
                    global_batch=self.global_batch,
                ),
            )

    def _log(self, logs: dict[str, Any]) -> None:
        now = time.monotonic()
        then, then_step = self.mark
        self.mark = (now, self.step)
        rate = (self.step - then_step) * self.global_batch / max(now - then, 1e-9)
        metrics = {k: float(v) for k, v in logs.items() if k != "loss"}
        loss = float(logs["loss"]) if "loss" in logs else None
        text = " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        epoch = (self.step - 1) // self.spe
        say(
            f"step {self.step}/{self.total} epoch {epoch} "
            f"loss={f'{loss:.4f}' if loss is not None else 'nan'} {text} samples/s={rate:.0f}"
        )
        s = self.session
        if s.reporter:
            ledger = s.goodput.ledger
            s.reporter.update(
                step=self.step,
                epoch=epoch,
                loss=loss,
                metrics=metrics,
                samples_per_second=round(rate, 1),
                **({"goodput": ledger.totals()} if ledger.disruptions else {}),
            )


def _keras_callback() -> type:
    import keras

    class KerasJobCallback(_Callback, keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            keras.callbacks.Callback.__init__(self)
            _Callback.__init__(self, *args, **kwargs)

    return KerasJobCallback


def start(argv: list[str] | None = None) -> Session:
    """This process's Session: configuration and identity from the environment (exit 78 when
    they cannot work), then JAX's distributed runtime and DataParallel. Call it first."""
    from kerasjob_trainer.keras3.context import build_context

    install_early_sigterm_handler()
    try:
        ctx = build_context(argv if argv is not None else [], check_model=False)
    except ConfigError as e:
        print(f"kerasjob: invalid configuration: {e}", file=sys.stderr, flush=True)
        os._exit(int(ExitCode.INVALID_CONFIG))
    return session_for(ctx)


def session_for(ctx: Context) -> Session:
    """JAX up (the group formed), the distribution set, the seed set: the Session."""
    os.environ["KERAS_BACKEND"] = "jax"
    if ctx.config.deterministic:
        # XLA on CPU is deterministic; on GPUs, ask for deterministic kernels too.
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_gpu_deterministic_ops" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_gpu_deterministic_ops=true".strip()
    import jax

    startup.mark("tensorflow")  # the framework's import (the log line keeps one format)
    _compile_cache(jax, ctx.checkpoint_dir)
    identity = ctx.identity
    if identity.multi_process:
        # Process 0 serves JAX's coordination service under its own name; the others connect
        # to it. Both through gRPC with TensorFlow's 30 s re-resolution back-off: process 0
        # first waits for its name to resolve to its own (new) address, the others for the
        # service to accept connections (`leader.py`). Without it a re-created worker 0 cost
        # 30 s in 4 of 5 container SIGTERMs on the real node.
        leader.before_the_group_forms(
            own=identity.coordinator if identity.is_chief else None,
            leader=None if identity.is_chief else identity.coordinator,
        )
        try:
            jax.distributed.initialize(
                coordinator_address=identity.coordinator,
                num_processes=identity.num_processes,
                process_id=identity.process_id,
                heartbeat_timeout_seconds=max(int(ctx.config.collective_timeout_seconds), 10),
            )
        except Exception as e:  # e.g. the coordinator went away while the group formed
            hard_exit(
                ExitCode.PEER_LOST,
                f"{type(e).__name__}: {faults.summary(e)} -> exiting {int(ExitCode.PEER_LOST)}",
            )
    import keras

    if keras.backend.backend() != "jax":
        hard_exit(
            ExitCode.INVALID_CONFIG,
            f"Keras runs the {keras.backend.backend()} backend; "
            "backend jax needs KERAS_BACKEND=jax before Keras is imported",
        )
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(
            devices=keras.distribution.list_devices(), auto_shard_dataset=False
        )
    )
    keras.utils.set_random_seed(ctx.config.seed)
    startup.mark("cluster")
    return Session(ctx)


#: JAX's persistent compilation cache, below the checkpoint directory (the job's shared
#: volume): a restarted process loads the XLA programs its predecessor compiled (the train
#: step, the initializers) instead of compiling them again. KERASJOB_JAX_CACHE=0 turns it off.
JAX_CACHE_SUBDIR = "jax-cache"


def _compile_cache(jax: Any, checkpoint_dir: str) -> None:
    if os.environ.get("KERASJOB_JAX_CACHE", "1") == "0":
        return
    path = os.path.join(checkpoint_dir, JAX_CACHE_SUBDIR)
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except (OSError, AttributeError, ValueError) as e:  # a cache is an optimisation only
        say(f"warning: no JAX compilation cache in {path}: {e}")


def _keras_version() -> str:
    import keras

    return str(keras.__version__)


def _leave_together(identity: Identity) -> None:
    """Leave JAX's distributed runtime through its shutdown barrier (a process that simply
    left would make the others' clients abort), within SUCCESS_TEARDOWN_SECONDS."""
    timer = threading.Timer(
        SUCCESS_TEARDOWN_SECONDS, lambda: hard_exit(ExitCode.SUCCESS, "teardown slow; exiting 0")
    )
    timer.daemon = True
    timer.start()
    if identity.multi_process:
        import jax

        try:
            jax.distributed.shutdown()
        except Exception as e:  # training is done and saved: a late peer is not a failure
            say(f"warning: leaving the JAX runtime: {faults.summary(e)}")

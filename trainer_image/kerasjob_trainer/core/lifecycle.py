"""One trainer process's life, the same in every runtime: the session a runtime's own
(`runtimes/*/session.py`) is, and `start`, which every session API's `start()` is.

A `Lifecycle` holds what every runtime does around training: the chief's progress reporter
(progress.json, /metrics, the termination message), the stall watchdog, the audit, goodput
accounting and its record on every hard exit, the elastic global batch (KeepGlobalBatch),
the error -> exit code path, and the end: the final model, the backup deleted, progress
done, exit 0 within SUCCESS_TEARDOWN_SECONDS. A runtime's session adds how its framework
forms the group, feeds data, saves and restores, and what its errors mean (`classify`).
"""

from __future__ import annotations

import shutil
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError, TrainerConfig
from kerasjob_trainer.core.context import Context
from kerasjob_trainer.core.runtime import Identity
from kerasjob_trainer.core.signals import guard_sigterm
from kerasjob_trainer.shared import faults, goodput
from kerasjob_trainer.shared.audit import Audit
from kerasjob_trainer.shared.faults import hard_exit, say
from kerasjob_trainer.shared.metrics import ProgressReporter
from kerasjob_trainer.shared.outputs import open_reporter, save_model

#: A successful run that is still tearing its framework down after this long exits anyway.
SUCCESS_TEARDOWN_SECONDS = 20.0

S = TypeVar("S")
C = TypeVar("C", bound=Context[Any])


def start(
    argv: list[str] | None,
    build: Callable[..., Context[Any]],
    session_for: Callable[[Any], S],
    on_sigterm: Callable[[], None],
) -> S:
    """A session API's `start()`: SIGTERM guarded, the context built from the environment
    the operator sets (exit 78 with one line when it cannot work), then the runtime's
    `session_for` forms the group."""
    guard_sigterm(on_sigterm)
    try:
        ctx = build(argv if argv is not None else [], check_model=False)
    except ConfigError as e:
        faults.exit_invalid(str(e))
    return session_for(ctx)


def guarded(run: Callable[[C], int], ctx: C, classify: Callable[[BaseException], int]) -> int:
    """`run(ctx)` (a bundled trainer), every error but a configuration error (exit 78) ending
    in its contract exit code at once: `classify`'s in a group, else 1."""
    try:
        return run(ctx)
    except ConfigError:
        raise  # user code that returned the wrong thing: exit 78 in core.main
    except Exception as e:
        multi = ctx.identity.multi_process
        faults.exit_for(e, classify(e) if multi else ExitCode.FAILURE)


class Lifecycle:
    """What every runtime's session shares (see the module docstring)."""

    #: A program error's traceback on stderr, before its one line (the user's clue).
    show_traceback = False

    def __init__(self, ctx: Context[Any]) -> None:
        self.ctx = ctx
        self.reporter: ProgressReporter | None = (
            open_reporter(ctx.output_dir, ctx.metrics_port) if self.is_chief else None
        )
        # A step stuck on a collective for collectiveTimeoutSeconds is a lost peer (not the
        # framework's own timeouts); stallTimeoutSeconds caps it.
        cfg = ctx.config
        self.watchdog = faults.Watchdog(
            min(cfg.collective_timeout_seconds, cfg.stall_timeout_seconds)
        )
        #: The data and step audit (KERASJOB_AUDIT_DIR), None when off.
        self.audit = Audit.from_env(self.identity.name)
        # Before fit: the chief reads the previous generation's goodput records now.
        self.goodput = goodput.Recorder(
            ctx.checkpoint_dir, self.identity.name, self.is_chief, workers=self.num_workers
        )
        self.steps = 0
        self._elastic_said = False
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
    def identity(self) -> Identity:
        return self.ctx.identity  # type: ignore[no-any-return]

    @property
    def config(self) -> TrainerConfig:
        """The job's spec.trainer (+ saveFreq), parsed (KERASJOB_TRAINER_CONFIG)."""
        return self.ctx.config

    @property
    def is_chief(self) -> bool:
        return self.identity.is_chief

    @property
    def index(self) -> int:
        return self.identity.index

    @property
    def num_workers(self) -> int:
        return self.identity.workers

    @property
    def checkpoint_dir(self) -> str:
        return self.ctx.checkpoint_dir

    @property
    def backup_dir(self) -> str:
        return self.ctx.backup_dir

    @property
    def output_dir(self) -> str:
        """Where the chief writes model.keras, progress.json and TensorBoard logs."""
        return self.ctx.output_dir

    def keep_global_batch(
        self, per_replica: int, now: int, preferred: int, unit: str, workers: int
    ) -> int:
        """The global batch of an elastic job (KeepGlobalBatch): `per_replica` x the `unit`s
        (replicas, devices) of the job at its preferred size (`preferred`), split over the
        `now` there are, so a job running short of workers trains on the same batches."""
        elastic = self.config.elastic
        assert elastic is not None
        global_batch = int(per_replica) * preferred
        if global_batch % now:
            self.exit_invalid(
                f"elastic: the global batch {global_batch} ({per_replica} x {preferred} "
                f"{unit}s at the preferred size) cannot be split evenly across the "
                f"{now} {unit}s now in the job; choose a per-replica batch that "
                f"every size between minWorkers and workers divides",
            )
        if preferred != now and not self._elastic_said:
            self._elastic_said = True
            say(
                f"elastic: {workers} of {elastic.preferred_workers} preferred "
                f"workers; global batch {global_batch} kept ({elastic.batch_policy}): "
                f"{global_batch // now} per {unit} instead of {per_replica}"
            )
        return global_batch

    def fit_and_finish(
        self,
        fit: Callable[..., Any],
        model: Any,
        x: Any,
        test: Callable[[], dict[str, Any]] | None,
        **kwargs: Any,
    ) -> int:
        """A bundled trainer's run: the runtime's `fit` of `x` for the configured epochs,
        the test set's accuracy (`test()`, when there is one) in the final progress, and
        `finish` without exiting (the caller returns the code)."""
        cfg = self.config
        fit(model, x, epochs=cfg.epochs, steps_per_epoch=cfg.steps_per_epoch, **kwargs)
        metrics = {}
        accuracy = test().get("accuracy") if test is not None else None
        if accuracy is not None:
            metrics["test_accuracy"] = float(accuracy)
        return self.finish(model, metrics=metrics, exit=False)

    # -- the end --------------------------------------------------------------------------------

    def classify(self, error: BaseException) -> ExitCode:
        """The exit code `error` means in a group of several processes (the runtime's)."""
        raise NotImplementedError

    def fail(self, error: BaseException) -> NoReturn:
        """Exit with the code the error means (43: the group broke; else 1)."""
        code = self.classify(error) if self.identity.multi_process else ExitCode.FAILURE
        if code == ExitCode.FAILURE and self.show_traceback:
            traceback.print_exception(error, file=sys.stderr)
        faults.exit_for(error, code)

    def finish(
        self, model: Any, *, metrics: dict[str, float] | None = None, exit: bool = True
    ) -> int:
        """Save the final model (the chief keeps it in output_dir/model.keras; every process
        must call this: the save is a collective), delete the backup, mark progress done,
        leave the group; then exit 0 (the teardown may take SUCCESS_TEARDOWN_SECONDS)."""
        try:
            self.before_final_save(model)
            save_model(model, self.output_dir, self.is_chief)
            if self.is_chief:
                shutil.rmtree(self.backup_dir, ignore_errors=True)  # the model is safe now
                self.after_final_save()
        except Exception as e:
            self.fail(e)
        self.goodput.exiting(int(ExitCode.SUCCESS))
        self._report_done(self.final_step(model), metrics or {})
        exit_after_teardown()
        self.leave()
        if exit:
            sys.stdout.flush()
            sys.exit(int(ExitCode.SUCCESS))
        return int(ExitCode.SUCCESS)

    def _report_done(self, steps: int, metrics: dict[str, float]) -> None:
        if self.reporter is None:
            say(f"done steps={steps}")
            return
        final = {**self.reporter.progress.metrics, **metrics}
        self.reporter.update(
            step=steps, metrics=final, done=True, goodput=self.goodput.ledger.totals()
        )
        self.reporter.write_termination_message()
        acc = final.get("test_accuracy")
        say(f"final {f'test_accuracy={acc:.4f} ' if acc is not None else ''}steps={steps}")
        self.reporter.close()

    def final_step(self, model: Any) -> int:
        """The global step training ended at."""
        return self.steps

    def before_final_save(self, model: Any) -> None:
        """Every process, just before the final save reads the model's values: make each of
        them readable in this process (a collective where it must be: every process calls it)."""

    def after_final_save(self) -> None:
        """The chief, once the final model is safe: what else of the run's to delete."""

    def leave(self) -> None:
        """Leave the group (the runtime's; the teardown timer already runs)."""

    def exit_invalid(self, message: str) -> NoReturn:
        """Exit 78 for a configuration the group formed with but cannot train (one line
        `kerasjob: invalid configuration: ...`); a runtime whose processes must leave
        together first overrides it."""
        faults.exit_invalid(message)


def exit_after_teardown() -> None:
    """Let the framework's shutdown run, but never let it keep a finished job alive."""
    timer = threading.Timer(
        SUCCESS_TEARDOWN_SECONDS, lambda: hard_exit(ExitCode.SUCCESS, "teardown slow; exiting 0")
    )
    timer.daemon = True
    timer.start()

"""The bookkeeping of every training step, the same in every runtime's training callback: the
step count, the start-up line, the watchdog, goodput, and the stable step log lines with
progress (`kerasjob: step N/M epoch E loss=... samples/s=...`, contract.LOG_STEP_RE)."""

from __future__ import annotations

import time
from typing import Any

from kerasjob_trainer.core.lifecycle import Lifecycle
from kerasjob_trainer.shared import goodput, startup, steps
from kerasjob_trainer.shared.faults import say


class StepLog:
    """One `fit`'s steps, from `begin(step)` on (see the module docstring)."""

    def __init__(
        self, session: Lifecycle, *, total: int, steps_per_epoch: int, global_batch: int | None
    ) -> None:
        self.session, self.total, self.steps_per_epoch = session, total, steps_per_epoch
        self.global_batch = global_batch
        self.interval = session.config.log_interval
        self.mark = (time.monotonic(), 0)

    def begin(self, step: int) -> None:
        """Training starts (or resumes) at global step `step`."""
        self.mark = (time.monotonic(), step)
        say(f"resumed at step {step}" if step else f"starting at step 0 of {self.total}")
        if self.session.reporter:
            self.session.reporter.update(
                step=step, epoch=step // self.steps_per_epoch, total_steps=self.total
            )

    def counted(self) -> bool:
        """A step done in this process; whether it was its first (then the start-up line)."""
        steps.step_done()
        first = steps.first_step()
        if first:
            startup.mark("first_step")
            say(startup.line())
        return first

    def beat(self, step: int) -> None:
        """Global step `step` is done: the watchdog fed, a disruption found by goodput told."""
        s = self.session
        s.watchdog.beat()
        found = s.goodput.step_done(step)
        if found:
            ledger = s.goodput.ledger
            say(goodput.log_line(len(ledger.disruptions), found, ledger.goodput))
            if s.reporter:
                s.reporter.update(goodput=ledger.totals())

    def due(self, step: int, first: bool) -> bool:
        """Whether step `step` gets a log line (the first, every interval, the last)."""
        return first or step % self.interval == 0 or step == self.total

    def log(self, step: int, epoch: int, logs: dict[str, Any]) -> dict[str, float | None]:
        """The step line and the chief's progress; returns the scalars logged."""
        now = time.monotonic()
        then, then_step = self.mark
        self.mark = (now, step)
        rate = (
            (step - then_step) * self.global_batch / max(now - then, 1e-9)
            if self.global_batch
            else None
        )
        metrics = {k: float(v) for k, v in logs.items() if k != "loss"}
        loss = float(logs["loss"]) if "loss" in logs else None
        text = " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        loss_text = f"{loss:.4f}" if loss is not None else "nan"
        rate_text = f" samples/s={rate:.0f}" if rate is not None else ""
        say(f"step {step}/{self.total} epoch {epoch} loss={loss_text} {text}{rate_text}")
        reporter = self.session.reporter
        if reporter:
            ledger = self.session.goodput.ledger  # productive seconds grow as training goes on
            reporter.update(
                step=step,
                epoch=epoch,
                loss=loss,
                metrics=metrics,
                samples_per_second=round(rate, 1) if rate else None,
                **({"goodput": ledger.totals()} if ledger.disruptions else {}),
            )
        return {"loss": loss, **metrics, "samples_per_second": rate}

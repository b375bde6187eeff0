"""SIGTERM before the framework's own save-on-SIGTERM is in place (every runtime's first act)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.shared import steps
from kerasjob_trainer.shared.faults import hard_exit


def guard_sigterm(after_first_step: Callable[[], None]) -> None:
    """With no step done in this process the backup *is* the current state: exit 42 at once.
    After a step, `after_first_step` (the runtime's: exit 43, or stop at the next step)."""

    def handler(signum: int, frame: Any) -> None:
        if steps.steps_this_process() == 0:
            hard_exit(
                ExitCode.PREEMPTED_SAVED,
                "SIGTERM before the first step: the backup is current; exiting 42",
            )
        after_first_step()

    signal.signal(signal.SIGTERM, handler)

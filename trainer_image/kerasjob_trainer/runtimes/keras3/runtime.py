"""The Keras 3 runtime (backend jax): Keras 3 on JAX with `keras.distribution`, identity from
KERAS_DISTRIBUTION_* / JAX_* (`identity`), the backup `checkpoint`, the step-indexed input
`data`; the session API is `session`. Importing this module imports no JAX (the supervisor
does), and nothing of this runtime imports TensorFlow: the Keras 3 image has none.

What the supervisor adds: the JAX distributed runtime ends a process with SIGABRT (exit 134)
when the coordination service reports a lost task ("Terminating process because the JAX
distributed service detected fatal errors"): every survivor of a lost coordinator (process 0)
aborts within ~0.1 s, from a C++ thread that Python cannot intercept. To the operator 134 is
a failure that uses up backoffLimit; it is a lost peer (43). So exactly that abort means 43
(and is written into the goodput record the child could not finish), another signal N
128+N, and the child's code otherwise.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.core.context import Context
from kerasjob_trainer.runtimes.keras3.context import build_context
from kerasjob_trainer.shared import goodput

#: The JAX distributed client's last words when the coordination service lost a task.
JAX_FATAL = b"JAX distributed service detected fatal errors"


def exit_code(returncode: int, lost_peer: bool) -> int:
    """The supervisor's exit code for the child's `returncode` (negative: a signal)."""
    if returncode >= 0:
        return returncode
    if -returncode == signal.SIGABRT and lost_peer:
        return int(ExitCode.PEER_LOST)
    return 128 - returncode


class Keras3:
    backend = "jax"
    watch = {"jax_fatal": re.compile(re.escape(JAX_FATAL))}

    def check_image(self) -> None:
        """Keras and JAX are imported by the child; a missing one fails there (exit 1)."""

    def context(self, argv: Sequence[str] | None, *, check_model: bool = True) -> Context[Any]:
        return build_context(list(argv) if argv is not None else None, check_model=check_model)

    def on_sigterm(self) -> None:
        """One local process stops at the next step boundary and saves (several: JAX's
        preemption sync point, `callback.Preemption`)."""
        from kerasjob_trainer.runtimes.keras3.callback import SIGTERM_SEEN

        SIGTERM_SEEN.set()

    def train(self, ctx: Context[Any]) -> int:
        from kerasjob_trainer.runtimes.keras3 import train

        return train.run(ctx)

    def exit_code(self, returncode: int, seen: frozenset[str], ctx: Context[Any]) -> int:
        code = exit_code(returncode, "jax_fatal" in seen)
        if code == ExitCode.PEER_LOST and returncode < 0:
            goodput.record_exit(ctx.checkpoint_dir, ctx.identity.name, code, time.time())
            print(
                f"kerasjob: the JAX distributed runtime aborted the trainer (a peer is gone); "
                f"exit {int(ExitCode.PEER_LOST)}: resuming from the last backup",
                file=sys.stderr,
                flush=True,
            )
        return code


RUNTIME = Keras3()

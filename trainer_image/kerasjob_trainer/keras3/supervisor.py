"""The container's process for backend jax: the shared supervisor
(`kerasjob_trainer.supervisor`: in-place restarts, signals, incarnation logs), with the JAX
runtime's way of saying "a peer is gone".

Why: the JAX distributed runtime ends a process with SIGABRT (exit 134) when the
coordination service reports a lost task ("Terminating process because the JAX distributed
service detected fatal errors"): every survivor of a lost coordinator (process 0) aborts
within ~0.1 s, from a C++ thread that Python cannot intercept. To the operator 134 is a
failure that uses up backoffLimit; it is a lost peer (43). So exactly that abort means 43
(and is written into the goodput record the child could not finish), another signal N
128+N, and the child's code otherwise.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Sequence

from kerasjob_contract import Env, ExitCode
from kerasjob_trainer import goodput
from kerasjob_trainer import supervisor as shared

#: The JAX distributed client's last words when the coordination service lost a task.
JAX_FATAL = b"JAX distributed service detected fatal errors"


def exit_code(returncode: int, lost_peer: bool) -> int:
    """The supervisor's exit code for the child's `returncode` (negative: a signal)."""
    if returncode >= 0:
        return returncode
    if -returncode == signal.SIGABRT and lost_peer:
        return int(ExitCode.PEER_LOST)
    return 128 - returncode


def supervise(
    argv: Sequence[str], *, name: str | None = None, checkpoint_dir: str | None = None
) -> int:
    """Run `argv` to its end, in place again after a disruption; its exit code in the
    contract's terms (see the module doc)."""

    def translate(returncode: int, seen: frozenset[str]) -> int:
        code = exit_code(returncode, "jax_fatal" in seen)
        if code == ExitCode.PEER_LOST and returncode < 0:
            if name and checkpoint_dir:
                goodput.record_exit(checkpoint_dir, name, code, time.time())
            print(
                f"kerasjob: the JAX distributed runtime aborted the trainer (a peer is gone); "
                f"exit {int(ExitCode.PEER_LOST)}: resuming from the last backup",
                file=sys.stderr,
                flush=True,
            )
        return code

    return shared.supervise(
        argv,
        checkpoint_dir=checkpoint_dir,
        translate=translate,
        watch={"jax_fatal": re.compile(re.escape(JAX_FATAL))},
    )


def main(argv: Sequence[str], command: Sequence[str] = ()) -> int:
    """The bundled Keras 3 trainer (`python -m kerasjob_trainer.keras3 ARGV`) or the user's
    `command`, supervised."""
    from kerasjob_trainer.keras3.identity import parse_identity

    child = list(command) or [sys.executable, "-m", "kerasjob_trainer.keras3", *argv]
    return supervise(
        child, name=parse_identity().name, checkpoint_dir=os.environ.get(Env.CHECKPOINT_DIR.value)
    )

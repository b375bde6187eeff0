"""The container's process for backend jax: runs the trainer as its child, and says what its
end means in the contract's exit codes.

Why a parent: the JAX distributed runtime ends a process with SIGABRT (exit 134) when the
coordination service reports a lost task ("Terminating process because the JAX distributed
service detected fatal errors"): every survivor of a lost coordinator (process 0) aborts
within ~0.1 s, from a C++ thread that Python cannot intercept. To the operator 134 is a
failure that uses up backoffLimit; it is a lost peer (43). The supervisor passes SIGTERM and
SIGINT on to the child, copies the child's stderr through (looking for that message), and
exits 43 for exactly that abort, 128+N for another signal N, and the child's code otherwise.
The child's stdout is the container's, untouched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from kerasjob_contract import Env, ExitCode
from kerasjob_trainer import goodput

PR_SET_PDEATHSIG = 1

#: The JAX distributed client's last words when the coordination service lost a task.
JAX_FATAL = b"JAX distributed service detected fatal errors"


def _tee(source: IO[bytes], seen: threading.Event) -> None:
    out = sys.stderr.buffer
    for line in iter(source.readline, b""):
        if JAX_FATAL in line:
            seen.set()
        out.write(line)
        out.flush()


def _die_with_parent() -> None:
    """In the child: the kernel SIGKILLs it when the supervisor dies (no orphan trainer)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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
    """Run `argv` to its end; its exit code in the contract's terms (see the module doc)."""
    child = subprocess.Popen(list(argv), stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    assert child.stderr is not None

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    seen = threading.Event()
    tee = threading.Thread(target=_tee, args=(child.stderr, seen), daemon=True)
    tee.start()
    try:
        returncode = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    tee.join(timeout=5)
    code = exit_code(returncode, seen.is_set())
    if code == ExitCode.PEER_LOST and returncode < 0:
        if name and checkpoint_dir:
            goodput.record_exit(checkpoint_dir, name, code, time.time())
        print(
            f"kerasjob: the JAX distributed runtime aborted the trainer (a peer is gone); "
            f"exiting {int(ExitCode.PEER_LOST)} to restart from the last backup",
            file=sys.stderr,
            flush=True,
        )
    return code


def main(argv: Sequence[str], command: Sequence[str] = ()) -> int:
    """The bundled Keras 3 trainer (`python -m kerasjob_trainer.keras3 ARGV`) or the user's
    `command`, supervised."""
    from kerasjob_trainer.keras3.identity import parse_identity

    child = list(command) or [sys.executable, "-m", "kerasjob_trainer.keras3", *argv]
    return supervise(
        child, name=parse_identity().name, checkpoint_dir=os.environ.get(Env.CHECKPOINT_DIR.value)
    )

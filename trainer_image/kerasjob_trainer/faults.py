"""Fast, honest exits: classify errors into contract exit codes and leave at once.

A survivor of a lost peer must exit within ~2 s so the operator can restart the group, but
TensorFlow's orderly teardown (coordination-service shutdown barrier, collective executor
abort) takes seconds or hangs. So every terminal path ends in `hard_exit` (os._exit after
flushing), and a watchdog catches a silent stall that raises nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import NoReturn

from kerasjob_trainer.contract import ExitCode

# Substrings of OpError messages that mean "the group broke", not "the program is wrong".
_PEER_HINTS = (
    "collective", "coordination", "heartbeat", "peer", "socket closed", "connection reset",
    "failed to connect", "connection refused", "unavailable", "abort", "barrier",
)


def classify(error: BaseException) -> ExitCode:
    """Map an exception raised during multi-worker training to an exit code."""
    import tensorflow as tf

    peer_errors = (tf.errors.UnavailableError, tf.errors.AbortedError,
                   tf.errors.CancelledError, tf.errors.DeadlineExceededError)
    if isinstance(error, peer_errors):
        return ExitCode.PEER_LOST
    if isinstance(error, (tf.errors.InternalError, tf.errors.UnknownError)):
        message = str(error).lower()
        if any(h in message for h in _PEER_HINTS):
            return ExitCode.PEER_LOST
    return ExitCode.FAILURE


def summary(error: BaseException, limit: int = 300) -> str:
    """One line: TensorFlow's messages start with "Graph execution error:" and bury the cause."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Graph execution error", "Detected at",
                                                       "File ", "[["))]
    return " ".join(useful or lines)[:limit]


def say(message: str) -> None:
    """One log line on stdout, flushed (the demo and the tests parse these)."""
    print(f"kerasjob: {message}", flush=True)


def hard_exit(code: int, message: str | None = None) -> NoReturn:
    if message:
        stream = sys.stdout if code in (ExitCode.SUCCESS, ExitCode.PREEMPTED_SAVED) else sys.stderr
        print(f"kerasjob: {message}", file=stream, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


class Watchdog:
    """Exit PEER_LOST when no training step finishes for `timeout` seconds.

    Armed by the first `beat()` (tracing and the first collective can be slow), so it only
    judges steady-state training. `pause()` while doing long local work (final save).
    """

    def __init__(self, timeout: float, poll: float = 1.0) -> None:
        self.timeout = timeout
        self._poll = poll
        self._last: float | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kerasjob-watchdog",
                                        daemon=True)
        self._thread.start()

    def beat(self) -> None:
        with self._lock:
            self._last = time.monotonic()

    def pause(self) -> None:
        with self._lock:
            self._last = None

    def _run(self) -> None:
        while True:
            time.sleep(self._poll)
            with self._lock:
                last = self._last
            if last is not None and time.monotonic() - last > self.timeout:
                hard_exit(ExitCode.PEER_LOST,
                          f"no training step for {self.timeout:.0f}s: a peer is silent; "
                          f"exiting {int(ExitCode.PEER_LOST)}")

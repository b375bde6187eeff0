"""Fast, honest exits: leave at once with a contract exit code (what an error means is the
runtime's: `runtimes/*/errors`).

A survivor of a lost peer must exit within ~2 s so the operator can restart the group, but
TensorFlow's orderly teardown (coordination-service shutdown barrier, collective executor
abort) takes seconds or hangs. So every terminal path ends in `hard_exit` (os._exit after
flushing), and a watchdog catches a silent stall that raises nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from kerasjob_contract import ExitCode, invalid_config_line


def summary(error: BaseException, limit: int = 300) -> str:
    """One line: TensorFlow's messages start with "Graph execution error:" and bury the cause."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    useful = [
        ln
        for ln in lines
        if not ln.startswith(("Graph execution error", "Detected at", "File ", "[["))
    ]
    return " ".join(useful or lines)[:limit]


def say(message: str) -> None:
    """One log line on stdout, flushed (the demo and the tests parse these)."""
    print(f"kerasjob: {message}", flush=True)


_EXIT_HOOKS: list[Callable[[int], None]] = []


def on_hard_exit(hook: Callable[[int], None]) -> None:
    """Run `hook(code)` on every hard exit, first (it must be quick; errors are ignored)."""
    _EXIT_HOOKS.append(hook)


def hard_exit(code: int, message: str | None = None) -> NoReturn:
    """Run the exit hooks, say `message` (stdout for 0 and 42, else stderr), os._exit(code)."""
    _leave(code, f"kerasjob: {message}" if message else None)


def say_invalid(reason: str) -> None:
    """The one line of an exit 78 on stderr, `kerasjob: invalid configuration: <reason>`
    (contract.LOG_INVALID_CONFIG): the container's supervisor puts it in the termination
    message, and the operator its reason in the job's condition and event."""
    print(invalid_config_line(reason), file=sys.stderr, flush=True)


def exit_invalid(reason: str) -> NoReturn:
    """Exit 78 (the configuration cannot work) with its one line (`say_invalid`), after the
    exit hooks, as `hard_exit`."""
    _leave(ExitCode.INVALID_CONFIG, invalid_config_line(reason))


def _leave(code: int, line: str | None) -> NoReturn:
    for hook in _EXIT_HOOKS:
        with contextlib.suppress(Exception):  # leaving fast matters more than the record
            hook(int(code))
    if line:
        stream = sys.stdout if code in (ExitCode.SUCCESS, ExitCode.PREEMPTED_SAVED) else sys.stderr
        print(line, file=stream, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def exit_for(error: BaseException, code: int) -> NoReturn:
    """Leave with `code` for `error`, one line saying what it was."""
    hard_exit(code, f"{type(error).__name__}: {summary(error)} -> exiting {int(code)}")


def mentions(error: BaseException, hints: tuple[str, ...]) -> bool:
    """Whether the error's message names any of `hints` (lower case)."""
    message = str(error).lower()
    return any(h in message for h in hints)


class Watchdog:
    """Exit PEER_LOST when no training step finishes for `timeout` seconds.

    Armed by the first `beat()` (tracing and the first collective can be slow), so it only
    judges steady-state training; or earlier by `until_first_step`, with a timeout of its
    own for the way to the first step. `pause()` while doing long local work (final save).
    """

    def __init__(self, timeout: float, poll: float = 1.0) -> None:
        self.timeout = timeout
        self._poll = poll
        self._last: float | None = None
        #: The timeout until the first beat, when armed before it (`until_first_step`).
        self._first: float | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kerasjob-watchdog", daemon=True)
        self._thread.start()

    def until_first_step(self, timeout: float) -> None:
        """Armed from now (fit begins): no first step within `timeout` seconds is a lost peer
        too (a group that formed and then trains nothing: a first collective waiting on a
        task that is gone, which nothing else would ever end)."""
        with self._lock:
            self._last, self._first = time.monotonic(), timeout

    def beat(self) -> None:
        with self._lock:
            self._last, self._first = time.monotonic(), None

    def pause(self) -> None:
        with self._lock:
            self._last = None

    def _run(self) -> None:
        while True:
            time.sleep(self._poll)
            with self._lock:
                last, first = self._last, self._first
            timeout = self.timeout if first is None else first
            if last is not None and time.monotonic() - last > timeout:
                what = "training step" if first is None else "first step since fit began"
                hard_exit(
                    ExitCode.PEER_LOST,
                    f"no {what} for {timeout:.0f}s: a peer is silent; "
                    f"exiting {int(ExitCode.PEER_LOST)}",
                )


def listening(host: str, port: int, timeout: float) -> bool:
    """Whether a server accepts a TCP connection at host:port (the name resolved afresh)."""
    return connect_error(host, port, timeout) is None


def connect_error(host: str, port: int, timeout: float) -> str | None:
    """None when host:port accepts a TCP connection, else what happened to the connect
    (refused: nothing listens; timed out or unreachable: no answer at that address; or no
    such name)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return "timed out"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, type(e).__name__)


class PeerMonitor:
    """Exit PEER_LOST as soon as a peer's TensorFlow server stops accepting connections.

    A collective only fails fast when the dead peer was mid-transfer; a worker that is about
    to *start* an RPC to a dead peer waits on gRPC's reconnect backoff for seconds. A TCP
    connect every `interval` to each peer's server port answers in well under a second
    (refused for a dead process, a timeout for a vanished Pod IP). Armed after the first
    step (peers are known to be up) and silenced by `quiet()` while the group is saving and
    exiting on purpose (SIGTERM) or after training.
    """

    def __init__(
        self,
        peers: list[str],
        interval: float = 0.2,
        connect_timeout: float = 0.5,
        failures: int = 2,
    ) -> None:
        self._peers = [(h, int(p)) for h, _, p in (a.rpartition(":") for a in peers)]
        self._interval = interval
        self._timeout = connect_timeout
        self._failures = failures
        self._armed = threading.Event()
        self._quiet: list[Callable[[], bool]] = []
        self._stopped = False
        if self._peers:
            threading.Thread(target=self._run, name="kerasjob-peers", daemon=True).start()

    def arm(self) -> None:
        self._armed.set()

    def quiet_when(self, predicate: Callable[[], bool]) -> None:
        self._quiet.append(predicate)

    def stop(self) -> None:
        self._stopped = True

    def _reachable(self, host: str, port: int) -> bool:
        return listening(host, port, self._timeout)

    def _run(self) -> None:
        misses = dict.fromkeys(self._peers, 0)
        self._armed.wait()
        while not self._stopped:
            for peer in self._peers:
                misses[peer] = 0 if self._reachable(*peer) else misses[peer] + 1
                if (
                    misses[peer] >= self._failures
                    and not self._stopped
                    and not any(q() for q in self._quiet)
                ):
                    hard_exit(
                        ExitCode.PEER_LOST,
                        f"peer {peer[0]}:{peer[1]} is gone; exiting "
                        f"{int(ExitCode.PEER_LOST)} to restart from the last backup",
                    )
            time.sleep(self._interval)

"""The container's process: runs the trainer as its child; after a disruption, runs it again
in the same container; keeps every incarnation's output.

- **In place.** When the child exits 42 (the group saved: a peer got SIGTERM) or 43 (a peer
  was lost) and this container was not told to stop, the trainer starts again at once in the
  same container: same Pod, UID, node, IP, GPUs and claims, and no kubelet back-off. Only the
  Pod that was itself lost ends and is re-created by the operator (issue 25). Bounded: once
  KERASJOB_IN_PLACE_RESTARTS (contract.IN_PLACE_RESTARTS_DEFAULT; 0: never in place)
  incarnations in a row ended without a training step, the supervisor exits with the
  child's code, so the Pod ends and the operator's restart policy decides (backoffLimit,
  the restart-loop hold).
- **Signals.** SIGTERM and SIGINT go to the child, and no new incarnation starts after them:
  the supervisor exits with the child's code (preemption, deletion and eviction end the
  container as before). The child dies with the supervisor (PR_SET_PDEATHSIG).
- **Logs.** Each incarnation starts with one banner line (contract.LOG_INCARNATION_RE); its
  stdout and stderr go to the container's (`kubectl logs` shows every incarnation, in order)
  and to <CHECKPOINT_DIR>/logs/<role>-<index>/<NNNN>.log (contract.LOGS_SUBDIR: numbered
  across in-place restarts and Pod re-creations, size-capped, the oldest pruned), which
  `kerasjob logs --previous` reads after the Pod is gone.
- **Why 78.** When the container ends with exit 78 (the configuration cannot work), the
  supervisor adds the trainer's last `kerasjob: invalid configuration: <reason>` line
  (contract.LOG_INVALID_CONFIG; else, for a user's program that exits 78 without one, its
  last line on stderr as the reason) to the termination message, after what the chief left
  there: the operator puts the reason in the job's Failed condition and its event.

What an exit code means is the runtime's (`translate`): the tf-keras trainer's code is the
contract's; the Keras 3 one turns the JAX runtime's abort into 43 (keras3.supervisor).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from kerasjob_contract import (
    DISRUPTION_EXIT_CODES,
    IN_PLACE_RESTARTS_DEFAULT,
    LOG_INVALID_CONFIG,
    LOG_KEEP_PER_POD,
    LOG_MAX_BYTES,
    LOGS_SUBDIR,
    Env,
    ExitCode,
    incarnation_log_name,
    incarnation_number,
    invalid_config_reason,
    termination_log,
)
from kerasjob_contract.tf_config import parse_tf_config
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.shared.metrics import leave_invalid_config

PR_SET_PDEATHSIG = 1
#: A line that shows the incarnation trained: a step line, or the start-up line of its first
#: step (contract.LOG_STEP_RE, LOG_STARTUP_RE).
PROGRESS = re.compile(rb"^kerasjob: (?:step \d+/|startup )")
#: The longest line read at once from the child (a longer one is passed on in pieces).
MAX_LINE = 64 * 1024

#: What a disruption exit says, in the banner of the incarnation it restarts.
WHY = {
    ExitCode.PREEMPTED_SAVED: "the group saved its state (a peer was told to stop)",
    ExitCode.PEER_LOST: "a peer was lost",
}
#: The child's exit status (negative: a signal) and the watched patterns it printed -> the
#: contract's exit code.
Translate = Callable[[int, frozenset[str]], int]


def contract_code(returncode: int, seen: frozenset[str]) -> int:
    """The tf-keras trainer's own code; a signal N as the shell shows it (128+N)."""
    return returncode if returncode >= 0 else 128 - returncode


def in_place_limit(env: Mapping[str, str]) -> int:
    """KERASJOB_IN_PLACE_RESTARTS: in-place restarts in a row without a step (ValueError)."""
    text = env.get(Env.IN_PLACE_RESTARTS.value, "").strip()
    if not text:
        return IN_PLACE_RESTARTS_DEFAULT
    if not text.isdigit():
        raise ValueError(f"{Env.IN_PLACE_RESTARTS.value} must be a whole number >= 0, not {text!r}")
    return int(text)


def replica_name(env: Mapping[str, str]) -> str:
    """<role>-<index> (the Pod's replica, as `kerasjob logs --replica` names it): from
    KERASJOB_ROLE/INDEX, else TF_CONFIG's task, else the host name."""
    role, index = env.get(Env.ROLE.value, ""), env.get(Env.INDEX.value, "")
    if role and index.isdigit():
        return f"{role}-{index}"
    with contextlib.suppress(ConfigError):  # the trainer says why, and exits 78
        tf_config = parse_tf_config(env.get(Env.TF_CONFIG.value))
        if tf_config is not None:
            return f"{tf_config.task_type}-{tf_config.task_index}"
    return socket.gethostname()


class LogFile:
    """One incarnation's log file, at most `limit` bytes (then one line saying so)."""

    def __init__(self, path: str | None, limit: int = LOG_MAX_BYTES) -> None:
        self.path, self.limit, self.written = path, limit, 0
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        if path is not None:
            self._file = open(path, "ab")  # noqa: SIM115 - closed in close()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._file is None:
                return
            if self.written + len(data) > self.limit:
                self._file.write(
                    b"kerasjob: log file full (%d bytes); the rest is in the container's log\n"
                    % self.limit
                )
                self._close()
                return
            self._file.write(data)
            self._file.flush()
            self.written += len(data)

    def _close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def close(self) -> None:
        with self._lock:
            self._close()


def next_log(directory: str | None, keep: int = LOG_KEEP_PER_POD) -> tuple[int, str | None]:
    """The next incarnation's number and log path in `directory` (made if need be), after
    pruning the oldest files down to keep-1. (1, None) without a usable directory."""
    if directory is None:
        return 1, None
    try:
        os.makedirs(directory, exist_ok=True)
        numbers = sorted(n for f in os.listdir(directory) if (n := incarnation_number(f)))
    except OSError as e:
        print(f"kerasjob: no incarnation logs in {directory}: {e}", file=sys.stderr, flush=True)
        return 1, None
    for old in numbers[: max(len(numbers) - keep + 1, 0)]:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, incarnation_log_name(old)))
    number = (numbers[-1] if numbers else 0) + 1
    return number, os.path.join(directory, incarnation_log_name(number))


def _die_with_parent() -> None:
    """In the child: the kernel SIGKILLs it when the supervisor dies (no orphan trainer)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class LastWords:
    """What one incarnation said last about itself: its last invalid-configuration line
    (either stream) and its last non-empty line on stderr; `reason()` is why it exited 78."""

    MARK = LOG_INVALID_CONFIG.encode()

    def __init__(self) -> None:
        self.invalid = b""
        self.stderr = b""

    def heard(self, line: bytes, *, stderr: bool) -> None:
        if self.MARK in line:
            self.invalid = line
        if stderr and line.strip():
            self.stderr = line

    def reason(self) -> str | None:
        """The reason of its invalid-configuration line, else its last line on stderr
        (stripped; None when it printed neither)."""
        said = invalid_config_reason(self.invalid.decode(errors="replace"))
        if said is not None:
            return said
        return self.stderr.decode(errors="replace").strip() or None


def _tee(
    source: IO[bytes],
    out: IO[bytes],
    log: LogFile,
    watch: Mapping[str, re.Pattern[bytes]],
    seen: set[str],
    words: LastWords,
    stderr: bool,
) -> None:
    for line in iter(lambda: source.readline(MAX_LINE), b""):
        for name, pattern in watch.items():
            if name not in seen and pattern.search(line):
                seen.add(name)
        words.heard(line, stderr=stderr)
        out.write(line)
        out.flush()
        log.write(line)


@dataclasses.dataclass(frozen=True)
class Ended:
    """How one incarnation ended: its exit status and the watched patterns it printed."""

    returncode: int
    seen: frozenset[str]
    reason: str | None = None
    """Why it exited 78, in its own words (`LastWords.reason`)."""

    @property
    def progressed(self) -> bool:
        return "progress" in self.seen


class Supervisor:
    """Runs `argv` until it ends for good (see the module doc); `run()` is the exit code."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        checkpoint_dir: str | None,
        env: Mapping[str, str],
        translate: Translate = contract_code,
        watch: Mapping[str, re.Pattern[bytes]] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.translate = translate
        self.watch = {"progress": PROGRESS, **(watch or {})}
        self.limit = in_place_limit(env)
        self.replica = replica_name(env)
        self.log_dir = (
            os.path.join(checkpoint_dir, LOGS_SUBDIR, self.replica) if checkpoint_dir else None
        )
        self.termination_log = termination_log(self.env)
        self.stopping = False
        self._child: subprocess.Popen[bytes] | None = None

    def _forward(self, signum: int, frame: object) -> None:
        self.stopping = True
        child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    def _say(self, text: str, log: LogFile | None = None) -> None:
        line = f"kerasjob: {text}\n".encode()
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
        if log is not None:
            log.write(line)

    def run(self) -> int:
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self._forward) for sig in signals}
        try:
            return self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self) -> int:
        in_pod, unproductive, why = 0, 0, ""
        while True:
            number, path = next_log(self.log_dir)
            log = LogFile(path)
            in_pod += 1
            self._say(
                f"incarnation {number} of {self.replica} started (#{in_pod} in this "
                f"container{why}; log {path or '-'})",
                log,
            )
            try:
                ended = self._run_once(number, log)
            finally:
                log.close()
            code = self.translate(ended.returncode, ended.seen)
            unproductive = 0 if ended.progressed else unproductive + 1
            if code not in DISRUPTION_EXIT_CODES or self.stopping:
                if code == ExitCode.INVALID_CONFIG and ended.reason:
                    leave_invalid_config(ended.reason, self.termination_log)
                return code
            if unproductive >= self.limit:
                reason = (
                    "in-place restarts are off"
                    if self.limit == 0
                    else f"{unproductive} incarnation(s) in a row without a training step"
                )
                self._say(
                    f"exit {code}: {reason} ({Env.IN_PLACE_RESTARTS.value}={self.limit}); "
                    f"the Pod ends"
                )
                return code
            why = f"; restarted in place after exit {code}: {WHY[ExitCode(code)]}"

    def _run_once(self, number: int, log: LogFile) -> Ended:
        env = {**self.env, Env.INCARNATION.value: str(number), "PYTHONUNBUFFERED": "1"}
        child = subprocess.Popen(
            self.argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent,
        )
        self._child = child
        if self.stopping:  # a signal between two incarnations: pass it on
            child.send_signal(signal.SIGTERM)
        assert child.stdout is not None and child.stderr is not None
        seen: set[str] = set()
        words = LastWords()
        tees = [
            threading.Thread(
                target=_tee,
                args=(src, out, log, self.watch, seen, words, stderr),
                daemon=True,
                name=name,
            )
            for src, out, name, stderr in (
                (child.stdout, sys.stdout.buffer, "kerasjob-stdout", False),
                (child.stderr, sys.stderr.buffer, "kerasjob-stderr", True),
            )
        ]
        for t in tees:
            t.start()
        returncode = child.wait()
        for t in tees:
            t.join(timeout=5)
        self._child = None
        return Ended(returncode, frozenset(seen), words.reason())


def supervise(
    argv: Sequence[str],
    *,
    checkpoint_dir: str | None = None,
    translate: Translate = contract_code,
    watch: Mapping[str, re.Pattern[bytes]] | None = None,
) -> int:
    """Run `argv` as the container's trainer (see the module doc); its exit code."""
    return Supervisor(
        argv, checkpoint_dir=checkpoint_dir, env=os.environ, translate=translate, watch=watch
    ).run()

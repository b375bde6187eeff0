"""Where a trainer process's start-up goes: one `kerasjob: startup ...` line at its first step.

Milestones (wall clock, marked once each): the process started (from /proc: the kernel's
start time, so the interpreter's own start-up counts), `kerasjob_trainer` imported,
TensorFlow imported, the MultiWorkerMirroredStrategy built (the cluster formed: every peer
answered), the first batch about to run (model built, input pipeline made, backup restored),
the first step done (tracing + the first collectives). With the goodput ledger's times of the
previous generation (its last step, its exit) this is the whole path of a disruption:
signal -> save -> exit -> new process -> TF import -> cluster formed -> restore -> first step.
`bench/recovery.py` prints it per disruption. Format: kerasjob_contract.LOG_STARTUP_RE.
"""

from __future__ import annotations

import os
import time

#: The phases of the line, each ending at its milestone (the first starts at the process).
PHASES = ("python", "tensorflow", "cluster", "restore", "first_step")

_marks: dict[str, float] = {"python": time.time()}  # this module is imported early


def mark(milestone: str) -> None:
    """Record when `milestone` (one of PHASES) was reached; the first call counts."""
    _marks.setdefault(milestone, time.time())


def process_started_at() -> float:
    """When this process started (Unix seconds), from /proc; the first mark without it.

    Its start in clock ticks since boot (/proc/self/stat), set against the seconds since
    boot now (/proc/uptime, to 10 ms): /proc/stat's ``btime`` has whole seconds only, which
    put the start up to 1 s early (0.25 s on the real node: a "python" phase of 0.29 s)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22: starttime
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        now = time.time()
        started = now - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
        # Never later than a mark made in this process (the two clocks' rounding).
        return min(started, min(_marks.values()))
    except (OSError, ValueError, IndexError):
        return min(_marks.values())


def line() -> str:
    """The `startup ...` log line (without the `kerasjob: ` prefix)."""
    start = process_started_at()
    parts, last = [], start
    for phase in PHASES:
        at = _marks.get(phase)
        if at is None:
            parts.append(f"{phase}_s=-")
            continue
        parts.append(f"{phase}_s={max(at - last, 0.0):.2f}")
        last = at
    return f"startup started_at={start:.3f} " + " ".join(parts) + f" total_s={last - start:.2f}"

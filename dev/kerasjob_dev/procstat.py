"""A process's CPU time and peak memory from /proc, for the benchmarks."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident memory so far (VmHWM), MiB."""
    return _status_mib(pid, "VmHWM")


def rss_mib(pid: int) -> float | None:
    """The process's resident memory now (VmRSS), MiB."""
    return _status_mib(pid, "VmRSS")


def _status_mib(pid: int, field: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None

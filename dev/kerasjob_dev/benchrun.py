"""What a benchmark's figures were measured with: when, on what, at which commit, under what
load. Every bench writes it as its JSON's ``run`` object, and the benchmarks page
(`kerasjob_dev.benchpage`) prints it beside the figures."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


#: What a bench runs: uncommitted changes here (not in docs) make the figures the tree's.
CODE = ("operator", "trainer_image", "contract", "dev", "bench", ":!*.md")


def git_state() -> dict[str, Any]:
    """The commit measured, and whether its code had uncommitted changes (they are what
    ran)."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return out.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", *CODE)),
    }


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def stamp() -> dict[str, Any]:
    """Taken as a bench starts: UTC time, the command, the machine, the commit, the load."""
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "git": git_state(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def finish(run: dict[str, Any], started: float) -> dict[str, Any]:
    """`run` with the load average at the end and the wall time since `started`
    (time.monotonic())."""
    return {
        **run,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - started, 1),
    }


def run_quick(script: str, out: Path, timeout: float) -> dict[str, Any]:
    """`python bench/<script> --quick --out <out>` (a bench's test: it runs, writes its
    JSON); the JSON, or AssertionError with the bench's output tail."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.read_text())
    return result

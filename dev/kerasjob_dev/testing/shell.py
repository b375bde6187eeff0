"""Running the project's shell scripts from tests."""

from __future__ import annotations

import os
import subprocess


def bash(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` under bash with errexit, nounset and pipefail (as the project's scripts run),
    output captured, 30 s at most; `env` on top of this process's environment."""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, **env},
    )

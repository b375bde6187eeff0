"""Default locations: the run directory, the agent's state, the project's Python."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def repo_root() -> Path | None:
    """The checkout this package lives in (editable install), if any."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "operator").is_dir():
            return parent
    return None


def run_dir() -> Path:
    """$KERASJOB_RUN, else <repo>/.run (as the Makefile and hack/cluster use)."""
    if os.environ.get("KERASJOB_RUN"):
        return Path(os.environ["KERASJOB_RUN"])
    root = repo_root()
    return (root if root else Path.cwd()) / ".run"


def state_dir() -> Path:
    return run_dir() / "localnode"


def default_kubeconfig() -> str | None:
    """$KUBECONFIG, else the local cluster's kubeconfig if it exists, else ~/.kube/config."""
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"]
    local = run_dir() / "cluster" / "kubeconfig"
    try:
        return str(local) if local.exists() else None
    except OSError:  # not readable by this user: the prerequisite check will say why
        return None


def python_bin() -> Path:
    """The bin directory of the Python environment running the agent (the project's .venv):
    container commands find `python` there first."""
    return Path(sys.prefix) / "bin"

"""The object stores of the tests: versitygw (S3) and fake-gcs-server (GCS), real servers
built from their Go modules and started by `hack/cluster/objectstores.sh` on loopback ports
of their own (a test session's; other sessions' and the cluster's are left alone).

    with running(tmp_path) as stores:
        stores.s3_endpoint, stores.gcs_endpoint, stores.bucket, stores.env
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kerasjob_dev.cluster import REPO_ROOT
from kerasjob_dev.trainer_procs import free_ports

SCRIPT = REPO_ROOT / "hack/cluster/objectstores.sh"


@dataclass(frozen=True)
class Stores:
    s3_endpoint: str
    gcs_endpoint: str
    bucket: str
    env: dict[str, str]
    """The script's env lines: the endpoints, the S3 keys, the bucket."""


def _script(command: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise RuntimeError(f"objectstores.sh {command} failed: {proc.stderr[-2000:]}")
    return proc.stdout


@contextlib.contextmanager
def running(state_dir: Path, host: str = "127.0.0.1") -> Iterator[Stores]:
    """Both servers up (built first when needed: minutes, once per machine), then down."""
    s3_port, gcs_port = free_ports(2)
    env = {
        **os.environ,
        "OBJECTSTORE_HOST": host,
        "OBJECTSTORE_S3_PORT": str(s3_port),
        "OBJECTSTORE_GCS_PORT": str(gcs_port),
        "OBJECTSTORE_DIR": str(state_dir),
    }
    try:
        lines = _script("up", env)
        values = dict(line.split("=", 1) for line in lines.splitlines() if "=" in line)
        yield Stores(
            values["S3_ENDPOINT"], values["GCS_ENDPOINT"], values["OBJECTSTORE_BUCKET"], values
        )
    finally:
        _script("down", env)

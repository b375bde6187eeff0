"""The object stores of the tests: versitygw (S3) and fake-gcs-server (GCS), real servers
built from their Go modules and started by `hack/cluster/objectstores.sh` on loopback ports
of their own (a test session's; other sessions' and the cluster's are left alone).

    with running(tmp_path) as stores:
        stores.s3_endpoint, stores.gcs_endpoint, stores.bucket, stores.env
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

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


class Outage:
    """A TCP relay in front of a store (`endpoint`: what the trainers are given) that can be
    taken down and up: down, it resets every connection, open or new (the store gone
    from the network, e.g. for 30 s mid-run); the store itself runs on untouched."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.is_down = False
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        with self._lock:
            self.is_down = True
            for s in self._open:
                _close(s)
            self._open.clear()

    def up(self) -> None:
        with self._lock:
            self.is_down = False

    def close(self) -> None:
        self.down()
        _close(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self.is_down:
                    _close(client)
                    continue
                try:
                    server = socket.create_connection(self._upstream, timeout=5)
                except OSError:
                    _close(client)
                    continue
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()

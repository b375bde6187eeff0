"""A shared claim on the local control plane of ``hack/cluster``.

Several processes of one checkout (pytest sessions, ``make demo``) may use the control plane in
``$KERASJOB_RUN/cluster`` at the same time. Each registers its pid under ``users/``; when the
last live user leaves, the cluster is stopped. A cluster started by hand (``make cluster-up``)
has no ``managed`` marker: it is joined and never stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from kerasjob_dev import REPO_ROOT

#: up.sh writes this file into the state directory when a program (not a person) started it.
MANAGED_MARKER = "managed"


class LocalClusterError(RuntimeError):
    """hack/cluster/up.sh or down.sh failed."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_users(users: Path) -> list[int]:
    """Pids registered under ``users`` that are still alive; stale entries are removed."""
    live = []
    for f in users.glob("*") if users.is_dir() else []:
        pid = int(f.name) if f.name.isdigit() else -1
        if pid > 0 and _pid_alive(pid):
            live.append(pid)
        else:
            f.unlink(missing_ok=True)
    return live


class LocalCluster:
    """This process's claim on the local control plane: :meth:`acquire`, then :meth:`release`."""

    def __init__(
        self, owner: str, repo: Path = REPO_ROOT, env: dict[str, str] | None = None
    ) -> None:
        self.owner = owner
        self.scripts = repo / "hack" / "cluster"
        #: Settings for the scripts (hack/cluster/lib.sh), over the process's environment.
        self.env = env or {}
        self.kubeconfig = Path(self._checked("env.sh", "--kubeconfig").stdout.strip())
        self.bin_dir = Path(self._checked("env.sh", "--bin-dir").stdout.strip())
        self.state_dir = self.kubeconfig.parent
        self.users = self.state_dir / "users"
        self.held = False
        self.started = False
        """True when :meth:`acquire` found no healthy control plane and started one."""

    def script(
        self, name: str, *args: str, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env, "KERASJOB_CLUSTER_OWNER": self.owner}
        return subprocess.run(
            [str(self.scripts / name), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )

    def _checked(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.script(name, *args, timeout=60)
        if proc.returncode != 0:
            raise LocalClusterError(f"hack/cluster/{name} failed: {proc.stderr.strip()[-2000:]}")
        return proc

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        # One lock per checkout: users sharing .run/ take turns starting and stopping.
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir.parent / ".cluster.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def acquire(self) -> subprocess.CompletedProcess[str] | None:
        """Start the control plane, or join the running one.

        Returns up.sh's result, or None when a cluster started by hand was joined (it is
        then never stopped by :meth:`release`).
        """
        with self._lock():
            healthy = self.script("up.sh", "--check").returncode == 0
            if healthy and not (self.state_dir / MANAGED_MARKER).exists():
                return None
            # From here on release() stops the cluster when nobody else uses it, even if
            # up.sh is interrupted half-way.
            self.held = True
            self.started = not healthy
            up = self.script("up.sh", timeout=600)
            if up.returncode != 0:
                raise LocalClusterError(
                    "hack/cluster/up.sh failed (run `make binaries` first if the binaries are "
                    "missing):\n" + (up.stderr or up.stdout)[-6000:]
                )
            self.users.mkdir(exist_ok=True)
            (self.users / str(os.getpid())).touch()
            return up

    def release(self) -> list[int]:
        """Leave; stop the cluster if no other live user remains.

        Returns the pids of the other users, when the cluster was left running for them.
        """
        if not self.held:
            return []
        self.held = False
        with self._lock():
            (self.users / str(os.getpid())).unlink(missing_ok=True)
            others = live_users(self.users)
            if others:
                return others
            down = self.script("down.sh", timeout=120)
            if down.returncode != 0:
                raise LocalClusterError(f"hack/cluster/down.sh failed: {down.stderr[-1000:]}")
            return []

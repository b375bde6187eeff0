"""The Kubernetes cluster the tests run against, and helpers to use it.

Two modes, chosen by the environment:

* default: the local control plane of ``hack/cluster`` (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler and KWOK, run as processes). :func:`acquire_local`
  starts it with ``hack/cluster/up.sh`` (idempotent) and :func:`release_local` stops it with
  ``hack/cluster/down.sh`` once no other test session on this checkout uses it. A cluster
  started by hand (``make cluster-up``) is reused and left running.
* ``KERASJOB_TEST_CLUSTER=current``: the cluster named by ``KUBECONFIG`` (e.g. kind on a
  laptop), used as is; nothing is started or stopped, ``kubectl``/``helm`` come from PATH.

``KERASJOB_SKIP_CLUSTER=1`` skips the tests that need a cluster (see ``tests/conftest.py``).

Stable API (other test modules import these; keep them compatible):

* :class:`Cluster` -- ``kubeconfig``, ``bin_dir``, ``local``; ``kubectl(...)``, ``helm(...)``,
  ``env()``, ``api_client()``.
* :data:`KWOK_POD_PLACEMENT` -- Pod spec fields that put a Pod on a fake KWOK node.
* :func:`wait_for` -- poll a condition with a bounded timeout.
* :func:`create_namespace` / :func:`delete_namespace`.
* :data:`REPO_ROOT` -- the checkout's root directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kerasjob_dev import REPO_ROOT
from kerasjob_dev.localcluster import LocalCluster, LocalClusterError

CLUSTER_SCRIPTS = REPO_ROOT / "hack" / "cluster"

#: Pod spec fields (merge them into ``spec``) that schedule a Pod onto a fake KWOK node,
#: where KWOK marks it Running without running anything. Pods without them never land there.
KWOK_POD_PLACEMENT: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [
        {"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake", "effect": "NoSchedule"}
    ],
}

#: Label and annotation every fake KWOK node carries.
KWOK_NODE_LABEL = ("type", "kwok")
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")

T = TypeVar("T")


class CommandError(subprocess.CalledProcessError):
    """A kubectl/helm/script call failed; ``str()`` includes its stderr."""

    def __str__(self) -> str:
        cmd = " ".join(map(str, self.cmd)) if isinstance(self.cmd, list) else str(self.cmd)
        err = (self.stderr or "").strip() or (self.output or "").strip()
        return f"`{cmd}` exited with {self.returncode}: {err[-4000:]}"


def _run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in argv],
        input=input,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise CommandError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return proc


@dataclass(frozen=True)
class Cluster:
    """A cluster to test against.

    ``kubeconfig``: admin kubeconfig file. ``bin_dir``: directory of our pinned binaries
    (kubectl, helm, kwokctl, ...) for the local cluster, ``None`` when using the current
    cluster (binaries then come from PATH). ``local``: True for the hack/cluster control plane
    (fake KWOK nodes available), False for ``KERASJOB_TEST_CLUSTER=current``.
    """

    kubeconfig: Path
    bin_dir: Path | None
    local: bool
    _client: list[Any] = field(default_factory=list, repr=False, compare=False)

    def tool(self, name: str) -> str:
        """Path of a binary (``kubectl``, ``helm``...): ours when local, else from PATH."""
        if self.bin_dir is not None and (self.bin_dir / name).exists():
            return str(self.bin_dir / name)
        found = shutil.which(name)
        if found is None:
            raise FileNotFoundError(f"{name} not found on PATH")
        return found

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for subprocesses: ``KUBECONFIG`` set, our binaries first on PATH."""
        env = dict(os.environ if base is None else base)
        env["KUBECONFIG"] = str(self.kubeconfig)
        if self.bin_dir is not None:
            env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <kubeconfig> *args``; text output captured.

        Raises :class:`CommandError` (with stderr) on a non-zero exit when ``check``.
        """
        argv = [self.tool("kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        return _run(argv, check=check, input=input, env=self.env(), timeout=timeout)

    def helm(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run ``helm --kubeconfig <kubeconfig> *args``; like :meth:`kubectl`."""
        argv = [self.tool("helm"), "--kubeconfig", str(self.kubeconfig), *args]
        return _run(argv, check=check, input=input, env=self.env(), timeout=timeout)

    def restart_component(self, name: str, *, down: float = 0.0, signal: str = "KILL") -> float:
        """Kill one control-plane process of the local cluster (etcd, kube-apiserver, ...),
        keep it down ``down`` seconds, start it again and wait until it serves
        (hack/cluster/restart.sh). Returns the seconds it was unavailable."""
        if not self.local:
            raise RuntimeError("only the local cluster's processes can be restarted")
        out = _run(
            [CLUSTER_SCRIPTS / "restart.sh", name, "--down", str(down), "--signal", signal],
            env=self.env(),
            timeout=down + 120,
        )
        return float(out.stdout.strip().splitlines()[-1])

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this cluster (created once, then shared)."""
        if not self._client:
            from kubernetes import config

            self._client.append(config.new_client_from_config(config_file=str(self.kubeconfig)))
        return self._client[0]


def wait_for(
    predicate: Callable[[], T | None],
    *,
    timeout: float = 30,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    Raises ``TimeoutError`` naming ``what`` (and the last exception, if the predicate raised)
    after ``timeout`` seconds. Exceptions from the predicate count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # "not yet": e.g. 404 before an object exists
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


def create_namespace(api_client: Any, prefix: str = "t", *, timeout: float = 120) -> str:
    """Create namespace ``<prefix>-<8 hex>``, wait for its default ServiceAccount; return it.

    The ServiceAccount comes from the controller-manager, normally within a second; after
    the API server or etcd was restarted (tests/integration/test_control_plane_faults.py) the
    controller-manager first re-lists and re-acquires its leader lease, which took over 30 s
    once in the full suite: hence the long timeout."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(
        lambda: core.read_namespaced_service_account("default", name),
        timeout=timeout,
        what=f"ServiceAccount default in namespace {name}",
    )
    return name


def delete_namespace(api_client: Any, name: str) -> None:
    """Delete a namespace in the background (does not wait); a missing one is fine."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        client.CoreV1Api(api_client).delete_namespace(name, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise


def wait_notified(cond: threading.Condition, predicate: Callable[[], bool], timeout: float) -> bool:
    """Wait on `cond` (notified by a watch thread) until `predicate()`; False at `timeout`."""
    deadline = time.monotonic() + timeout
    with cond:
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            cond.wait(min(left, 0.5))
    return True


def delete_namespace_and_wait(api_client: Any, name: str, timeout: float = 120) -> None:
    """Delete a namespace and wait until it is gone, so that what comes next (a benchmark's
    next burst) does not overlap its deletion; past `timeout`, a warning on stderr."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    delete_namespace(api_client, name)

    def gone() -> bool:
        try:
            client.CoreV1Api(api_client).read_namespace(name)
        except ApiException as e:
            return e.status == 404
        return False

    try:
        wait_for(gone, timeout=timeout, interval=0.5, what=f"namespace {name} gone")
    except TimeoutError as e:
        print(f"warning: {e}", file=sys.stderr, flush=True)


# --- the local control plane's lifecycle across test sessions ----------------------------


_lease: LocalCluster | None = None


def acquire_local() -> Cluster:
    """Start (or join) the local control plane; :func:`release_local` undoes it.

    Teardown also runs at interpreter exit and on SIGTERM/SIGHUP, so a killed test run
    still stops the cluster; after a SIGKILL, the next ``up.sh`` replaces the leftover cluster.
    """
    global _lease
    if _lease is None:
        _lease = LocalCluster(owner="tests", repo=REPO_ROOT)
        atexit.register(release_local)
        _install_signal_handlers()
        try:
            _lease.acquire()
        except LocalClusterError as e:
            raise RuntimeError(
                f"{e}\n(set KERASJOB_SKIP_CLUSTER=1 to skip the cluster tests)"
            ) from e
    return Cluster(kubeconfig=_lease.kubeconfig, bin_dir=_lease.bin_dir, local=True)


def release_local() -> None:
    """Release this process's claim; stops the cluster if no other test session uses it."""
    if _lease is not None:
        _lease.release()


def _install_signal_handlers() -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so fixture teardown and atexit stop the cluster."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"received signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # ValueError: not in the main thread
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, handler)


def current_cluster() -> Cluster:
    """The cluster of ``KUBECONFIG`` (default ``~/.kube/config``), used unchanged."""
    default = Path.home() / ".kube" / "config"
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(default)
    if not Path(path).exists():
        raise RuntimeError(f"KERASJOB_TEST_CLUSTER=current but kubeconfig {path} does not exist")
    return Cluster(kubeconfig=Path(path), bin_dir=None, local=False)


def wants_current_cluster() -> bool:
    """True when ``KERASJOB_TEST_CLUSTER=current`` (use KUBECONFIG's cluster as is)."""
    return os.environ.get("KERASJOB_TEST_CLUSTER", "").strip().lower() == "current"


def cluster_skipped() -> bool:
    """True when ``KERASJOB_SKIP_CLUSTER=1``: tests that need a cluster are skipped."""
    return os.environ.get("KERASJOB_SKIP_CLUSTER", "").strip().lower() in {"1", "true", "yes"}

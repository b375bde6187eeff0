"""The operator under test: ``python -m kerasjob run`` as a real subprocess.

* :class:`OperatorProcess` -- start / stop / ``kill()`` (SIGKILL) / ``restart()`` one operator
  watching the given namespace globs, its log in a file, its liveness/probe endpoint
  (``probes()``: API request counts, reconciles).
* :func:`session_operator` + :func:`isolated_namespace` -- one operator per test session on
  namespaces only this session creates (the operator's own tests use these), so concurrent
  test sessions on one cluster never run two operators on one job.
* :func:`shared_operator` -- one operator per test session watching ``t-*`` (the namespaces
  of the conftest ``namespace`` fixture), for tests that just need an operator running.
  Tests that kill the operator start their own on their own namespace prefix instead.
* :func:`install_crds` -- apply the generated CRDs (once per session).
* KerasJob helpers: :func:`job_manifest`, :func:`create_job`, :func:`get_job`, ...
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kerasjob.control import metrics
from kerasjob.planner.conditions import get_condition
from kerasjob_contract.times import format_time, utcnow
from kerasjob_dev.cluster import (
    KWOK_POD_PLACEMENT,
    REPO_ROOT,
    Cluster,
    create_namespace,
    delete_namespace,
    wait_for,
)

GROUP, VERSION, PLURAL = "kerasjob.dev", "v1alpha1", "kerasjobs"
CRD_NAME = f"{PLURAL}.{GROUP}"
SHARED_NAMESPACES = "t-*"
#: Namespace prefix of this test session's own operator (see `session_operator`): two test
#: sessions on one cluster (two engineers, CI next to a laptop run) never share an operator.
SESSION_PREFIX = f"kj{os.getpid()}"
LOG_DIR = Path(os.environ.get("KERASJOB_TEST_LOGS", tempfile.gettempdir())) / "kerasjob-operator"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """One operator subprocess; all state is in the API server, so it can be killed anytime."""

    def __init__(
        self,
        cluster: Cluster,
        namespaces: tuple[str, ...] = (SHARED_NAMESPACES,),
        *,
        name: str = "operator",
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.extra_args = extra_args
        self.port = _free_port()
        self.metrics_port = _free_port()
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{name}-{os.getpid()}-{self.port}.log"
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def argv(self) -> list[str]:
        ns = [a for n in self.namespaces for a in ("--namespace", n)]
        return [
            sys.executable,
            "-m",
            "kerasjob",
            "run",
            "--standalone",
            "--liveness",
            self.url,
            "--metrics-port",
            str(self.metrics_port),
            "--resync-seconds",
            "20",
            "--progress-interval",
            "1",
            "--force-delete-after",
            "3",
            *ns,
            *self.extra_args,
        ]

    def start(self, *, wait: bool = True) -> OperatorProcess:
        env = self.cluster.env()
        env.update(self.extra_env)
        src = str(REPO_ROOT / "operator") + os.pathsep + str(REPO_ROOT / "contract")
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        self.starts += 1
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        log.write(f"\n===== start #{self.starts} at {time.time():.3f}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 45) -> None:
        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"operator exited {self.proc.returncode}:\n{self.log_tail()}")
            return self.probes() is not None

        try:
            wait_for(up, timeout=timeout, interval=0.1, what="the operator's liveness endpoint")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.log_tail()}") from None

    def probes(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(self.url, timeout=2) as resp:
                return json.loads(resp.read() or b"{}")
        except (OSError, ValueError):
            return None

    def metrics(self) -> dict[str, float]:
        """The operator's Prometheus counters, uncached: ``{"name{labels}": value}``."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return metrics.parse(resp.read().decode())

    def api_requests(self) -> dict[str, float]:
        """API requests so far by "verb resource" (from the metrics endpoint)."""
        out: dict[str, float] = {}
        prefix = "kerasjob_operator_api_requests_total{"
        for key, value in self.metrics().items():
            if key.startswith(prefix):
                labels = dict(part.split("=", 1) for part in key[len(prefix) : -1].split(","))
                out[f"{labels['verb'].strip(chr(34))} {labels['resource'].strip(chr(34))}"] = value
        return out

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup handlers, exactly like a node loss or OOM kill."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self, *, wait: bool = True) -> None:
        self.kill()
        self.start(wait=wait)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def log_lines(self, containing: str, n: int = 60) -> str:
        """The last ``n`` lines of its log that contain ``containing`` (a namespace, a job)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join([line for line in lines if containing in line][-n:])

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- CRDs and the shared operator ------------------------------------------------------------

_crds_installed: list[bool] = []
_shared: list[OperatorProcess] = []
_session: list[OperatorProcess] = []


def install_crds(cluster: Cluster) -> None:
    """Apply crds/ (generated from the models; $KERASJOB_CRD_DIR overrides the directory) and
    wait until the CRD is Established."""
    if _crds_installed:
        return
    crd_dir = Path(os.environ.get("KERASJOB_CRD_DIR", REPO_ROOT / "crds"))
    files = sorted(crd_dir.glob("*.yaml")) if crd_dir.is_dir() else []
    if files:
        cluster.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            *[a for f in files for a in ("-f", str(f))],
        )
    else:  # not generated yet: generate into a temporary directory
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "kerasjob.tools.crdgen", "--out", tmp],
                check=True,
                cwd=REPO_ROOT,
            )
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", tmp)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s")
    _crds_installed.append(True)


def session_operator(cluster: Cluster) -> OperatorProcess:
    """This session's operator for ``<SESSION_PREFIX>-*`` namespaces (restarted if it died);
    create its namespaces with `isolated_namespace`."""
    install_crds(cluster)
    if not _session:
        op = OperatorProcess(cluster, (f"{SESSION_PREFIX}-*",), name="session")
        _session.append(op)
        atexit.register(op.stop)
        op.start()
    elif not _session[0].alive():
        _session[0].start()
    return _session[0]


def isolated_namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace only `session_operator` watches; deleted afterwards (a generator for
    fixtures: ``yield from isolated_namespace(kube)``)."""
    name = create_namespace(kube, prefix=SESSION_PREFIX)
    try:
        yield name
    finally:
        delete_namespace(kube, name)


def own_namespace(kube: Any, prefix: str) -> Iterator[str]:
    """A fresh namespace ``<prefix>-<8 hex>`` for a test's own operator; deleted afterwards
    (a generator for fixtures: ``yield from own_namespace(kube, "chaos")``)."""
    name = create_namespace(kube, prefix=prefix)
    try:
        yield name
    finally:
        delete_namespace(kube, name)


def own_operator(cluster: Cluster, namespace: str, name: str) -> Iterator[OperatorProcess]:
    """An operator of a test's own on exactly ``namespace`` (no namespace scanning), stopped
    afterwards: for tests that kill it, count its requests, or must not wait on another's
    (``yield from own_operator(cluster, ns, "chaos")``)."""
    install_crds(cluster)
    op = OperatorProcess(cluster, (namespace,), name=name)
    op.start()
    try:
        yield op
    finally:
        op.stop()


def shared_operator(cluster: Cluster) -> OperatorProcess:
    """The session's operator for ``t-*`` namespaces (restarted if it died)."""
    install_crds(cluster)
    if not _shared:
        op = OperatorProcess(cluster, (SHARED_NAMESPACES,), name="shared")
        _shared.append(op)
        atexit.register(op.stop)
        op.start()
    elif not _shared[0].alive():
        _shared[0].start()
    return _shared[0]


# --- KerasJob helpers ----------------------------------------------------------------------


def job_manifest(name: str, *, workers: int = 3, **spec: Any) -> dict[str, Any]:
    """A KerasJob whose Pods land on fake KWOK nodes (and so become Running and Ready)."""
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KerasJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "image": "kerasjob/trainer:test",
            "checkpoint": {"volume": {"hostPath": {"path": "/tmp/kerasjob-ckpt"}}},
            "template": {"spec": copy.deepcopy(KWOK_POD_PLACEMENT)},
            **spec,
        },
    }
    return body


def custom(kube: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(kube)


def core(kube: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube)


def as_a_kubelet_finishes(pod: Any) -> Any:
    """Delete options that end ``pod`` the way a kubelet finishes a deletion: grace 0 and
    its UID as a precondition, so a late call never meets a replacement of the same name.

    The tests use them instead of a graceful delete or eviction on KWOK nodes: KWOK v0.8.0's
    pod-delete stage finishes graceful deletions with a DELETE by name, and when that comes
    after the operator has force-deleted the Pod and made its replacement, it deletes the
    replacement too -- a second real loss the test's ledger cannot know of."""
    from kubernetes import client

    return client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.metadata.uid)
    )


def create_job(kube: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get_job(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return custom(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch_job(kube: Any, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    return custom(kube).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        patch,
        _content_type="application/merge-patch+json",
    )


def delete_job(kube: Any, namespace: str, name: str) -> None:
    custom(kube).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def job_status(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return get_job(kube, namespace, name).get("status") or {}


def condition(status: dict[str, Any], type_: str) -> Mapping[str, Any] | None:
    return get_condition(status.get("conditions") or [], type_)


def pods(kube: Any, namespace: str, job: str | None = None) -> dict[str, Any]:
    """Pods by name (V1Pod objects), optionally only the given job's."""
    selector = f"{GROUP}/job-name={job}" if job else f"{GROUP}/job-name"
    items = core(kube).list_namespaced_pod(namespace, label_selector=selector).items
    return {p.metadata.name: p for p in items}


def wait_phase(kube: Any, namespace: str, name: str, phase: str, timeout: float = 30) -> dict:
    return wait_for(
        lambda: (s := job_status(kube, namespace, name)).get("phase") == phase and s,
        timeout=timeout,
        what=f"KerasJob {namespace}/{name} phase {phase}",
    )


def now_rfc3339() -> str:
    return format_time(utcnow())


def container_exit_status(
    exit_code: int, *, in_place: bool, restart_count: int = 1, reason: str | None = None
) -> dict[str, Any]:
    """The Pod status a kubelet writes after the trainer exited with ``exit_code``.

    ``in_place``: the kubelet restarted the container (Pod restartPolicy OnFailure):
    restartCount goes up, lastState.terminated holds the exit, the Pod stays Running.
    Otherwise the Pod ends: phase Succeeded (0) or Failed, state.terminated holds the exit.
    """
    now = now_rfc3339()
    terminated = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": now,
        "finishedAt": now,
    }
    if in_place:
        container = {
            "name": "trainer",
            "image": "kerasjob/trainer:test",
            "imageID": "",
            "ready": True,
            "restartCount": restart_count,
            "started": True,
            "state": {"running": {"startedAt": now}},
            "lastState": {"terminated": terminated},
        }
        return {"containerStatuses": [container]}
    container = {
        "name": "trainer",
        "image": "kerasjob/trainer:test",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"terminated": terminated},
    }
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": [container],
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "lastTransitionTime": now,
                "reason": "PodCompleted" if exit_code == 0 else "PodFailed",
            }
        ],
    }


def set_container_exit(
    cluster: Cluster,
    namespace: str,
    pod: str,
    exit_code: int,
    *,
    in_place: bool,
    restart_count: int = 1,
    reason: str | None = None,
) -> None:
    """Write the Pod status a kubelet would after the trainer exited with ``exit_code``
    (`container_exit_status`), with kubectl."""
    status = container_exit_status(
        exit_code, in_place=in_place, restart_count=restart_count, reason=reason
    )
    cluster.kubectl(
        "patch",
        "pod",
        pod,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def exit_pod(kube: Any, namespace: str, pod: str, exit_code: int = 0) -> None:
    """The Pod's trainer exited with ``exit_code`` and the Pod ended, as a kubelet writes it
    (`container_exit_status`), through the API client (no kubectl process: for many Pods)."""
    status = container_exit_status(exit_code, in_place=False)
    core(kube).patch_namespaced_pod_status(pod, namespace, {"status": status})


def events_for(kube: Any, namespace: str, name: str) -> list[Any]:
    items = (
        core(kube)
        .list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=KerasJob"
        )
        .items
    )
    return list(items)

"""The chart and the operator as the chart runs it, for the integration tests: `helm install`,
a ServiceAccount's token kubeconfig, the operator as a local subprocess with the Deployment's
command line, and what its audit shows (requests made, permissions granted, refusals).
Shared by test_helm, test_kueue and test_gang_kwok (test modules never import each other).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kerasjob_dev import REPO_ROOT
from kerasjob_dev.cluster import Cluster

CHART = REPO_ROOT / "charts" / "kerasjob-operator"
GROUP, VERSION, PLURAL = "kerasjob.dev", "v1alpha1", "kerasjobs"

#: Keeps the chart's own operator Pod Pending: no node has this label. The test runs the
#: operator as a subprocess instead, and two operators must not handle the same jobs.
NEVER_SCHEDULE = {"kerasjob.dev/test-never-schedule": "true"}


@dataclass
class Release:
    name: str
    namespace: str  # where the operator (ServiceAccount, Deployment) lives
    jobs_namespace: str  # the namespace it handles
    manifest: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.manifest if o["kind"] == kind]

    @property
    def deployment(self) -> dict[str, Any]:
        (dep,) = self.of_kind("Deployment")
        return dep

    @property
    def service_account(self) -> str:
        return self.deployment["spec"]["template"]["spec"]["serviceAccountName"]


def helm_install(cluster: Cluster, name: str, namespace: str, values: dict[str, Any]) -> Release:
    args = [a for k, v in values.items() for a in ("--set-json", f"{k}={json.dumps(v)}")]
    cluster.helm("install", name, str(CHART), "--namespace", namespace, *args, timeout=180)
    text = cluster.helm("get", "manifest", name, "--namespace", namespace).stdout
    manifest = [d for d in yaml.safe_load_all(text) if d]
    jobs_ns = (values.get("watchNamespaces") or [""])[0]
    return Release(name, namespace, jobs_ns, manifest)


def token_kubeconfig(cluster: Cluster, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``namespace/sa`` and nothing else."""
    token = cluster.kubectl(
        "--namespace", namespace, "create", "token", sa, "--duration=2h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    current = admin.get("current-context") or admin["contexts"][0]["name"]
    ctx = next(c["context"] for c in admin["contexts"] if c["name"] == current)
    server = dict(next(c["cluster"] for c in admin["clusters"] if c["name"] == ctx["cluster"]))
    ca = server.get("certificate-authority")
    if ca and not Path(ca).is_absolute():  # relative to the admin kubeconfig's directory
        server["certificate-authority"] = str(cluster.kubeconfig.parent / ca)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": server}],
                "users": [{"name": sa, "user": {"token": token}}],
                "contexts": [{"name": sa, "context": {"cluster": "test", "user": sa}}],
                "current-context": sa,
            }
        )
    )
    return path


def as_sa(cluster: Cluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl with the ServiceAccount's token kubeconfig (not the admin one)."""
    env = cluster.env()
    env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [cluster.tool("kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class OperatorRun:
    proc: subprocess.Popen[bytes]
    probe_url: str
    metrics_url: str | None


@contextlib.contextmanager
def operator_process(release: Release, kubeconfig: Path, log_path: Path) -> Iterator[OperatorRun]:
    """Run the Deployment's container command line and env as a local process."""
    container = release.deployment["spec"]["template"]["spec"]["containers"][0]
    # The image's ENTRYPOINT, unless the chart overrides the command (peering's shell).
    command = container.get("command") or ["python", "-m", "kerasjob"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERASJOB_")}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
    # The Pod's ports may be taken on this machine: same endpoints, free ports.
    port = free_port()
    env["KERASJOB_LIVENESS"] = f"http://127.0.0.1:{port}/healthz"
    if "KERASJOB_METRICS_PORT" in env:
        env["KERASJOB_METRICS_PORT"] = str(free_port())
    env["KUBECONFIG"] = str(kubeconfig)
    # "python" in the command must be this interpreter (the image's is /opt/kerasjob/bin).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*command, *container.get("args", [])],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            start_new_session=True,
        )
    metrics_port = env.get("KERASJOB_METRICS_PORT")
    run = OperatorRun(
        proc,
        f"http://127.0.0.1:{port}/healthz",
        f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None,
    )
    try:
        yield run
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def probe(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read() or b"{}")


def api_requests(run: OperatorRun) -> dict[str, int]:
    """{"<verb> <resource>": count} of the controller's API calls, from /metrics (kopf caches
    the liveness endpoint's probe results for 10 s; /metrics is always current)."""
    assert run.metrics_url, "the chart enables metrics by default"
    with urllib.request.urlopen(run.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    pattern = r'^kerasjob_operator_api_requests_total\{verb="([^"]+)",resource="([^"]+)"\} (\S+)$'
    return {f"{v} {r}": int(float(n)) for v, r, n in re.findall(pattern, text, re.M)}


def granted(release: Release, namespace: str) -> dict[str, set[str]]:
    """{resource: verbs} the release grants in ``namespace`` (the controller counts its
    requests as "<verb> <resource>", without the API group)."""
    out: dict[str, set[str]] = {}
    roles = [r for r in release.of_kind("Role") if r["metadata"]["namespace"] == namespace]
    for role in roles + release.of_kind("ClusterRole"):
        for rule in role["rules"]:
            if rule.get("resourceNames"):
                continue
            for res in rule["resources"]:
                out.setdefault(res, set()).update(rule["verbs"])
    return out


#: kopf's expected, harmless refusals in namespaced mode: cluster-wide discovery only (the
#: API server's message names the resource). Not any line that says "namespaces": every
#: namespaced request's URL does, and a refused one is what these tests look for.
_HARMLESS = re.compile(
    r'cannot (list|watch|get) resource \\?"(namespaces|customresourcedefinitions)\\?"'
)


def forbidden(log: Path) -> list[str]:
    """The operator log's lines about a refused request (an HTTP 403 or "forbidden") other
    than kopf's harmless ones: any means the chart is missing a permission."""
    return [line for line in log.read_text().splitlines() if is_refusal(line)]


def is_refusal(line: str) -> bool:
    """Whether a log line tells of a refused request. 403 counts only as a word of its own: a
    random port (40389), the log's milliseconds (07:20:02,403) or a random namespace's hex
    suffix (jobs-bf403a17) are no refusal."""
    refused = re.search(r"(?<![\w,.:])403(?!\w)", line) or "orbidden" in line
    return bool(refused) and not _HARMLESS.search(line)

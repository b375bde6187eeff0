"""The operator as `helm install` runs it: the chart's hardened Pod (non-root, read-only root
filesystem, no capabilities, RuntimeDefault seccomp) runs the operator image for real, stays
up (no restart), answers its liveness probe, and talks to the API server with the chart's
ServiceAccount through in-cluster configuration."""

from __future__ import annotations

from typing import Any

import pytest

from kerasjob_dev.cluster import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_operator_runs_in_the_charts_hardened_pod(deployment: Any) -> None:
    kj, ns = deployment.kube, deployment.operator_namespace
    pods = (kj.get(f"/api/v1/namespaces/{ns}/pods") or {}).get("items") or []
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod = pods[0]
    spec = pod["spec"]
    container = spec["containers"][0]
    sc = container.get("securityContext") or {}
    psc = spec.get("securityContext") or {}
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc.get("capabilities", {}).get("drop") == ["ALL"]
    assert (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")) is True
    seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
    assert seccomp == "RuntimeDefault"
    assert spec["serviceAccountName"].startswith(deployment.release)
    if deployment.cluster.local:
        assert container["image"] == "kerasjob/operator:dev"
        assert spec["nodeName"] == "kerasjob-node"

    def ready() -> dict[str, Any] | None:
        p = kj.get(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}") or {}
        statuses = (p.get("status") or {}).get("containerStatuses") or []
        return p if statuses and all(s.get("ready") for s in statuses) else None

    current = wait_for(ready, timeout=60, what="the operator Pod Ready")
    status = current["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0, status
    # It runs as the image's user, and its log shows kopf serving the watched namespace
    # (in-cluster credentials: the ServiceAccount token through the `kubernetes` Service).
    logs = deployment.operator_logs()
    assert "Traceback" not in logs, logs
    out = deployment.cluster.kubectl(
        "exec",
        "-n",
        ns,
        current["metadata"]["name"],
        "--",
        "python",
        "-c",
        "import os; open('/probe', 'w')",
        check=False,
    )
    assert out.returncode != 0 and "Read-only file system" in out.stderr, out.stderr
    who = deployment.cluster.kubectl(
        "exec", "-n", ns, current["metadata"]["name"], "--", "id", "-u"
    ).stdout.strip()
    assert who == "10001"

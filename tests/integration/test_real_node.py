"""The local cluster's real node (hack/cluster/node.sh) is stopped without leaving anything
behind and comes back: with a Pod running on it (containers, its network namespace, volume
mounts, cgroups, kube-proxy's rules for a Service), `node.sh down` leaves no process, mount,
cgroup or iptables rule of the node; `node.sh start` brings the Node back Ready and the
kubelet runs the Pod again. (The bridge carries the API server's address, so it stays with
the control plane: `down.sh` removes it last, and `node.sh leftovers --network` checks that.)

The Pod runs the node's own sandbox image (kerasjob.local/pause:dev, always present), so this
needs no image build."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev.cluster import REPO_ROOT, Cluster, wait_for

pytestmark = [pytest.mark.cluster]

NODE_SH = REPO_ROOT / "hack" / "cluster" / "node.sh"
NODE = "kerasjob-node"
BRIDGE = os.environ.get("NODE_BRIDGE", "kjbr0")
POD_CIDR = ipaddress.ip_network(os.environ.get("NODE_POD_CIDR", "10.213.0.0/24"))
#: A MAC no Pod has: the neighbour entry an earlier Pod on the same address would have left.
GONE_MAC = "02:6b:6a:00:00:01"


def node_sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NODE_SH), *args], capture_output=True, text=True, timeout=180, check=check
    )


def node_dir() -> Path:
    return Path(os.environ.get("KERASJOB_RUN") or REPO_ROOT / ".run") / "node"


def ip_batch(lines: list[str]) -> None:
    subprocess.run(
        ["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", text=True,
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip


def pod_manifest(name: str = "sleeper") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "kerasjob.local/pause:dev",
                    "imagePullPolicy": "Never",
                    "resources": {"limits": {"memory": "32Mi", "cpu": "100m"}},
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
        },
    }


def test_node_down_leaves_nothing_and_start_brings_it_back(
    cluster: Cluster, kube: Any, namespace: str
) -> None:
    if not cluster.local:
        pytest.skip("the local cluster's real node")
    from kubernetes import client

    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, pod_manifest())
    core.create_namespaced_service(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "sleeper"},
            "spec": {"selector": {"app": "sleeper"}, "ports": [{"port": 80}]},
        },
    )

    def running() -> Any:
        pod = core.read_namespaced_pod("sleeper", namespace)
        return pod if pod.status.phase == "Running" else None

    wait_for(running, timeout=60, interval=0.2, what="the Pod running on the real node")
    loaded = sorted(p.name.removesuffix(".id") for p in (node_dir() / "loaded").glob("*.id"))
    # With the node up, the check sees it: it can fail.
    before = node_sh("leftovers", check=False)
    assert before.returncode == 1, before.stdout
    for kind in ("process", "mount", "cgroup", "iptables"):
        assert kind in before.stdout, before.stdout

    node_sh("down")
    # No API call until the node is back: that is when nothing of it may be left.
    after = node_sh("leftovers", check=False)
    restarted = node_sh("start", check=False)
    # Images the session had imported (e.g. the e2e tests') come back too.
    export = Path(os.environ.get("KERASJOB_CACHE", Path.home() / ".cache/kerasjob"))
    archives = [str(export / "images" / "export" / name) for name in loaded]
    if archives:
        node_sh("load", *archives)
    assert after.returncode == 0 and after.stdout == "", after.stdout
    assert restarted.returncode == 0, restarted.stderr

    def ready() -> bool:
        node = core.read_node(NODE)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)

    wait_for(ready, timeout=60, interval=0.5, what="the node Ready again")
    pod = wait_for(running, timeout=90, interval=0.5, what="the kubelet to run the Pod again")
    assert pod.spec.node_name == NODE and pod.status.pod_ip.startswith("10.213.0.")


def test_a_pod_on_a_reused_address_is_reachable_at_once(
    cluster: Cluster, kube: Any, namespace: str
) -> None:
    """host-local hands addresses out round-robin, so a Pod gets one an earlier Pod held; the
    node's STALE neighbour entry of that Pod (its MAC gone) made the new Pod unreachable for
    5-9 s (hack/cluster/cni/neigh-reset.py). Every free address gets such an entry first;
    the new Pod's must be gone, and a connect to it answers (refused: nothing listens) at
    once instead of timing out."""
    if not cluster.local:
        pytest.skip("the local cluster's real node")
    from kubernetes import client

    core = client.CoreV1Api(kube)
    pods = core.list_pod_for_all_namespaces().items
    held = {p.status.pod_ip for p in pods if p.status.phase not in ("Succeeded", "Failed")}
    free = [str(a) for a in list(POD_CIDR.hosts())[1:] if str(a) not in held]
    ip_batch([f"neigh replace {a} lladdr {GONE_MAC} dev {BRIDGE} nud stale" for a in free])
    try:
        core.create_namespaced_pod(namespace, pod_manifest("reused"))

        def address() -> str | None:
            pod = core.read_namespaced_pod("reused", namespace)
            return pod.status.pod_ip if pod.status.phase == "Running" else None

        ip = wait_for(address, timeout=60, interval=0.2, what="the Pod running")
        assert ip in free
        entry = subprocess.run(
            ["ip", "neigh", "show", ip, "dev", BRIDGE], capture_output=True, text=True, check=True
        ).stdout
        assert GONE_MAC not in entry, entry
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ip, 9), timeout=1.0).close()
    finally:
        ip_batch([f"neigh del {a} dev {BRIDGE}" for a in free])

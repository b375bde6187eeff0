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


def running_ip(core: Any, namespace: str, name: str) -> str:
    """Pod `name`'s IP once it runs."""

    def ip() -> str | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod.status.pod_ip if pod.status.phase == "Running" else None

    return str(wait_for(ip, timeout=60, interval=0.2, what=f"Pod {name} running"))


IMAGE_FIXTURES = {"images", "deployment"}  # tests/e2e/conftest.py: the imported images


def later_tests_use(request: pytest.FixtureRequest, fixtures: set[str]) -> bool:
    """Whether a test this session runs after the requesting one uses any of `fixtures`."""
    items = request.session.items
    later = items[items.index(request.node) + 1 :]
    return any(fixtures & set(getattr(item, "fixturenames", ())) for item in later)


def test_node_down_leaves_nothing_and_start_brings_it_back(
    cluster: Cluster, kube: Any, namespace: str, request: pytest.FixtureRequest
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
    # Images the session had imported (the e2e tests') come back when a later test of this
    # session uses them (`make test` runs tests/e2e first: none; re-importing them took
    # ~1 min of its time). A later session's `images` fixture imports them itself.
    export = Path(os.environ.get("KERASJOB_CACHE", Path.home() / ".cache/kerasjob"))
    archives = [str(export / "images" / "export" / name) for name in loaded]
    if archives and later_tests_use(request, IMAGE_FIXTURES):
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
    5-9 s (hack/cluster/cni/neigh-reset.py). Here the next addresses host-local hands out get
    such an entry first; the new Pod's must be gone, and a connect to it answers (refused:
    nothing listens) at once instead of timing out."""
    if not cluster.local:
        pytest.skip("the local cluster's real node")
    from kubernetes import client

    core = client.CoreV1Api(kube)
    # host-local: a file per address in use, and the last one handed out; the next is the
    # first free one after it. Other Pods may start meanwhile (right after the node's restart
    # in the test above, its Pods come back): the next few free addresses all get the entry.
    ipam = node_dir() / "cni" / "ipam" / "kerasjob"  # made at the node's first Pod
    ipam.mkdir(parents=True, exist_ok=True)
    in_use = {f.name for f in ipam.iterdir()}
    free = (str(a) for a in list(POD_CIDR.hosts())[1:] if str(a) not in in_use)
    planted = [next(free) for _ in range(8)]
    (ipam / "last_reserved_ip.0").write_text(str(ipaddress.ip_address(planted[0]) - 1))
    ip_batch([f"neigh replace {a} lladdr {GONE_MAC} dev {BRIDGE} nud stale" for a in planted])
    try:
        core.create_namespaced_pod(namespace, pod_manifest("reused"))
        reused = running_ip(core, namespace, "reused")
        assert reused in planted, (reused, planted)
        entry = subprocess.run(
            ["ip", "neigh", "show", reused, "dev", BRIDGE],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert GONE_MAC not in entry, entry
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((reused, 9), timeout=1.0).close()
    finally:
        ip_batch([f"neigh del {a} dev {BRIDGE}" for a in planted])


def netns_of(ip: str) -> Path:
    """The network namespace file (containerd's) whose eth0 has `ip`."""
    for ns in (
        node_dir() / "containerd" / "state" / "io.containerd.grpc.v1.cri" / "netns"
    ).iterdir():
        shown = subprocess.run(
            ["nsenter", f"--net={ns}", "ip", "-o", "-4", "addr", "show", "eth0"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        if f" {ip}/" in shown:
            return ns
    raise AssertionError(f"no network namespace has {ip}")


#: Seconds from the first connect to `sys.argv[1]`:9 until one is answered (refused: nothing
#: listens there), run inside a Pod's network namespace.
PROBE = """
import socket, sys, time
t0 = time.monotonic()
while True:
    try:
        socket.create_connection((sys.argv[1], 9), timeout=0.2).close()
        break
    except ConnectionRefusedError:
        break
    except OSError:
        pass
print(round(time.monotonic() - t0, 2))
"""


def test_the_bridge_keeps_its_mac_while_pods_come_and_go(
    cluster: Cluster, kube: Any, namespace: str
) -> None:
    """A Linux bridge takes the lowest MAC of its ports unless one is set, so it changed when
    that Pod left, and every other Pod's neighbour entry for its gateway named the gone MAC:
    a survivor's connects through the gateway went unanswered until the entry expired (23 s
    measured). node.sh sets the bridge's MAC (the kernel's NET_ADDR_SET, 3); it stays while
    Pods come and go, and a survivor reaches a new Pod at once."""
    if not cluster.local:
        pytest.skip("the local cluster's real node")
    from kubernetes import client

    core = client.CoreV1Api(kube)
    sysfs = Path("/sys/class/net") / BRIDGE
    assert (sysfs / "addr_assign_type").read_text().strip() == "3"
    mac = (sysfs / "address").read_text()

    for name in ("survivor", "gone-1", "gone-2"):
        core.create_namespaced_pod(namespace, pod_manifest(name))
    survivor = netns_of(running_ip(core, namespace, "survivor"))
    for name in ("gone-1", "gone-2"):
        running_ip(core, namespace, name)
    for name in ("gone-1", "gone-2"):
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def gone() -> bool:
        return not core.list_namespaced_pod(
            namespace, label_selector="app in (gone-1,gone-2)"
        ).items

    wait_for(gone, timeout=60, interval=0.2, what="the Pods gone")
    core.create_namespaced_pod(namespace, pod_manifest("new"))
    new = running_ip(core, namespace, "new")
    assert (sysfs / "address").read_text() == mac
    took = subprocess.run(
        ["nsenter", f"--net={survivor}", "python3", "-c", PROBE, new],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert float(took) < 1.0, took

"""The Node object of the local node and the heartbeats that keep it Ready.

kube-controller-manager's node lifecycle controller marks a node NotReady, taints it and
evicts its Pods when neither its Lease in kube-node-lease nor its Ready condition has been
renewed for the grace period (about 40-50 s). Like a kubelet we renew the Lease every 10 s
and post the node status every 30 s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import threading
from pathlib import Path

import urllib3

from .kube import MERGE, STRATEGIC_MERGE, ApiError, Kube
from .status import now, rfc3339

log = logging.getLogger(__name__)

_NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError)

LOCAL_NODE_LABEL = "kerasjob.dev/local-node"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
STATUS_EVERY_S = 30.0
#: Reported as the kubelet version (the Node API requires one); says what runs the node.
AGENT_VERSION = "kerasjob-localnode/v0.1.0"


def machine_capacity() -> dict[str, str]:
    cpus = os.cpu_count() or 1
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    disk = os.statvfs("/")
    return {
        "cpu": str(cpus),
        "memory": f"{mem_kib}Ki",
        "pods": "110",
        "ephemeral-storage": f"{disk.f_blocks * disk.f_frsize // 1024}Ki",
    }


def node_conditions(at_str: str, since: str) -> list[dict]:
    def cond(t: str, status: str, reason: str, message: str) -> dict:
        return {
            "type": t,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": at_str,
            "lastTransitionTime": since,
        }

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "sufficient PIDs"),
        cond("Ready", "True", "KubeletReady", "kerasjob local node agent is posting ready status"),
    ]


def build_node(
    name: str, host_ip: str, capacity: dict[str, str], since: str, port: int = 0
) -> dict:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    boot_id = ""
    with contextlib.suppress(OSError):
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                LOCAL_NODE_LABEL: "true",
            },
        },
        "spec": {"taints": []},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": node_conditions(since, since),
            # Only the bridge address: the API server proxies `kubectl logs` to the first
            # address type it prefers, and a Hostname would resolve to something else.
            "addresses": [{"type": "InternalIP", "address": host_ip}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {
                "machineID": _read("/etc/machine-id"),
                "systemUUID": "",
                "bootID": boot_id,
                "kernelVersion": platform.release(),
                "osImage": platform.platform(),
                "containerRuntimeVersion": "kerasjob-localnode://processes",
                "kubeletVersion": AGENT_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch,
            },
        },
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


class NodeKeeper:
    """Registers the Node and keeps its Lease and Ready condition fresh from a thread."""

    def __init__(self, kube: Kube, name: str, host_ip: str, capacity: dict[str, str]) -> None:
        self.kube, self.name, self.host_ip, self.capacity = kube, name, host_ip, capacity
        self.port = 0
        """Port of the log server (daemonEndpoints.kubeletEndpoint)."""
        self.since = rfc3339(now()) or ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.uid = ""

    def register(self) -> None:
        node = build_node(self.name, self.host_ip, self.capacity, self.since, self.port)
        path = f"/api/v1/nodes/{self.name}"
        try:
            created = self.kube.request("POST", "/api/v1/nodes", body=node)
        except ApiError as e:
            if e.status != 409:
                raise
            # Left by a previous agent: take it over (and drop taints it may have gained
            # while nobody renewed it; the lifecycle controller would, but only later).
            created = self.kube.request(
                "PATCH",
                path,
                body={"metadata": {"labels": node["metadata"]["labels"]}, "spec": {"taints": None}},
                content_type=MERGE,
            )
        self.uid = created["metadata"]["uid"]
        self.post_status()
        self.renew_lease()

    def post_status(self) -> None:
        at = rfc3339(now()) or ""
        body = {
            "status": {
                "capacity": self.capacity,
                "allocatable": self.capacity,
                "conditions": node_conditions(at, self.since),
                "addresses": [{"type": "InternalIP", "address": self.host_ip}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            }
        }
        self.kube.request(
            "PATCH", f"/api/v1/nodes/{self.name}/status", body=body, content_type=STRATEGIC_MERGE
        )

    def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        micro = now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": micro,
        }
        try:
            self.kube.request("PATCH", path, body={"spec": spec}, content_type=MERGE)
        except ApiError as e:
            if e.status != 404:
                raise
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": "kube-node-lease",
                    # Owned by the Node, so the garbage collector removes it with the Node.
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid}
                    ],
                },
                "spec": spec,
            }
            self.kube.request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body=lease
            )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="node-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last_status = now()
        while not self._stop.wait(LEASE_RENEW_S):
            try:
                self.renew_lease()
                if (now() - last_status).total_seconds() >= STATUS_EVERY_S:
                    self.post_status()
                    last_status = now()
            except ApiError as e:
                if e.status == 404:
                    # Someone deleted our Node: register again, as a kubelet does.
                    log.warning("node %s was deleted; registering it again", self.name)
                    with contextlib.suppress(ApiError, *_NETWORK_ERRORS):
                        self.register()
                else:
                    log.warning("node heartbeat failed: %s", e)
            except _NETWORK_ERRORS as e:  # the heartbeat must survive API hiccups
                log.warning("node heartbeat failed: %s", e)

    def stop_and_delete(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.kube.request("DELETE", f"/api/v1/nodes/{self.name}", timeout=5)
            log.info("deleted node %s", self.name)
        except ApiError as e:
            if e.status != 404:
                log.warning("could not delete node %s: %s", self.name, e)
        except _NETWORK_ERRORS as e:
            log.warning("could not delete node %s: %s", self.name, e)

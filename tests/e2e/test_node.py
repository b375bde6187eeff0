"""The real node of the local cluster (hack/cluster/node.sh): containerd + runc + CNI bridge,
kubelet, kube-proxy and CoreDNS. What kerasjob relies on, checked with our own operator image
as a plain Python image: exit status and termination message, `kubectl logs`, Pod and Service
DNS names, a ClusterIP Service through kube-proxy, the API server through the `kubernetes`
Service with a ServiceAccount token (in-cluster config), cgroup limits, SIGTERM on delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.synckube import Kube, pod_path

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

NODE_NAME = "kerasjob-node"
NODE_IP = "10.213.0.1"
IMAGE = localdeploy.OPERATOR_IMAGE  # Debian + Python; any command can replace its entrypoint


@pytest.fixture(autouse=True)
def _local(cluster: Cluster, images: object) -> None:
    if not cluster.local:
        pytest.skip("tests the local cluster's real node")


def make_pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "grp"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 10,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": command,
                }
            ],
            **spec,
        },
    }


def create(kj: Kube, namespace: str, obj: dict[str, Any], kind: str = "pods") -> None:
    kj.request("POST", f"/api/v1/namespaces/{namespace}/{kind}", body=obj)


def wait_phase(kj: Kube, namespace: str, name: str, *phases: str, timeout: float = 60) -> dict:
    def done() -> dict | None:
        pod = kj.get(pod_path(namespace, name))
        return pod if pod and pod.get("status", {}).get("phase") in phases else None

    return wait_for(done, timeout=timeout, interval=0.2, what=f"pod {name} in {phases}")


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]


def logs(cluster: Cluster, namespace: str, pod: str) -> str:
    return cluster.kubectl("logs", "-n", namespace, pod).stdout


def test_pod_runs_and_reports_its_exit(cluster: Cluster, kj: Kube, namespace: str) -> None:
    script = (
        "echo pod=$POD ns=$NS ip=$IP host=$(cat /proc/sys/kernel/hostname) user=$(id -u); "
        "echo mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes); "
        "ls /scratch >/dev/null; printf bye > /dev/termination-log; exit 3"
    )
    pod = make_pod("runner", ["sh", "-c", script], hostname="runner", subdomain="grp")
    pod["spec"]["containers"][0].update(
        env=[
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        volumeMounts=[{"name": "s", "mountPath": "/scratch"}],
        resources={"limits": {"memory": "200Mi"}, "requests": {"cpu": "100m"}},
    )
    pod["spec"]["volumes"] = [{"name": "s", "emptyDir": {}}]
    create(kj, namespace, pod)
    done = wait_phase(kj, namespace, "runner", "Failed")
    status = done["status"]
    assert done["spec"]["nodeName"] == NODE_NAME
    assert status["podIP"].startswith("10.213.0.") and status["hostIP"] == NODE_IP
    term = container_status(done)["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["message"] == "bye"
    # `kubectl logs` goes through the API server to the kubelet.
    out = logs(cluster, namespace, "runner")
    assert f"pod=runner ns={namespace} ip={status['podIP']} host=runner user=10001" in out
    assert f"mem={200 * 1024 * 1024}" in out, out  # the memory limit is the cgroup's


def test_pods_talk_over_dns_names_and_services(cluster: Cluster, kj: Kube, namespace: str) -> None:
    server = (
        "import socket\n"
        "s = socket.socket(); s.bind(('0.0.0.0', 2222)); s.listen()\n"
        "for _ in range(2):\n"
        "    c, a = s.accept(); print('got', c.recv(64).decode(), flush=True); c.close()\n"
    )
    client = (
        "import socket, sys, time\n"
        "def retry(f):\n"
        "    for _ in range(300):\n"
        "        try:\n"
        "            return f()\n"
        "        except OSError:\n"
        "            time.sleep(0.1)\n"
        "    return f()\n"
        "for name in sys.argv[1:]:\n"
        "    ip = retry(lambda: socket.getaddrinfo(name, 2222))[0][4][0]\n"
        "    print(name, '->', ip, flush=True)\n"
        "for name, msg in ((sys.argv[1], b'hello over dns'), ('svc', b'hello over a service')):\n"
        "    s = retry(lambda: socket.create_connection((name, 2222), timeout=2))\n"
        "    s.sendall(msg); s.close(); time.sleep(0.5)\n"
    )
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "grp"},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app": "grp", "role": "server"},
            "ports": [{"name": "tf", "port": 2222}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {"selector": {"app": "grp", "role": "server"}, "ports": [{"port": 2222}]},
    }
    create(kj, namespace, headless, "services")
    create(kj, namespace, service, "services")
    srv = make_pod("server", ["python", "-c", server], hostname="server", subdomain="grp")
    srv["metadata"]["labels"]["role"] = "server"
    create(kj, namespace, srv)
    names = [
        f"server.grp.{namespace}.svc.cluster.local",
        f"server.grp.{namespace}.svc",
        "server.grp",
    ]
    create(kj, namespace, make_pod("client", ["python", "-c", client, *names]))
    cli = wait_phase(kj, namespace, "client", "Succeeded", "Failed", timeout=90)
    assert cli["status"]["phase"] == "Succeeded", logs(cluster, namespace, "client")
    done = wait_phase(kj, namespace, "server", "Succeeded", "Failed", timeout=30)
    assert done["status"]["phase"] == "Succeeded", logs(cluster, namespace, "server")
    server_log = logs(cluster, namespace, "server")
    assert "got hello over dns" in server_log and "got hello over a service" in server_log
    client_log = logs(cluster, namespace, "client")
    for name in names:
        assert f"{name} -> {done['status']['podIP']}" in client_log


def test_in_cluster_api_access(cluster: Cluster, kj: Kube, namespace: str) -> None:
    """A ServiceAccount token reaches the API server through the `kubernetes` Service,
    exactly as the operator's in-cluster configuration does."""
    script = (
        "import json, os, ssl, urllib.request, urllib.error\n"
        "d = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']\n"
        "ns = open(d + 'namespace').read()\n"
        "req = urllib.request.Request(f'https://{host[0]}:{host[1]}/api/v1/namespaces/{ns}/pods',\n"
        "    headers={'Authorization': 'Bearer ' + open(d + 'token').read()})\n"
        "ctx = ssl.create_default_context(cafile=d + 'ca.crt')\n"
        "try:\n"
        "    urllib.request.urlopen(req, context=ctx, timeout=10)\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(host, e.code, json.load(e)['message'])\n"
    )
    pod = make_pod("incluster", ["python", "-c", script])
    pod["spec"]["automountServiceAccountToken"] = True
    create(kj, namespace, pod)
    done = wait_phase(kj, namespace, "incluster", "Succeeded", "Failed")
    out = logs(cluster, namespace, "incluster")
    assert done["status"]["phase"] == "Succeeded", out
    # Authenticated as the Pod's ServiceAccount (and refused: it has no role to list Pods).
    assert "('10.96.0.1', '443') 403" in out, out
    assert f'"system:serviceaccount:{namespace}:default"' in out, out


def test_delete_sends_sigterm(kj: Kube, namespace: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o1777)
    serve = (
        "import signal, sys, time\n"
        "def term(*_):\n"
        "    open('/out/term', 'w').write('got SIGTERM'); sys.exit(42)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "open('/out/started', 'w').write('up')\n"
        "while True: time.sleep(1)\n"
    )
    pod = make_pod("web", ["python", "-c", serve], restartPolicy="Always")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
    pod["spec"]["volumes"] = [{"name": "out", "hostPath": {"path": str(tmp_path)}}]
    create(kj, namespace, pod)
    wait_phase(kj, namespace, "web", "Running")
    wait_for(lambda: (tmp_path / "started").exists(), timeout=30, what="the process started")
    kj.request("DELETE", pod_path(namespace, "web"))
    wait_for(lambda: kj.get(pod_path(namespace, "web")) is None, timeout=30, what="web deleted")
    assert (tmp_path / "term").read_text() == "got SIGTERM"

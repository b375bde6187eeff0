"""The local node agent against a real API server: Pods run as processes in their own
network namespaces, resolve each other by DNS name, report kubelet-like status, restart in
place, and get SIGTERM when deleted."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from typing import Any

import pytest
from kerasjob.localnode import netns
from kerasjob.localnode.kube import Kube, pod_path
from kerasjob.localnode.runner import pod_processes
from support.cluster import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def make_pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 10,
            "containers": [{"name": "main", "image": "ignored", "command": command}],
            **spec,
        },
    }


def create(kj: Kube, namespace: str, pod: dict[str, Any]) -> None:
    kj.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)


def get(kj: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kj.get(pod_path(namespace, name))


def wait_phase(kj: Kube, namespace: str, name: str, *phases: str, timeout: float = 30) -> dict:
    def done() -> dict | None:
        pod = get(kj, namespace, name)
        return pod if pod and pod.get("status", {}).get("phase") in phases else None

    return wait_for(done, timeout=timeout, interval=0.2, what=f"pod {name} in {phases}")


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]


def test_pod_runs_and_reports_its_exit(localnode, kj: Kube, namespace: str, cluster) -> None:
    script = (
        "echo pod=$POD ns=$NS ip=$IP host=$(cat /proc/sys/kernel/hostname); "
        "ls /scratch >/dev/null; echo bye > /dev/termination-log; exit 3"
    )
    pod = make_pod("runner", ["sh", "-c", script], hostname="runner", subdomain="grp")
    pod["spec"]["containers"][0]["env"] = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "s", "mountPath": "/scratch"}]
    pod["spec"]["volumes"] = [{"name": "s", "emptyDir": {}}]
    create(kj, namespace, pod)
    done = wait_phase(kj, namespace, "runner", "Failed")
    status = done["status"]
    assert done["spec"]["nodeName"] == localnode.name
    assert status["podIP"].startswith("10.213.0.") and status["hostIP"] == "10.213.0.1"
    term = container_status(done)["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["message"] == "bye"
    log = localnode.log(namespace, "runner", "main")
    assert f"pod=runner ns={namespace} ip={status['podIP']} host=runner" in log
    # `kubectl logs` goes through the API server to the agent's containerLogs endpoint.
    api_log = cluster.kubectl("logs", "-n", namespace, "runner").stdout
    assert api_log.startswith(f"pod=runner ns={namespace}")


def test_pods_talk_over_dns_names(localnode, kj: Kube, namespace: str) -> None:
    server = (
        "import socket\n"
        "s = socket.socket(); s.bind(('0.0.0.0', 2222)); s.listen()\n"
        "c, a = s.accept(); print('got', c.recv(64).decode(), flush=True)\n"
    )
    client = (
        "import socket, sys, time\n"
        "for name in sys.argv[1:]:\n"
        "    for _ in range(100):\n"
        "        try:\n"
        "            socket.getaddrinfo(name, 2222); break\n"
        "        except socket.gaierror:\n"
        "            time.sleep(0.1)\n"
        "    print(name, '->', socket.getaddrinfo(name, 2222)[0][4][0], flush=True)\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        s = socket.create_connection((sys.argv[1], 2222), timeout=2); break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
        "s.sendall(b'hello over dns')\n"
    )
    dns = dict(subdomain="grp")
    create(kj, namespace, make_pod("server", ["python", "-c", server], hostname="server", **dns))
    names = [
        f"server.grp.{namespace}.svc.cluster.local",
        f"server.grp.{namespace}.svc",
        "server.grp",
    ]
    create(
        kj,
        namespace,
        make_pod("client", ["python", "-c", client, *names], hostname="client", **dns),
    )
    wait_phase(kj, namespace, "client", "Succeeded", "Failed")
    srv = wait_phase(kj, namespace, "server", "Succeeded", "Failed")
    assert srv["status"]["phase"] == "Succeeded", localnode.log(namespace, "server", "main")
    assert "got hello over dns" in localnode.log(namespace, "server", "main")
    client_log = localnode.log(namespace, "client", "main")
    for name in names:
        assert f"{name} -> {srv['status']['podIP']}" in client_log


def test_delete_sends_sigterm_and_removes_everything(localnode, kj: Kube, namespace: str) -> None:
    serve = (
        "import signal, sys, http.server\n"
        "def term(*_):\n"
        "    print('got SIGTERM', flush=True); sys.exit(42)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "http.server.HTTPServer(('', 9464), http.server.BaseHTTPRequestHandler).serve_forever()\n"
    )
    create(kj, namespace, make_pod("web", ["python", "-c", serve], restartPolicy="Always"))
    pod = wait_phase(kj, namespace, "web", "Running")
    ip = pod["status"]["podIP"]

    def reachable() -> bool:  # the host reaches Pod IPs (the operator scrapes metrics so)
        try:
            urllib.request.urlopen(f"http://{ip}:9464/", timeout=1)
        except urllib.error.HTTPError:
            return True  # BaseHTTPRequestHandler answers 501: the server is up
        except OSError:
            return False
        return True

    wait_for(reachable, timeout=20, interval=0.2, what="the pod's HTTP port from the host")
    netns_name = netns.netns_name(namespace, "web")
    assert netns_name in netns.list_netns()
    kj.request("DELETE", pod_path(namespace, "web"))
    wait_for(lambda: get(kj, namespace, "web") is None, timeout=20, what="pod web deleted")
    assert "got SIGTERM" in localnode.log(namespace, "web", "main")
    wait_for(lambda: netns_name not in netns.list_netns(), timeout=5, what="netns removed")


def test_on_failure_restarts_in_place(localnode, kj: Kube, namespace: str) -> None:
    script = (
        "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; "
        "echo run=$n ip=$(ip -4 -o addr show eth0 | awk '{print $4}'); "
        "[ $n -ge 3 ] && exit 0; exit 1"
    )
    pod = make_pod("flaky", ["sh", "-c", script], restartPolicy="OnFailure")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "state", "mountPath": "/state"}]
    pod["spec"]["volumes"] = [{"name": "state", "emptyDir": {}}]
    create(kj, namespace, pod)
    done = wait_phase(kj, namespace, "flaky", "Succeeded", timeout=40)
    cs = container_status(done)
    assert cs["restartCount"] == 2
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["state"]["terminated"]["exitCode"] == 0
    runs = [
        line for line in localnode.log(namespace, "flaky", "main").splitlines() if "run=" in line
    ]
    assert [r.split()[0] for r in runs] == ["run=1", "run=2", "run=3"]
    assert len({r.split()[1] for r in runs}) == 1, f"IP changed across restarts: {runs}"


def test_killed_process_reports_signal(localnode, kj: Kube, namespace: str) -> None:
    create(kj, namespace, make_pod("victim", ["sleep", "300"]))
    wait_phase(kj, namespace, "victim", "Running")
    pids = wait_for(lambda: pod_processes(namespace, "victim"), timeout=10, what="pids")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    done = wait_phase(kj, namespace, "victim", "Failed")
    assert time.monotonic() - t0 < 5
    term = container_status(done)["state"]["terminated"]
    assert (term["exitCode"], term.get("signal")) == (137, 9)

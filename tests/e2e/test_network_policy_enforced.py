"""The per-job NetworkPolicy enforced by a real enforcer: Cilium (built from its Go module by
hack/cluster/cilium.sh, its agent on the real node, its CNI plugin chained after the node's
bridge plugin), under the Helm-installed operator and real training.

A TensorFlow gRPC server runs any graph any client sends it, so a worker's TF port must take
connections from its own job's Pods only. The test trains examples/mnist.yaml (its 2 workers
reach each other through the policy: training advances) and probes from a Pod of the same
namespace that is not in the job:

- the worker's TF port: refused (the connection times out: the policy drops it);
- the workers keep training through it (1,000 more steps, no restart);
- controls, so that the test fails if the enforcer drops everything or nothing: the same
  outsider reaches a bystander Pod (not in any job) listening on the same port, and reaches
  the worker once a second policy lets everything in (policies add up);
- the job's NetworkPolicy deleted: the operator makes it again and the TF port is closed to
  the outsider again.

Local cluster only (on another cluster the CNI decides whether policies are enforced).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, Cluster, wait_for
from kerasjob_dev.synckube import ApiError, Kube, pod_path
from kerasjob_dev.testing.training_run import JOBS, Run, last_step, mnist_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

CILIUM = REPO_ROOT / "hack" / "cluster" / "cilium.sh"
TF_PORT = 2222  # the KerasJob default (spec.port)
IMAGE = localdeploy.OPERATOR_IMAGE  # Debian + Python

#: Connects to each "ip:port" of argv with a 5 s timeout; prints {"ip:port": "ok"|error}.
PROBE = """
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        out[target] = "ok"
    except OSError as e:
        out[target] = type(e).__name__
print(json.dumps(out), flush=True)
"""

#: Accepts connections on the TF port forever (a bystander: the same port, in no job).
LISTEN = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {TF_PORT})); s.listen(16)
while True:
    s.accept()[0].close()
"""


@pytest.fixture(scope="module")
def cilium(cluster: Cluster, images: object) -> Iterator[None]:
    """Cilium's agent on the real node for this module; down (and the machine as it was)
    afterwards."""
    if not cluster.local:
        pytest.skip("starts Cilium on the local cluster's real node")
    t0 = time.monotonic()
    # (A cold cache builds Cilium first: about 7 min on 2 cores.)
    up = subprocess.run(
        [str(CILIUM), "up"], env=cluster.env(), capture_output=True, text=True, timeout=1800
    )
    assert up.returncode == 0, f"cilium.sh up failed:\n{up.stderr[-4000:]}"
    print(f"\nCilium up in {time.monotonic() - t0:.1f} s")
    try:
        yield
    finally:
        subprocess.run([str(CILIUM), "down"], env=cluster.env(), timeout=300, check=False)
        left = subprocess.run(
            [str(CILIUM), "leftovers"],
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert left.returncode == 0, f"cilium.sh down left: {left.stdout}"


def pod(name: str, command: list[str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
        },
    }


def pod_ip(kj: Kube, ns: str, name: str) -> str:
    def ip() -> str | None:
        p = kj.get(pod_path(ns, name)) or {}
        status = p.get("status") or {}
        return status.get("podIP") if status.get("phase") == "Running" else None

    return wait_for(ip, timeout=120, interval=0.5, what=f"{name} Running with an IP")


def probe(kj: Kube, ns: str, name: str, targets: list[str]) -> dict[str, str]:
    """Run the outsider Pod ``name`` (labels of no job) probing ``targets``; its verdicts."""
    kj.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        body=pod(name, ["python3", "-c", PROBE, *targets], {"app": "outsider"}),
    )

    def done() -> dict[str, str] | None:
        p = kj.get(pod_path(ns, name)) or {}
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            return None
        lines = [ln for ln in kj.pod_log(ns, name, "main").splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else None

    try:
        return wait_for(done, timeout=120, interval=0.5, what=f"{name}'s probe")
    except TimeoutError as e:
        status = (kj.get(pod_path(ns, name)) or {}).get("status")
        log = kj.pod_log(ns, name, "main")[-2000:]
        raise TimeoutError(f"{e}\nstatus: {status}\nlog: {log}") from None


def open_policy(name: str, job: str) -> dict[str, Any]:
    """A NetworkPolicy that lets any ingress to the job's Pods (the control)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": {"kerasjob.dev/job-name": job}},
            "policyTypes": ["Ingress"],
            "ingress": [{}],
        },
    }


def test_a_workers_tf_port_takes_connections_from_its_own_job_only(
    cilium: None, deployment: Any, tmp_path: Path
) -> None:
    kj, ns = deployment.kube, deployment.namespace
    run = Run(deployment, "iso", tmp_path)
    try:
        run.make_claim()
        # Long enough to probe while it trains (deleted at the end).
        kj.request(
            "POST",
            JOBS.format(ns=ns),
            body=mnist_job(run.name, run.claim, epochs=50, stepsPerEpoch=100),
        )
        kj.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            body=pod("bystander", ["python3", "-c", LISTEN], {"app": "bystander"}),
        )
        policy = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{run.name}"
        wait_for(lambda: kj.get(policy), timeout=60, interval=0.5, what="the job's NetworkPolicy")
        chief = f"{run.name}-worker-0"
        # The workers reach each other's TF ports through the policy: training advances.
        try:
            wait_for(
                lambda: last_step(run.log(chief)) >= 20,
                timeout=300,
                interval=1,
                what="the chief past step 20 (its peer connected)",
            )
        except TimeoutError:
            print(run.status(), run.log(chief)[-3000:], deployment.operator_logs(), sep="\n")
            raise
        workers = {i: pod_ip(kj, ns, f"{run.name}-worker-{i}") for i in (0, 1)}
        bystander = pod_ip(kj, ns, "bystander")
        targets = [f"{workers[0]}:{TF_PORT}", f"{workers[1]}:{TF_PORT}", f"{bystander}:{TF_PORT}"]

        verdict = probe(kj, ns, "outsider-1", targets)
        print(f"\nwith the job's NetworkPolicy: {verdict}")
        assert verdict[targets[2]] == "ok", f"the outsider cannot reach anything: {verdict}"
        assert verdict[targets[0]] != "ok" and verdict[targets[1]] != "ok", (
            f"a worker's TF port took a connection from outside its job: {verdict}"
        )
        # The job's own traffic keeps flowing under the policy: 1,000 more steps, no restart.
        step_before = last_step(run.log(chief))
        wait_for(
            lambda: last_step(run.log(chief)) >= step_before + 1000,
            timeout=300,
            interval=1,
            what="1,000 more steps under the policy",
        )
        restarts = run.status().get("restarts") or {}
        assert not restarts.get("disruptions") and not restarts.get("failures"), restarts
        step_before = last_step(run.log(chief))

        # Control: a second policy that lets everything in (policies add up) opens the
        # workers, else the enforcer, not the job's policy, dropped the connections. (The
        # job's own policy cannot be deleted for that: the operator makes it again.)
        policies = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
        kj.request("POST", policies, body=open_policy(f"open-{run.name}", run.name))
        time.sleep(3)  # the agent recomputes the workers' policy
        verdict = probe(kj, ns, "outsider-2", targets)
        print(f"with an allow-all policy beside it: {verdict}")
        assert verdict == dict.fromkeys(targets, "ok"), (
            f"let in by a policy, the workers must be reachable (else the enforcer, not the "
            f"policy, dropped the connections): {verdict}"
        )
        kj.request("DELETE", f"{policies}/open-{run.name}")
        # The job's policy deleted (a clean-up, a GitOps prune): made again (issue 36), and
        # the workers closed to outsiders again.
        old_uid = (kj.get(policy) or {})["metadata"]["uid"]
        kj.request("DELETE", policy)
        wait_for(
            lambda: (made := kj.get(policy)) and made["metadata"]["uid"] != old_uid,
            timeout=30,
            interval=0.2,
            what="the job's NetworkPolicy made again",
        )
        time.sleep(3)  # the agent recomputes the workers' policy
        verdict = probe(kj, ns, "outsider-3", targets)
        print(f"its NetworkPolicy deleted and made again: {verdict}")
        assert verdict[targets[0]] != "ok" and verdict[targets[1]] != "ok", (
            f"a worker's TF port took a connection after its policy came back: {verdict}"
        )
        # And training went on all along.
        assert last_step(run.log(chief)) > step_before
        restarts = run.status().get("restarts") or {}
        assert not restarts.get("disruptions") and not restarts.get("failures"), restarts
    finally:
        mine = (
            "bystander",
            "outsider-1",
            "outsider-2",
            "outsider-3",
            f"{run.name}-worker-0",
            f"{run.name}-worker-1",
        )
        for name in mine[:4]:
            with contextlib.suppress(ApiError):
                kj.request("DELETE", pod_path(ns, name))
        run.cleanup()
        # Gone before Cilium goes down (their teardown still asks its CNI plugin).
        wait_for(
            lambda: not any(kj.get(pod_path(ns, n)) for n in mine),
            timeout=120,
            interval=0.5,
            what="the test's Pods deleted",
        )

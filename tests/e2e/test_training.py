"""Real training under the real operator: examples/mnist.yaml (2 workers, 300 steps, a backup
every 50) survives an eviction and a SIGKILLed worker, resumes from the backup, and ends with
exactly the configured number of steps.

On the local control plane the Pods run on the local node agent; with
KERASJOB_TEST_CLUSTER=current (e.g. hack/kind/e2e.sh) on the cluster's own nodes, with
checkpoints on a claim of KERASJOB_TEST_STORAGE_CLASS and logs read through the API (the
SIGKILL test needs the local node)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kerasjob.localnode.kube import Kube, pod_path
from kerasjob.localnode.runner import pod_processes
from support.cluster import REPO_ROOT, Cluster, wait_for
from support.operator import shared_operator

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

STEP = re.compile(r"^kerasjob: step (\d+)/(\d+)", re.M)
RESUMED = re.compile(r"^kerasjob: resumed at step (\d+)", re.M)
FINAL = re.compile(r"^kerasjob: final (?:test_accuracy=([\d.]+) )?steps=(\d+)", re.M)
JOBS = "/apis/kerasjob.dev/v1alpha1/namespaces/{ns}/kerasjobs"


class Env:
    """Where the job runs: the local node (logs and checkpoints are files on this machine) or
    the cluster of KUBECONFIG (KERASJOB_TEST_CLUSTER=current: logs through the API, checkpoints
    on a claim of the ReadWriteMany class named by KERASJOB_TEST_STORAGE_CLASS)."""

    def __init__(self, kj: Kube, localnode: Any | None, tmp_path: Path) -> None:
        self.kj, self.localnode, self.tmp_path = kj, localnode, tmp_path
        self.ckpt = tmp_path / "ckpt"

    def log(self, ns: str, pod: str) -> str:
        if self.localnode is not None:
            return self.localnode.log(ns, pod)
        try:
            resp = self.kj.pool.request(
                "GET",
                f"{self.kj.base}{pod_path(ns, pod, 'log')}?container=trainer",
                headers={**self.kj.headers, "Accept": "*/*"},
                timeout=10,
            )
        except OSError:
            return ""
        return resp.data.decode(errors="replace") if resp.status == 200 else ""

    def checkpoint_volume(self, ns: str) -> dict[str, Any]:
        if self.localnode is not None:
            return {"hostPath": {"path": str(self.ckpt), "type": "DirectoryOrCreate"}}
        storage_class = os.environ.get("KERASJOB_TEST_STORAGE_CLASS")
        if not storage_class:
            pytest.skip("KERASJOB_TEST_STORAGE_CLASS (a ReadWriteMany class) is not set")
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "ckpt"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        self.kj.request("POST", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", body=claim)
        return {"persistentVolumeClaim": {"claimName": "ckpt"}}

    def progress_files(self) -> list[dict[str, Any]] | None:
        """progress.json files the chief wrote (None: not readable from here)."""
        if self.localnode is None:
            return None
        return [json.loads(p.read_text()) for p in self.ckpt.rglob("progress.json")]


@pytest.fixture
def env(request: pytest.FixtureRequest, cluster: Cluster, kj: Kube, tmp_path: Path) -> Env:
    localnode = request.getfixturevalue("localnode") if cluster.local else None
    return Env(kj, localnode, tmp_path)


def mnist_job(name: str, volume: dict[str, Any]) -> dict[str, Any]:
    """examples/mnist.yaml, with its checkpoint volume replaced by `volume`."""
    job = yaml.safe_load((REPO_ROOT / "examples" / "mnist.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"] = volume
    job["spec"].pop("ttlSecondsAfterFinished", None)  # keep it for the assertions
    return job


@pytest.fixture
def operator(cluster: Cluster):
    return shared_operator(cluster)


def job_status(kj: Kube, ns: str, name: str) -> dict[str, Any]:
    return (kj.get(f"{JOBS.format(ns=ns)}/{name}") or {}).get("status") or {}


def last_step(text: str) -> int:
    steps = STEP.findall(text)
    return int(steps[-1][0]) if steps else 0


def run_and_disrupt(env: Env, ns: str, disrupt: Callable[[], None]) -> dict[str, Any]:
    """Start the job, call `disrupt()` once the chief is past step 100 (two backups made),
    wait for Succeeded; return what the assertions need.

    Before the disruption no worker has resumed (first runs log "starting at step 0"), so
    every "resumed at step" line is a resume from the disruption.
    """
    name, kj = "mnist", env.kj
    slow = env.localnode is None  # a remote cluster may pull images, schedule slowly ...
    kj.request("POST", JOBS.format(ns=ns), body=mnist_job(name, env.checkpoint_volume(ns)))
    workers = (f"{name}-worker-0", f"{name}-worker-1")
    chief = workers[0]
    wait_for(
        lambda: last_step(env.log(ns, chief)) >= 100,
        timeout=900 if slow else 180,
        interval=0.1,
        what="the chief to pass step 100",
    )
    step_at_disruption = last_step(env.log(ns, chief))
    t0 = time.monotonic()
    disrupt()

    def resumed() -> float | None:
        any_resumed = any(RESUMED.search(env.log(ns, p)) for p in workers)
        return time.monotonic() - t0 if any_resumed else None

    recovery_s = wait_for(resumed, timeout=600 if slow else 120, interval=0.2, what="a resume")

    def finished() -> dict[str, Any] | None:
        status = job_status(kj, ns, name)
        if status.get("phase") == "Failed":
            raise AssertionError(f"job failed: {status}")
        return status if status.get("phase") == "Succeeded" else None

    status = wait_for(finished, timeout=900 if slow else 240, interval=0.5, what="Succeeded")
    final = wait_for(lambda: FINAL.findall(env.log(ns, chief)), timeout=30, what="final line")
    resumed_at = [int(s) for p in workers for s in RESUMED.findall(env.log(ns, p))]
    print(
        f"disrupted at step {step_at_disruption}, resumed at {sorted(set(resumed_at))} "
        f"after {recovery_s:.1f}s; restarts {status.get('restarts')}; final {final}"
    )
    return {
        "status": status,
        "final": final,
        "resumed_at": resumed_at,
        "step_at_disruption": step_at_disruption,
        "progress": env.progress_files(),
    }


def assert_exact_resume(result: dict[str, Any], save_freq: int = 50, total: int = 300) -> None:
    assert result["final"], "the chief printed no final line"
    accuracy, steps = result["final"][-1]
    assert int(steps) == total, f"final step count {steps} != {total}"
    assert accuracy and float(accuracy) >= 0.85
    assert result["resumed_at"], "no worker resumed from the backup"
    for step in result["resumed_at"]:
        # From a BackupAndRestore backup (a multiple of saveFreq) or from the state saved at
        # SIGTERM; never from scratch and never past the disruption.
        assert 0 < step <= result["step_at_disruption"] + save_freq
    if result["progress"] is not None:  # the chief's progress.json on the checkpoint volume
        assert any(p.get("step") == total for p in result["progress"]), result["progress"]
    restarts = result["status"].get("restarts") or {}
    assert restarts.get("disruptions", 0) >= 1 and restarts.get("failures", 0) == 0, restarts


def test_eviction_resumes_from_backup(env: Env, operator, namespace: str) -> None:
    def evict() -> None:
        pod = "mnist-worker-1"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        env.kj.request("POST", pod_path(namespace, pod, "eviction"), body=body)

    assert_exact_resume(run_and_disrupt(env, namespace, evict))


def test_sigkilled_worker_resumes_from_backup(env: Env, operator, namespace: str) -> None:
    if env.localnode is None:
        pytest.skip("SIGKILLs the worker's process from the host: local node only")

    def sigkill() -> None:
        pids = pod_processes(namespace, "mnist-worker-1")
        assert pids, "worker 1 has no process"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    assert_exact_resume(run_and_disrupt(env, namespace, sigkill))

"""Real training under the real operator on the local node: examples/mnist.yaml (2 workers,
300 steps, a backup every 50) survives an eviction and a SIGKILLed worker, resumes from the
backup, and ends with exactly the configured number of steps."""

from __future__ import annotations

import json
import os
import re
import signal
import time
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


def mnist_job(name: str, checkpoint_dir: Path) -> dict[str, Any]:
    """examples/mnist.yaml with its checkpoint volume on a directory of this machine."""
    job = yaml.safe_load((REPO_ROOT / "examples" / "mnist.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"] = {
        "hostPath": {"path": str(checkpoint_dir), "type": "DirectoryOrCreate"}
    }
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


def run_and_disrupt(localnode, kj: Kube, ns: str, tmp_path: Path, disrupt) -> dict[str, Any]:
    """Start the job, call `disrupt()` once the chief is past step 100 (two backups made),
    wait for Succeeded; return what the assertions need."""
    name = "mnist"
    ckpt = tmp_path / "ckpt"
    kj.request("POST", JOBS.format(ns=ns), body=mnist_job(name, ckpt))
    chief = f"{name}-worker-0"
    wait_for(
        lambda: last_step(localnode.log(ns, chief)) >= 100,
        timeout=180,
        interval=0.1,
        what="the chief to pass step 100",
    )
    offsets = {p: len(localnode.log(ns, p)) for p in (chief, f"{name}-worker-1")}
    step_at_disruption = last_step(localnode.log(ns, chief))
    t0 = time.monotonic()
    disrupt()

    def resumed() -> float | None:
        after = [localnode.log(ns, p)[o:] for p, o in offsets.items()]
        return time.monotonic() - t0 if any(RESUMED.search(a) for a in after) else None

    recovery_s = wait_for(resumed, timeout=120, interval=0.1, what="training to resume")

    def finished() -> dict[str, Any] | None:
        status = job_status(kj, ns, name)
        if status.get("phase") == "Failed":
            raise AssertionError(f"job failed: {status}")
        return status if status.get("phase") == "Succeeded" else None

    status = wait_for(finished, timeout=240, interval=0.5, what="the job to succeed")
    chief_log = localnode.log(ns, chief)
    final = FINAL.findall(chief_log)
    resumed_at = [
        int(s) for p, o in offsets.items() for s in RESUMED.findall(localnode.log(ns, p)[o:])
    ]
    progress = [json.loads(p.read_text()) for p in ckpt.rglob("progress.json")]
    print(
        f"disrupted at step {step_at_disruption}, resumed at {sorted(set(resumed_at))} "
        f"after {recovery_s:.1f}s; restarts {status.get('restarts')}; final {final}"
    )
    return {
        "status": status,
        "final": final,
        "resumed_at": resumed_at,
        "step_at_disruption": step_at_disruption,
        "progress": progress,
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
    assert any(p.get("step") == total for p in result["progress"]), result["progress"]
    restarts = result["status"].get("restarts") or {}
    assert restarts.get("disruptions", 0) >= 1 and restarts.get("failures", 0) == 0, restarts


def test_eviction_resumes_from_backup(localnode, operator, kj: Kube, namespace: str, tmp_path):
    def evict() -> None:
        pod = "mnist-worker-1"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        kj.request("POST", pod_path(namespace, pod, "eviction"), body=body)

    assert_exact_resume(run_and_disrupt(localnode, kj, namespace, tmp_path, evict))


def test_sigkilled_worker_resumes_from_backup(
    localnode, operator, kj: Kube, namespace: str, tmp_path
):
    def sigkill() -> None:
        pids = pod_processes(namespace, "mnist-worker-1")
        assert pids, "worker 1 has no process"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    assert_exact_resume(run_and_disrupt(localnode, kj, namespace, tmp_path, sigkill))

"""Values only the trainer can check, as a user meets them on the real node: each job fails
at once (one failure, no retry) as InvalidConfig, and the trainer's one-line reason is in
the Failed condition, the Warning event and `kubectl describe kerasjob`.

Three jobs at once, each a user's mistake seen by an independent run (2026-12-07):
- a Keras 3 mesh that needs more devices than the job has (no devicesPerProcess, so the API
  server cannot know);
- the KerasHub example with its mesh axes named `data` x `tensor` (its layout shards on
  `batch` and `model`): was AttributeError, exit 1, retried to BackoffLimitExceeded;
- a tf-keras job whose template also mounts the checkpoint claim read-only (for data): the
  checkpoint directory is then read-only: was `[Errno 30]`, exit 1, retried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev.cluster import wait_for
from kerasjob_dev.testing.training_run import JOBS, Run, mnist_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]


def _mesh_too_big(run: Run) -> dict[str, Any]:
    job = mnist_job(run.name, run.claim, "keras3-jax.yaml")
    job["spec"]["workers"] = 1
    job["spec"]["trainer"]["mesh"] = [{"name": "batch", "size": 1}, {"name": "model", "size": 4}]
    return job


def _hub_axes(run: Run) -> dict[str, Any]:
    job = mnist_job(run.name, run.claim, "keras3-hub-lora.yaml")
    job["spec"]["trainer"]["mesh"] = [{"name": "data", "size": 2}, {"name": "tensor", "size": 2}]
    return job


def _read_only_checkpoint(run: Run) -> dict[str, Any]:
    job = mnist_job(run.name, run.claim, "mnist.yaml")
    pod = job["spec"]["template"]["spec"]
    pod.setdefault("volumes", []).append(
        {"name": "data", "persistentVolumeClaim": {"claimName": run.claim, "readOnly": True}}
    )
    pod["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "data", "mountPath": "/data", "readOnly": True}
    )
    return job


#: name -> (the job, words its reason must have)
CASES = {
    "mesh-devices": (_mesh_too_big, ["needs 4 devices", "1 device"]),
    "hub-axes": (_hub_axes, ["'data'", "'tensor'", "'batch'", "'model'"]),
    "ro-ckpt": (_read_only_checkpoint, ["checkpoint", "Read-only file system"]),
}


@pytest.fixture
def runs(deployment: Any, tmp_path: Path):  # type: ignore[no-untyped-def]
    made = {name: Run(deployment, name, tmp_path / name) for name in CASES}
    try:
        yield made
    finally:
        for r in made.values():
            r.cleanup()


def _events(run: Run, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={run.name},involvedObject.kind=KerasJob,reason={reason}"
    path = f"/api/v1/namespaces/{run.ns}/events"
    return run.kj.request("GET", path, query={"fieldSelector": selector})["items"]  # type: ignore[no-any-return]


def _failed(run: Run) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        status = run.status()
        return status if status.get("phase") == "Failed" else None

    return wait_for(failed, timeout=600, interval=1, what=f"{run.name} to fail")  # type: ignore[no-any-return]


def test_exit_78_reasons_reach_the_condition_the_event_and_describe(
    deployment: Any, runs: dict[str, Run]
) -> None:
    if not deployment.cluster.local:
        pytest.skip("the reasons are the trainer's and the operator's: the local node covers them")
    for name, (make, _) in CASES.items():
        run = runs[name]
        run.tmp_path.mkdir(parents=True, exist_ok=True)
        run.make_claim()
        run.kj.request("POST", JOBS.format(ns=run.ns), body=make(run))
    for name, (_, words) in CASES.items():
        run = runs[name]
        status = _failed(run)
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        message = failed["message"]
        assert failed["reason"] == "InvalidConfig", (name, failed)
        assert "exited with 78: invalid configuration: " in message, (name, message)
        assert all(w in message for w in words), (name, words, message)
        assert status["restarts"]["failures"] == 1, (name, status["restarts"])
        events = wait_for(
            lambda run=run: _events(run, "InvalidConfig"),
            timeout=30,
            what=f"{name}'s InvalidConfig event",
        )
        assert [(e["type"], e["message"]) for e in events] == [("Warning", message)], name
        described = deployment.cluster.kubectl("describe", "kerasjob", "-n", run.ns, run.name)
        assert words[0] in described.stdout, (name, described.stdout[-2000:])
        print(f"\n{name}: {message}")

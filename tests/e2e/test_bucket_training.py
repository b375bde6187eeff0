"""Checkpoints in a bucket on the real node: examples/mnist.yaml (2 workers, 300 steps, a
backup every 50) with `spec.checkpoint.location: s3://...` on versitygw (a real S3 gateway
built from its Go module, listening on the node's address so the Pods reach it), the S3 keys
from a Secret the job names, and no volume at all: each Pod's checkpoint directory is its own
emptyDir, the backups are committed to the bucket.

Through an eviction of worker 1 and then a SIGKILL of worker 1's container, the job
resumes each time at a committed backup step (never from scratch, never past the
disruption), counts 2 disruptions and no failure, and ends Succeeded with exactly 300
steps. The job's objects live under `<location>/<namespace>/<name>/<uid>/`, with a fence
per incarnation of the group.

Local cluster only: kind's nodes cannot reach a server on this machine's loopback or
bridge."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import wait_for
from kerasjob_dev.objectstores import Stores
from kerasjob_dev.synckube import ApiError, pod_path
from kerasjob_dev.testing.training_run import (
    FINAL,
    JOBS,
    RESUMED,
    bucket_job,
    last_step,
    mnist_job,
)

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

NAME = "mnist-bucket"
PREFIX = "e2e"
TOTAL, SAVE_FREQ = 300, 50


@pytest.fixture
def job(deployment: Any, node_stores: Stores) -> Iterator[dict[str, Any]]:
    kj, ns = deployment.kube, deployment.namespace
    body = mnist_job(NAME, "unused")
    secret = bucket_job(body, node_stores, kj, ns, PREFIX)
    try:
        yield body
    finally:
        for path in (f"{JOBS.format(ns=ns)}/{NAME}", f"/api/v1/namespaces/{ns}/secrets/{secret}"):
            with contextlib.suppress(ApiError):
                kj.request("DELETE", path)


def _past(log: Any, pod: str, step: int, what: str) -> None:
    wait_for(lambda: last_step(log(pod)) >= step, timeout=300, interval=0.3, what=what)


def test_a_job_on_s3_resumes_from_the_bucket_after_an_eviction_and_a_sigkill(
    deployment: Any, node_stores: Stores, job: dict[str, Any]
) -> None:
    kj, ns = deployment.kube, deployment.namespace
    chief, victim = f"{NAME}-worker-0", f"{NAME}-worker-1"

    def log(pod: str) -> str:
        return kj.pod_log(ns, pod)

    def status() -> dict[str, Any]:
        return (kj.get(f"{JOBS.format(ns=ns)}/{NAME}") or {}).get("status") or {}

    created = kj.request("POST", JOBS.format(ns=ns), body=job)
    uid = created["metadata"]["uid"]
    try:
        _past(log, chief, 100, "the chief past step 100")
    except TimeoutError:
        print(status(), log(chief)[-3000:], deployment.operator_logs(), sep="\n")
        raise
    pods = [kj.get(pod_path(ns, p)) or {} for p in (chief, victim)]
    for pod in pods:  # no claim anywhere: the checkpoint directory is the Pod's own
        volumes = pod["spec"].get("volumes") or []
        assert not [v for v in volumes if "persistentVolumeClaim" in v], volumes
    disrupted_at = [last_step(log(chief))]
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim}}
    kj.request("POST", pod_path(ns, victim, "eviction"), body=body)
    wait_for(lambda: RESUMED.search(log(victim)), timeout=180, interval=0.3, what="a resume")
    resumed = int(RESUMED.findall(log(victim))[-1])
    _past(log, chief, resumed + 60, f"the chief past step {resumed + 60}")

    disrupted_at.append(last_step(log(chief)))
    before = kj.get(pod_path(ns, victim)) or {}
    cid = localdeploy.container_id(before)
    assert cid, f"worker 1 has no running container: {before.get('status')}"
    localdeploy.kill_container(cid, "SIGKILL")

    def finished() -> dict[str, Any] | None:
        s = status()
        if s.get("phase") == "Failed":
            raise AssertionError(f"job failed: {s}")
        return s if s.get("phase") == "Succeeded" else None

    t0 = time.monotonic()
    try:
        final_status = wait_for(finished, timeout=400, interval=0.5, what="Succeeded")
    except (TimeoutError, AssertionError):
        print(status(), log(chief)[-4000:], deployment.operator_logs(), sep="\n")
        raise
    print(f"Succeeded {time.monotonic() - t0:.1f} s after the SIGKILL")
    chief_log = log(chief)
    final = FINAL.findall(chief_log)
    assert final and int(final[-1][1]) == TOTAL, chief_log[-3000:]
    resumes = [int(s) for p in (chief, victim) for s in RESUMED.findall(log(p))]
    assert resumes, chief_log[-3000:]
    for step in resumes:  # from a committed backup (the SIGTERM's or a periodic one)
        assert 0 < step <= max(disrupted_at) + SAVE_FREQ, resumes
    assert final_status.get("restarts") == {"disruptions": 2, "failures": 0}, final_status
    assert f"s3://{node_stores.bucket}/{PREFIX}/{ns}/{NAME}/{uid}" in chief_log, chief_log[-3000:]
    keys = _keys(node_stores, f"{PREFIX}/{ns}/{NAME}/{uid}/")
    assert [k for k in keys if "/fences/" in k], keys


def _keys(stores: Stores, prefix: str) -> list[str]:
    """The bucket's keys under `prefix`, listed with the trainer's own S3 client."""
    from kerasjob_trainer.shared.objectstore import Location, open_store

    store = open_store(
        Location.parse(f"s3://{stores.bucket}"),
        endpoint=stores.s3_endpoint,
        path_style=True,
        env=stores.env,
    )
    return store.list(prefix)

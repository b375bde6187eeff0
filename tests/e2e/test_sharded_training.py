"""A sharded model on the real node: examples/keras3-hub-lora.yaml (a Gemma-architecture
KerasHub causal LM with LoRA, ModelParallel over mesh batch=2 x model=2 on 2 Pods x 2 CPU
devices, the Keras 3 image) as a user applies it, shortened; worker 1 is evicted after the
first backup. Both processes stop at the step JAX's preemption sync point agrees on, save
their shards there and exit 42; the chief restarts in place (its container's log holds both
incarnations), worker 1's Pod is re-created, and the job resumes at exactly the saved step
(nothing redone) and ends Succeeded with the configured steps and one disruption counted.

On the local cluster the job has no volume: its backups are in gs:// (fake-gcs-server on the
node's address, `spec.checkpoint.location`; Orbax writes every process's shards there) and
its data are the example's byte windows as ArrayRecord files in a directory of this machine,
mounted read-only at /data (`spec.trainer.dataset: {source: path, format: arrayrecord}`,
read through Grain). On another cluster (kind) the job keeps its backups on a ReadWriteMany
claim and the example feeds its own in-memory windows (through Grain too)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kerasjob_contract as contract
from kerasjob_dev.cluster import wait_for
from kerasjob_dev.objectstores import Stores
from kerasjob_dev.synckube import pod_path
from kerasjob_dev.testing.training_run import FINAL, JOBS, RESUMED, Run, last_step, mnist_job
from kerasjob_trainer.examples import keras_hub_lora

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = "keras3-hub-lora.yaml"
SAVE_FREQ = 10
#: Enough steps past the eviction for the group to agree on a stop (the Keras 3 MNIST test
#: once took 81 steps to agree, 2026-11-26) and few enough to keep `make test` short.
EPOCHS, STEPS_PER_EPOCH = 2, 100
TOTAL = EPOCHS * STEPS_PER_EPOCH
DATA = "hub-lora-data"  # the data files' directory on the checkpoint volume
PREEMPTED = re.compile(contract.LOG_PREEMPTED_RE, re.M)
DISRUPTION = re.compile(contract.LOG_DISRUPTION_RE, re.M)


@pytest.fixture
def run(deployment: Any, tmp_path: Path) -> Iterator[Run]:
    r = Run(deployment, "hub-lora-evict", tmp_path)
    try:
        yield r
    finally:
        r.cleanup()


def _job(run: Run, stores: Stores | None) -> dict[str, Any]:
    """The example, shortened. With `stores` (the local cluster): its backups in gs:// on
    fake-gcs-server and its data files in a directory of this machine mounted read-only at
    /data (beside the checkpoint, as the Grain docs say); else on the claim, with the
    example's own in-memory windows."""
    job = mnist_job(run.name, run.claim, EXAMPLE, epochs=EPOCHS, stepsPerEpoch=STEPS_PER_EPOCH)
    checkpoint = job["spec"]["checkpoint"]
    checkpoint["saveFreq"] = SAVE_FREQ
    if stores is not None:
        data = run.tmp_path / "data"
        keras_hub_lora.write_dataset(str(data / DATA))
        for path in (data, *data.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        job["spec"]["checkpoint"] = {
            "location": f"gs://{stores.bucket}/e2e",
            "endpoint": stores.gcs_endpoint,
            "saveFreq": SAVE_FREQ,
        }
        pod = job["spec"]["template"]["spec"]
        pod["volumes"] = [{"name": "data", "hostPath": {"path": str(data), "type": "Directory"}}]
        mount = {"name": "data", "mountPath": "/data", "readOnly": True}
        pod["containers"][0].setdefault("volumeMounts", []).append(mount)
        dataset = {"source": "path", "path": f"/data/{DATA}", "format": "arrayrecord"}
        job["spec"]["trainer"]["dataset"] = dataset
    assert [a["size"] for a in job["spec"]["trainer"]["mesh"]] == [2, 2], job["spec"]
    return job


def _evict(run: Run, pod: str) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": run.ns},
    }
    run.kj.request("POST", pod_path(run.ns, pod, "eviction"), body=body)


def _succeeded(run: Run, timeout: float) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        status = run.status()
        if status.get("phase") == "Failed":
            raise AssertionError(f"job failed: {status}")
        return status if status.get("phase") == "Succeeded" else None

    try:
        return wait_for(finished, timeout=timeout, interval=0.5, what="Succeeded")
    except (TimeoutError, AssertionError):
        print(run.status(), run.dep.operator_logs(), sep="\n")
        raise


def test_the_sharded_keras_hub_lora_resumes_at_the_saved_step_after_an_eviction(
    run: Run, request: pytest.FixtureRequest
) -> None:
    slow = not run.dep.cluster.local  # a remote cluster may schedule and start slowly
    chief = f"{run.name}-worker-0"
    stores = request.getfixturevalue("node_stores") if run.dep.cluster.local else None
    if stores is None:
        run.make_claim()
    run.kj.request("POST", JOBS.format(ns=run.ns), body=_job(run, stores))
    try:  # past the first backup (step SAVE_FREQ): the next step line is the one after it
        wait_for(
            lambda: last_step(run.log(chief)) > SAVE_FREQ,
            timeout=1200 if slow else 600,
            interval=0.5,
            what=f"the chief past step {SAVE_FREQ}",
        )
    except TimeoutError:
        print(run.status(), run.log(chief)[-3000:], run.dep.operator_logs(), sep="\n")
        raise
    evicted_after = last_step(run.log(chief))
    _evict(run, f"{run.name}-worker-1")
    status = _succeeded(run, 1200 if slow else 600)
    log = wait_for(
        lambda: (text := run.log(chief)) and FINAL.search(text) and text,
        timeout=60,
        interval=1,
        what="the chief's final line",
    )
    assert "mesh batch=2 x model=2 (ModelParallel, batch axis 'batch')" in log, log[-3000:]
    if stores is not None:  # both incarnations of the chief read the files the test wrote
        read = re.findall(
            rf"^kerasjob: dataset \S+/{DATA}: (\d+) examples in ArrayRecord", log, re.M
        )
        windows = len(keras_hub_lora.byte_windows(keras_hub_lora.SEQUENCE)[1])
        assert read == [str(windows)] * 2, read
    saved = [int(s) for s in PREEMPTED.findall(log)]
    resumed = [int(s) for s in RESUMED.findall(log)]
    print(
        f"evicted after step {evicted_after}, saved at {saved}, resumed at {resumed}; "
        f"restarts {status.get('restarts')}"
    )
    assert len(saved) == 1 and evicted_after <= saved[0] < TOTAL, log[-3000:]
    assert resumed == saved, log[-3000:]  # at exactly the step saved at the agreed stop
    (line,) = DISRUPTION.findall(log)  # the chief's goodput ledger: nothing redone
    cause, last, resumed_step, redone = line[1], int(line[2]), int(line[4]), int(line[6])
    assert (cause, redone) == ("preempted", 0) and last == resumed_step == saved[0], line
    assert [int(s) for _, s in FINAL.findall(log)] == [TOTAL], log[-3000:]
    assert status["restarts"] == {"disruptions": 1, "failures": 0}, status
    if stores is not None:  # the backups were the bucket's: the job's own prefix there
        assert f"gs://{stores.bucket}/e2e/{run.ns}/{run.name}/" in log, log[-3000:]

"""A Kubeflow TFJob, converted, trains: `kerasjob convert` of tests/data/tfjobs/simple.yaml
(Kubeflow's 2-worker mnist example) run under the Helm-installed operator on the real node.

The TFJob's image (docker.io/kubeflowkatib/tf-mnist-with-summaries:latest) cannot be pulled
here; examples/tfjob-mnist plays it (a plain TensorFlow MWMS program at the same path, with
the same arguments, nothing of kerasjob in it), imported into the node under the TFJob's
exact image name. The converted KerasJob is applied as `kerasjob convert` wrote it but for:

* the checkpoint claim, named with `--checkpoint-claim` (a hostPath-backed ReadWriteMany
  claim of the local node);
* the namespace: the TFJob's `kubeflow` -> the one the test's operator watches;
* ``imagePullPolicy: IfNotPresent``: an image tagged ``:latest`` defaults to Always, which an
  air-gapped node cannot do;
* ``securityContext.runAsNonRoot: false``: the image runs as root, which KerasJob Pods
  refuse by default (what the converter's warning says to do).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob.cli import app as cli
from kerasjob.sdk import KerasJobClient
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

TFJOB = REPO_ROOT / "tests" / "data" / "tfjobs" / "simple.yaml"
CLAIM = "tfjob-ckpt"
MIN_TEST_ACCURACY = 0.8  # one epoch (62 steps) of a small CNN: ~0.9 (0.7 train accuracy)
TASK = re.compile(
    r"^\[(\S+)-worker-(\d)\] mnist: task worker/(\d) of (.+); "
    r"replicas in sync: (\d+)$"
)
TRAINED = re.compile(
    r"^\[\S+-worker-(\d)\] mnist: trained 1 epoch\(s\), (\d+) steps of "
    r"(\d+) examples"
)
ACCURACY = re.compile(r"^\[\S+-worker-(\d)\] mnist: test loss [\d.]+, test accuracy ([\d.]+)$")
SUMMARIES = re.compile(r"^\[\S+-worker-0\] mnist: TensorBoard summaries: (\d+) event file")


def _matches(lines: list[str], regex: re.Pattern[str]) -> list[tuple[str, ...]]:
    return [m.groups() for ln in lines if (m := regex.match(ln))]


def _convert(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """`kerasjob convert --checkpoint-claim CLAIM simple.yaml`: the job and the warnings."""
    capsys.readouterr()
    assert cli.main(["convert", str(TFJOB), "--checkpoint-claim", CLAIM]) == 0
    out = capsys.readouterr()
    (job,) = [d for d in yaml.safe_load_all(out.out) if d]
    return job, out.err


def test_converted_kubeflow_mnist_tfjob_trains(
    deployment: Any,
    images: localdeploy.Images | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not deployment.cluster.local or images is None:
        pytest.skip(
            "loads the stand-in image into the local real node and binds the "
            "checkpoint claim to its hostPath"
        )
    tfjob = yaml.safe_load(TFJOB.read_text())
    (tf_container,) = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    job, warnings = _convert(capsys)
    name = job["metadata"]["name"]
    (trainer,) = job["spec"]["template"]["spec"]["containers"]
    # What the converter carried over: two workers, the user's image and command as is.
    assert job["spec"]["workers"] == 2
    assert trainer["name"] == "trainer"
    assert trainer["image"] == tf_container["image"]
    assert trainer["command"] == tf_container["command"]
    assert job["spec"]["checkpoint"]["volume"]["persistentVolumeClaim"]["claimName"] == CLAIM
    assert "runAsNonRoot: false" in warnings, warnings

    # The stand-in, under the TFJob's image name, on the node.
    localdeploy.load_archives([images.examples[localdeploy.TFJOB_MNIST_IMAGE]])
    localdeploy.tag_image(localdeploy.TFJOB_MNIST_IMAGE, trainer["image"])
    kj, ns = deployment.kube, deployment.namespace
    job["metadata"]["namespace"] = ns
    trainer["imagePullPolicy"] = "IfNotPresent"
    job["spec"]["template"]["spec"]["securityContext"] = {"runAsNonRoot": False}

    pv = localdeploy.shared_claim(kj, ns, CLAIM, tmp_path / "ckpt")
    jobs = KerasJobClient(ns, kubeconfig=str(deployment.cluster.kubeconfig))
    followed: list[str] = []
    try:
        jobs.create(job)

        def follow() -> None:
            followed.extend(str(ln) for ln in jobs.logs(name, all_replicas=True, follow=True))

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        done = jobs.wait(name, timeout=480)
        # The finished Pods' whole logs too (a Pod still tearing down when the chief
        # succeeded is deleted, and its stream may have ended early).
        after = [str(ln) for ln in jobs.logs(name, all_replicas=True)]
        follower.join(60)
    except BaseException:
        print("\n".join(followed[-80:]), deployment.operator_logs(), sep="\n")
        print(
            deployment.cluster.kubectl(
                "get", "kerasjobs,pods", "-n", ns, "-o", "wide", check=False
            ).stdout
        )
        raise
    finally:
        jobs.delete(name, wait=True, timeout=120)
        kj.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}")
        localdeploy.delete_volume(kj, pv)

    lines = list(dict.fromkeys([*followed, *after]))  # each line once, in order
    context = "\n".join(lines[-60:])
    # Both workers were tasks of one MultiWorkerMirroredStrategy cluster of two replicas.
    tasks = {
        (int(pod_index), int(task), cluster, int(replicas))
        for _, pod_index, task, cluster, replicas in _matches(lines, TASK)
    }
    assert {(i, t) for i, t, _, _ in tasks} == {(0, 0), (1, 1)}, context
    assert {r for *_, r in tasks} == {2}, context
    (cluster,) = {c for _, _, c, _ in tasks}
    for i in (0, 1):
        assert f"{name}-worker-{i}.{name}.{ns}.svc" in cluster, cluster
    # Both ran the same steps of the same global batch, and agree on the test accuracy.
    trained = {(int(w), int(steps), int(batch)) for w, steps, batch in _matches(lines, TRAINED)}
    assert {w for w, _, _ in trained} == {0, 1}, context
    assert len({(s, b) for _, s, b in trained}) == 1, trained
    accuracy = {int(w): float(a) for w, a in _matches(lines, ACCURACY)}
    assert set(accuracy) == {0, 1}, context
    assert accuracy[0] == accuracy[1] > MIN_TEST_ACCURACY, accuracy
    ((events,),) = _matches(lines, SUMMARIES)
    assert int(events) >= 1
    restarts = done.status.restarts if done.status else None
    assert restarts is None or restarts.failures == 0, restarts  # the program never failed
    status = done.status
    took = (
        status.completion_time - status.start_time
        if status and status.completion_time and status.start_time
        else None
    )
    print(
        f"converted TFJob {name}: Succeeded in {took}; test accuracy {accuracy[0]:.4f}, "
        f"(worker, steps, global batch) {sorted(trained)}, restarts {restarts}"
    )

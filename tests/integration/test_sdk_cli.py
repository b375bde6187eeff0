"""The SDK and the `kerasjob` CLI against the real API server and the operator (KWOK Pods):
submit, wait with progress, suspend/resume, delete, a function job, and every error case
with its exception and exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob.cli import app as cli
from kerasjob.k8s import paths as paths_module
from kerasjob.sdk import (
    AlreadyExistsError,
    CRDNotFoundError,
    ForbiddenError,
    InvalidError,
    JobFailedError,
    KerasJob,
    KerasJobClient,
    NotFoundError,
    WaitTimeoutError,
)
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import job_manifest, set_container_exit, shared_operator

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(400)]


@pytest.fixture
def jobs(cluster: Cluster, namespace: str) -> KerasJobClient:
    shared_operator(cluster)
    return KerasJobClient(namespace, kubeconfig=str(cluster.kubeconfig))


def kj(cluster: Cluster, *argv: str) -> int:
    return cli.main(["--kubeconfig", str(cluster.kubeconfig), *argv])


def write(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / f"{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_submit_wait_suspend_resume_succeed_delete(
    cluster: Cluster, namespace: str, jobs: KerasJobClient, tmp_path: Path, capsys
) -> None:
    path = write(tmp_path, job_manifest("life", workers=2))
    assert kj(cluster, "submit", "-f", path, "-n", namespace) == 0
    assert capsys.readouterr().out == "kerasjob.kerasjob.dev/life created\n"

    seen: list[str | None] = []
    running = jobs.wait(
        "life",
        until="Running",
        timeout=120,
        callback=lambda j: seen.append(j.status.phase if j.status else None),
    )
    assert running.status and running.status.replica_statuses["worker"].active == 2
    assert seen[-1] == "Running" and len(seen) >= 2  # called on every change, then done
    assert jobs.is_running("life") and not jobs.is_succeeded("life")
    assert [j.name for j in jobs.list()] == ["life"]

    assert kj(cluster, "get", "life", "-n", namespace, "-o", "json") == 0
    got = yaml.safe_load(capsys.readouterr().out)
    assert got["status"]["phase"] == "Running" and "managedFields" not in got["metadata"]

    assert kj(cluster, "suspend", "life", "-n", namespace) == 0
    assert (
        kj(
            cluster,
            "wait",
            "life",
            "-n",
            namespace,
            "--for",
            "condition=Suspended",
            "--timeout",
            "120s",
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert out.endswith("kerasjob.kerasjob.dev/life Suspended\n")
    assert "restarts 0" in err  # the live progress line
    wait_for(lambda: not jobs.pods("life"), timeout=30, what="Pods deleted on suspend")

    assert kj(cluster, "resume", "life", "-n", namespace) == 0
    jobs.wait("life", until="Running", timeout=120)
    wait_for(lambda: len(jobs.pods("life")) == 2, timeout=30, what="Pods back on resume")

    set_container_exit(cluster, namespace, "life-worker-0", 0, in_place=False)
    assert kj(cluster, "wait", "life", "-n", namespace, "--timeout", "120", "-q") == 0
    assert jobs.is_succeeded("life")
    assert [e["reason"] for e in jobs.events("life")]  # transitions are Events
    assert kj(cluster, "describe", "life", "-n", namespace) == 0
    assert "Succeeded" in capsys.readouterr().out

    assert kj(cluster, "delete", "life", "-n", namespace, "--wait") == 0
    with pytest.raises(NotFoundError):
        jobs.get("life")
    capsys.readouterr()
    assert kj(cluster, "get", "life", "-n", namespace) == 3
    assert capsys.readouterr().err == (
        f"kerasjob: KerasJob 'life' not found in namespace '{namespace}'\n"
    )


def test_failed_job_raises_with_reason_and_exits_5(
    cluster: Cluster, namespace: str, jobs: KerasJobClient, capsys
) -> None:
    jobs.create(job_manifest("fails", workers=2, restartPolicy="Never"))
    jobs.wait("fails", until="Running", timeout=120)
    set_container_exit(cluster, namespace, "fails-worker-1", 1, in_place=False)
    with pytest.raises(JobFailedError) as failed:
        jobs.wait("fails", timeout=120)
    assert failed.value.reason == "PodFailed" and failed.value.job is not None
    assert kj(cluster, "wait", "fails", "-n", namespace, "-q") == 5
    err = capsys.readouterr().err
    assert err.startswith("kerasjob: KerasJob 'fails' failed: PodFailed") and err.count("\n") == 1


def test_wait_timeout_exits_6(
    cluster: Cluster, namespace: str, jobs: KerasJobClient, capsys
) -> None:
    jobs.create(job_manifest("slow", workers=1))
    with pytest.raises(WaitTimeoutError):
        jobs.wait("slow", timeout=2)
    assert kj(cluster, "wait", "slow", "-n", namespace, "--timeout", "2s", "-q") == 6
    assert "not Succeeded after 2s" in capsys.readouterr().err


def test_api_errors_are_typed(
    cluster: Cluster, namespace: str, jobs: KerasJobClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs.create(job_manifest("dup", workers=1))
    with pytest.raises(AlreadyExistsError):
        jobs.create(job_manifest("dup", workers=1))
    # Only the CRD's CEL rule can reject this: two Pods on a per-Pod emptyDir.
    shared = job_manifest("cel", workers=2)
    shared["spec"]["checkpoint"] = {"volume": {"emptyDir": {}}}
    with pytest.raises(InvalidError, match=r"needs a shared checkpoint\.volume"):
        jobs.create(shared, dry_run=True)
    with pytest.raises(NotFoundError, match="not found in namespace"):
        jobs.suspend("nope")
    monkeypatch.setattr(paths_module, "API_VERSION", "v9")  # a version no CRD serves
    with pytest.raises(CRDNotFoundError):
        jobs.list()


def test_forbidden_namespace_exits_4(
    cluster: Cluster, namespace: str, tmp_path: Path, capsys
) -> None:
    """A ServiceAccount without RBAC: ForbiddenError, `kerasjob get` exits 4, one line."""
    token = cluster.kubectl("create", "token", "default", "-n", namespace).stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    admin["users"] = [{"name": u["name"], "user": {"token": token}} for u in admin["users"]]
    kubeconfig = tmp_path / "sa-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(admin))
    with pytest.raises(ForbiddenError):
        KerasJobClient(namespace, kubeconfig=str(kubeconfig)).list()
    assert cli.main(["--kubeconfig", str(kubeconfig), "get", "-n", namespace]) == 4
    err = capsys.readouterr().err
    assert "forbidden" in err and "(HTTP 403)" in err and err.count("\n") == 1


def build_model(config):
    import tf_keras as keras

    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_function_job_ships_code_owned_by_the_job(
    cluster: Cluster, namespace: str, jobs: KerasJobClient, kwok_placement: dict[str, Any]
) -> None:
    job = jobs.train(
        build_model,
        "fn",
        workers=2,
        trainer={"epochs": 1},
        spec={
            "template": {"spec": kwok_placement},
            "checkpoint": {"volume": {"hostPath": {"path": "/tmp/ck"}}},
        },
    )
    assert isinstance(job, KerasJob) and job.spec.trainer.model.endswith(":build_model")
    cm = jobs.transport.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/fn-code")
    assert "def build_model(config):" in cm["data"]["kerasjob_user_code.py"]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == job.uid
    jobs.wait("fn", until="Running", timeout=120)
    pod = jobs.pods("fn")[0]
    assert {"name": "PYTHONPATH", "value": "/opt/kerasjob-user"} in pod["spec"]["containers"][0][
        "env"
    ]

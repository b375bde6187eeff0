"""`kerasjob convert`: Kubeflow TFJobs (tests/data/tfjobs) as KerasJobs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kerasjob.api import KerasJob, ReplicaRole
from kerasjob.cli import app as cli
from kerasjob.cli.convert import ConversionError, convert_tfjob
from kerasjob.manifests.validation import validate_job

CORPUS = Path(__file__).parents[1] / "data" / "tfjobs"
FILES = sorted(CORPUS.glob("*.yaml"))


def _load(name: str) -> dict:
    return yaml.safe_load((CORPUS / name).read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_corpus_file_converts_to_a_valid_kerasjob(path: Path) -> None:
    job, warnings = convert_tfjob(yaml.safe_load(path.read_text()))
    model = KerasJob.model_validate(job)
    trainer = model.spec.template["spec"]["containers"][0]
    assert trainer["name"] == "trainer"
    assert model.name == yaml.safe_load(path.read_text())["metadata"]["name"]
    assert any("non-root" in w for w in warnings)


def test_simple_keeps_command_image_namespace_and_gets_a_shared_volume() -> None:
    job, _ = convert_tfjob(_load("simple.yaml"), checkpoint_claim="ckpt")
    spec = job["spec"]
    assert job["metadata"] == {"name": "tfjob-simple", "namespace": "kubeflow"}
    assert spec["workers"] == 2 and spec["restartPolicy"] == "OnFailure"
    c = spec["template"]["spec"]["containers"][0]
    assert c["image"] == "docker.io/kubeflowkatib/tf-mnist-with-summaries:latest"
    assert c["command"][1] == "/opt/tf-mnist-with-summaries/mnist.py"
    assert spec["checkpoint"] == {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}}


def test_parameter_servers_are_kept_and_a_chief_added_to_coordinate() -> None:
    job, warnings = convert_tfjob(_load("dist-mnist.yaml"))
    spec = job["spec"]
    assert spec["workers"] == 4 and spec["restartPolicy"] == "Never"
    assert spec["ps"]["replicas"] == 2
    ps = spec["ps"]["template"]["spec"]["containers"][0]
    assert ps["name"] == "trainer" and ps["image"] == "kubeflow/tf-dist-mnist-test:1.0"
    # ParameterServerStrategy needs a coordinator: the chief, from the Worker template.
    assert spec["chief"]["replicas"] == 1
    assert spec["chief"]["template"] == spec["template"]
    assert any(w.startswith("PS without a Chief") for w in warnings)
    assert not any("dropped" in w for w in warnings)
    model = KerasJob.model_validate(job)
    assert validate_job(model) == []  # the CRD's CEL rules, as the operator repeats them
    assert model.spec.replicas()[ReplicaRole.PS] == 2
    assert spec["checkpoint"]["volume"]  # 7 Pods share the backup


def test_every_role_and_the_tf_port() -> None:
    job, warnings = convert_tfjob(_load("chief-ps-worker.yaml"))
    spec = job["spec"]
    assert spec["workers"] == 2 and spec["port"] == 2223
    assert spec["chief"]["replicas"] == 1 and spec["ps"]["replicas"] == 1
    assert spec["chief"]["template"]["spec"]["containers"][0]["args"] == ["--role=chief"]
    # A parameter-server job has no side-car evaluator (it reads MWMS backups).
    assert "evaluator" not in spec
    assert any(w.startswith("Evaluator dropped") for w in warnings)
    worker = spec["template"]["spec"]["containers"][0]
    assert worker["ports"] == [{"name": "metrics", "containerPort": 8080}]
    assert spec["restartPolicy"] == "ExitCode"
    assert job["metadata"]["labels"] == {"team": "vision"}
    model = KerasJob.model_validate(job)
    assert list(model.spec.replicas()) == [ReplicaRole.WORKER, ReplicaRole.CHIEF, ReplicaRole.PS]
    assert validate_job(model) == []


def test_run_policy_and_scheduling() -> None:
    job, warnings = convert_tfjob(_load("gang-scheduling.yaml"))
    spec = job["spec"]
    assert (
        spec["backoffLimit"],
        spec["activeDeadlineSeconds"],
        spec["ttlSecondsAfterFinished"],
        spec["cleanPodPolicy"],
        spec["suspend"],
    ) == (3, 7200, 600, "All", True)
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "high-priority" and pod["schedulerName"] == "volcano"
    assert "restartPolicy" not in pod  # the operator owns the Pod restartPolicy
    (sched,) = [w for w in warnings if w.startswith("runPolicy.schedulingPolicy")]
    assert "minAvailable" in sched and "queue" in sched
    # what to use instead: the operator's own gang scheduling, Kueue's queue label
    assert "--gang-scheduling" in sched and "kueue.x-k8s.io/queue-name" in sched


def test_success_policy_and_dynamic_workers_say_what_to_use_instead() -> None:
    tfjob = _load("simple.yaml")
    tfjob["spec"]["successPolicy"] = "AllWorkers"
    tfjob["spec"]["enableDynamicWorker"] = True
    _, warnings = convert_tfjob(tfjob)
    assert any(w.startswith("successPolicy: 'AllWorkers' not converted") for w in warnings)
    (dynamic,) = [w for w in warnings if w.startswith("enableDynamicWorker")]
    assert "spec.elastic" in dynamic


def test_cleanpodpolicy_none_and_single_worker_needs_no_shared_volume() -> None:
    job, warnings = convert_tfjob(_load("mnist-with-summaries.yaml"))
    assert job["spec"]["cleanPodPolicy"] == "None" and job["spec"]["workers"] == 1
    assert "checkpoint" not in job["spec"]
    assert not any(w.startswith("checkpoint") for w in warnings)


def test_a_lone_chief_becomes_the_worker() -> None:
    tfjob = _load("chief-ps-worker.yaml")
    specs = tfjob["spec"]["tfReplicaSpecs"]
    del specs["Worker"], specs["Evaluator"], specs["PS"]
    job, warnings = convert_tfjob(tfjob)
    assert job["spec"]["workers"] == 1 and "chief" not in job["spec"]
    assert any("Chief without Workers" in w for w in warnings)


def test_not_a_tfjob() -> None:
    with pytest.raises(ConversionError, match=r"not a kubeflow\.org/v1 TFJob"):
        convert_tfjob({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"})
    with pytest.raises(ConversionError, match="no Worker, Chief or Master"):
        convert_tfjob(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "spec": {"tfReplicaSpecs": {"PS": {"replicas": 1}}},
            }
        )


def test_cli_convert_prints_yaml_and_warnings(capsys) -> None:
    assert cli.main(["convert", str(CORPUS / "dist-mnist.yaml")]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["kind"] == "KerasJob"
    assert "kerasjob: warning: dist-mnist-for-e2e-test: PS without a Chief" in err


def test_cli_convert_errors_are_one_line(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n")
    assert cli.main(["convert", str(bad)]) == 1
    assert cli.main(["convert", str(tmp_path / "missing.yaml")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("kerasjob: ") for line in err)
    assert "not a kubeflow.org/v1 TFJob" in err[0] and "missing.yaml" in err[1]


def test_a_bucket_instead_of_a_claim() -> None:
    job, warnings = convert_tfjob(_load("dist-mnist.yaml"), checkpoint_location="s3://ckpt/tf/")
    assert job["spec"]["checkpoint"] == {"location": "s3://ckpt/tf/"}
    assert validate_job(job) == []
    (said,) = [w for w in warnings if w.startswith("checkpoint")]
    assert "s3://ckpt/tf/<namespace>/<name>/<uid>" in said and "own identity" in said
    single, _ = convert_tfjob(
        _load("mnist-with-summaries.yaml"),
        checkpoint_location="gs://ckpt",
        checkpoint_secret="gcs-key",
    )
    assert single["spec"]["checkpoint"] == {
        "location": "gs://ckpt",
        "credentials": {"secretName": "gcs-key"},
    }
    assert validate_job(single) == []
    with pytest.raises(
        ConversionError, match=r"--checkpoint http://x: must be s3://BUCKET\[/PREFIX\] or gs://"
    ):
        convert_tfjob(_load("simple.yaml"), checkpoint_location="http://x")
    with pytest.raises(ConversionError, match="--checkpoint-secret is for a bucket"):
        convert_tfjob(_load("simple.yaml"), checkpoint_secret="s")


def test_cli_convert_checkpoint_location(capsys) -> None:
    args = ["convert", str(CORPUS / "simple.yaml"), "--checkpoint", "s3://ckpt"]
    assert cli.main([*args, "--checkpoint-secret", "aws-keys"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["spec"]["checkpoint"] == {
        "location": "s3://ckpt",
        "credentials": {"secretName": "aws-keys"},
    }
    assert "with the keys of Secret 'aws-keys'" in err
    with pytest.raises(SystemExit):  # argparse: not both
        cli.main([*args, "--checkpoint-claim", "c"])

"""The KerasJob models: defaults, aliases, bounds, topology helpers, timestamps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pydantic
import pytest

from kerasjob.api import (
    CheckpointSpec,
    CleanPodPolicy,
    Condition,
    DatasetFormat,
    DatasetSource,
    DatasetSpec,
    KerasJob,
    KerasJobSpec,
    KerasJobStatus,
    Phase,
    ReplicaRole,
    RestartPolicy,
    checkpoint_dir,
)
from kerasjob_contract import tf_config, trainer_config


def test_defaults() -> None:
    spec = KerasJobSpec()
    assert spec.workers == 1 and spec.port == 2222 and spec.image is None
    assert spec.chief is None and spec.evaluator is None and spec.template is None
    assert spec.trainer.model == "mnist-mlp"
    assert spec.trainer.dataset.source.value == "mnist-sample"
    assert (spec.trainer.epochs, spec.trainer.steps_per_epoch) == (3, 200)
    assert spec.trainer.batch_size_per_replica == 64 and spec.trainer.seed == 42
    assert spec.trainer.learning_rate is None
    assert spec.trainer.deterministic is False
    assert KerasJobSpec.model_validate({"trainer": {"deterministic": True}}).trainer.deterministic
    assert spec.trainer.backend.value == "tensorflow"
    assert (
        KerasJobSpec.model_validate({"trainer": {"backend": "jax"}}).trainer.backend.value == "jax"
    )
    assert spec.checkpoint.volume is None
    assert spec.checkpoint.mount_path == "/kerasjob/checkpoint"
    assert spec.checkpoint.save_freq == 100
    assert spec.restart_policy is RestartPolicy.ON_FAILURE
    assert spec.backoff_limit == 6
    assert spec.active_deadline_seconds is None and spec.ttl_seconds_after_finished is None
    assert spec.clean_pod_policy is CleanPodPolicy.RUNNING
    assert spec.suspend is False


def test_camel_case_wire_format_and_snake_case_python() -> None:
    body = {
        "metadata": {"name": "j"},
        "spec": {
            "workers": 2,
            "restartPolicy": "ExitCode",
            "backoffLimit": 0,
            "trainer": {"stepsPerEpoch": 5, "batchSizePerReplica": 8},
            "checkpoint": {"saveFreq": 3, "mountPath": "/c"},
        },
    }
    job = KerasJob.from_body(body)
    assert job.spec.trainer.steps_per_epoch == 5 and job.spec.checkpoint.save_freq == 3
    manifest = job.to_manifest()
    assert manifest["spec"]["trainer"]["batchSizePerReplica"] == 8
    assert manifest["spec"]["restartPolicy"] == "ExitCode"
    assert manifest["apiVersion"] == "kerasjob.dev/v1alpha1" and manifest["kind"] == "KerasJob"
    assert "status" not in manifest and "image" not in manifest["spec"]  # no nulls
    # snake_case is accepted too (populate_by_name), for Python callers
    assert KerasJobSpec(backoff_limit=2).backoff_limit == 2


def test_round_trip() -> None:
    body = {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {
            "workers": 3,
            "chief": {"replicas": 1},
            "evaluator": {"replicas": 0, "template": {"spec": {"x": 1}}},
            "template": {"spec": {"containers": [{"name": "trainer"}]}},
            "checkpoint": {"volume": {"nfs": {"server": "s", "path": "/p"}}},
        },
    }
    job = KerasJob.from_body(body)
    assert KerasJob.from_body(job.to_manifest()) == job
    assert (job.name, job.namespace, job.uid) == ("j", "ns", "u")


def test_from_body_accepts_read_only_mappings() -> None:
    from types import MappingProxyType

    body = MappingProxyType(
        {"metadata": MappingProxyType({"name": "j"}), "spec": MappingProxyType({"workers": 2})}
    )
    assert KerasJob.from_body(body).spec.workers == 2


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"workers": 0}, "workers"),
        ({"port": 0}, "port"),
        ({"port": 65536}, "port"),
        ({"chief": {"replicas": 2}}, "replicas"),
        ({"evaluator": {"replicas": -1}}, "replicas"),
        ({"trainer": {"epochs": 0}}, "epochs"),
        ({"trainer": {"learningRate": 0}}, "learningRate"),
        ({"trainer": {"dataset": {"source": "s3"}}}, "source"),
        ({"trainer": {"dataset": {"format": "csv"}}}, "format"),
        ({"trainer": {"backend": "torch"}}, "backend"),
        ({"checkpoint": {"saveFreq": 0}}, "saveFreq"),
        ({"restartPolicy": "Always"}, "restartPolicy"),
        ({"cleanPodPolicy": "Some"}, "cleanPodPolicy"),
        ({"backoffLimit": -1}, "backoffLimit"),
        ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds"),
        ({"ttlSecondsAfterFinished": -1}, "ttlSecondsAfterFinished"),
        ({"workerz": 1}, "workerz"),
    ],
)
def test_bounds(spec: dict[str, Any], where: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        KerasJob.from_body({"metadata": {"name": "j"}, "spec": spec})
    assert where in str(err.value)


def test_every_field_has_a_description() -> None:
    from kerasjob import api

    models = [
        m
        for m in vars(api).values()
        if isinstance(m, type)
        and issubclass(m, pydantic.BaseModel)
        and m.__module__.startswith(api.__name__)
        and not m.__name__.startswith("_")
    ]
    assert len(models) >= 10
    for model in models:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_topology() -> None:
    spec = KerasJobSpec(workers=3)
    assert spec.replicas() == {ReplicaRole.WORKER: 3}
    assert spec.chief_task() == (ReplicaRole.WORKER, 0)
    assert not spec.has_dedicated_chief()
    spec = KerasJobSpec.model_validate({"workers": 2, "chief": {}, "evaluator": {}})
    assert spec.replicas() == {
        ReplicaRole.WORKER: 2,
        ReplicaRole.CHIEF: 1,
        ReplicaRole.EVALUATOR: 1,
    }
    assert spec.chief_task() == (ReplicaRole.CHIEF, 0)
    assert spec.tasks() == [
        (ReplicaRole.WORKER, 0),
        (ReplicaRole.WORKER, 1),
        (ReplicaRole.CHIEF, 0),
        (ReplicaRole.EVALUATOR, 0),
    ]
    spec = KerasJobSpec.model_validate({"chief": {"replicas": 0}, "evaluator": {"replicas": 0}})
    assert spec.tasks() == [(ReplicaRole.WORKER, 0)]
    assert spec.chief_task() == (ReplicaRole.WORKER, 0)
    assert spec.role_spec(ReplicaRole.CHIEF) is spec.chief
    assert spec.role_spec(ReplicaRole.WORKER) is None


def test_dataset_format_inference() -> None:
    assert DatasetSpec().resolved_format() is None
    assert DatasetSpec(source="path", path="/a/b.npz").resolved_format() is DatasetFormat.NPZ
    assert DatasetSpec(source="path", path="/a/b").resolved_format() is DatasetFormat.TFRECORD
    assert (
        DatasetSpec(source="path", path="/a.npz", format="tfrecord").resolved_format()
        is DatasetFormat.TFRECORD
    )


def test_checkpoint_dir() -> None:
    assert (
        checkpoint_dir("/kerasjob/checkpoint", "ns", "job", "uid")
        == "/kerasjob/checkpoint/ns/job/uid"
    )
    assert checkpoint_dir("/c/", "ns", "job", "uid") == "/c/ns/job/uid"
    assert checkpoint_dir("/", "ns", "job", "uid") == "/ns/job/uid"
    assert CheckpointSpec().mount_path == "/kerasjob/checkpoint"


def test_status_parses_and_writes_metav1_times() -> None:
    status = KerasJobStatus.model_validate(
        {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Running",
                    "status": "True",
                    "reason": "AllReady",
                    "lastTransitionTime": "2024-05-01T12:00:00Z",
                }
            ],
            "replicaStatuses": {"worker": {"active": 2, "ready": 1}},
            "restarts": {"disruptions": 1},
            "lastRestart": {
                "time": "2024-05-01T12:00:01.5+02:00",
                "reason": "Evicted",
                "pod": "j-worker-1",
                "exitCode": 137,
            },
            "progress": {"epoch": 1, "step": 340, "loss": 0.12, "metrics": {"accuracy": 0.9}},
            "startTime": "2024-05-01T11:00:00Z",
            "someFutureField": {"x": 1},  # written by a newer operator: ignored, not an error
        }
    )
    assert status.phase is Phase.RUNNING
    assert status.replica_statuses is not None
    assert status.replica_statuses["worker"].ready == 1
    assert status.replica_statuses["worker"].failed == 0
    assert status.restarts is not None and status.restarts.failures == 0
    out = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert out["conditions"][0]["lastTransitionTime"] == "2024-05-01T12:00:00Z"
    assert out["lastRestart"]["time"] == "2024-05-01T10:00:01Z"  # UTC, second precision
    assert out["replicaStatuses"]["worker"] == {
        "active": 2,
        "ready": 1,
        "succeeded": 0,
        "failed": 0,
    }


def test_naive_times_are_utc() -> None:
    c = Condition(type="X", status="True", last_transition_time=datetime(2024, 1, 1, 0, 0, 0))
    assert c.model_dump(mode="json", by_alias=True)["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    c = Condition(
        type="X",
        status="False",
        last_transition_time=datetime(2024, 1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=1))),
    )
    assert c.model_dump(mode="json", by_alias=True)["lastTransitionTime"] == "2024-01-01T00:00:00Z"


def test_condition_needs_type_and_status() -> None:
    with pytest.raises(pydantic.ValidationError):
        Condition.model_validate({"status": "True"})
    with pytest.raises(pydantic.ValidationError):
        Condition.model_validate({"type": "X", "status": "Yes"})


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/", "normalised"),
        ("/../../etc", "normalised"),
        ("//etc", "normalised"),
        ("/data/./ckpt", "normalised"),
        ("/data/ckpt/..", "normalised"),
        ("/etc", "system directory"),
        ("/etc/kerasjob", "system directory"),
        ("/proc/x", "system directory"),
        ("/usr/lib/python3", "system directory"),
        ("/tmp", "system directory"),
        ("/var/", "system directory"),
        ("/kerasjob/checkpoint", None),
        ("/kerasjob/checkpoint/", None),
        ("/var/lib/ckpt", None),
        ("/tmp/ckpt", None),
        ("/etcetera", None),
        ("/a..b/c", None),
    ],
)
def test_mount_path_rules(path: str, problem: str | None) -> None:
    from kerasjob.api import mount_path_problem
    from kerasjob.manifests.validation import validate_job

    found = mount_path_problem(path)
    assert (found is None) if problem is None else (found is not None and problem in found)
    body = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {"workers": 1, "checkpoint": {"mountPath": path}},
    }
    problems = validate_job(body)
    assert bool(problems) == (problem is not None), problems


def test_mount_path_rules_are_in_the_crd() -> None:
    from kerasjob.api import MOUNT_PATH_NOT_NORMAL, MOUNT_PATH_SYSTEM, CheckpointSpec

    rules = CheckpointSpec.model_config["json_schema_extra"]["x-kubernetes-validations"]  # type: ignore[index]
    assert {r["message"] for r in rules} >= {MOUNT_PATH_NOT_NORMAL, MOUNT_PATH_SYSTEM}


def test_each_enum_mirroring_the_contract_holds_the_contracts_values() -> None:
    """The API spells what the trainer reads: its enums are the contract's tuples, in order."""
    assert tuple(r.value for r in DatasetSource) == trainer_config.API_DATASET_SOURCES
    assert tuple(f.value for f in DatasetFormat) == trainer_config.FILE_FORMATS
    assert {r.value for r in ReplicaRole} == set(tf_config.ROLES)

"""`validation.validate_job`: the semantic checks beyond the CRD's schema, and their messages."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from kerasjob.api import (
    JAX_NO_CHIEF,
    JAX_NO_EVALUATOR,
    KerasJob,
)
from kerasjob.manifests import children, validation
from kerasjob_contract import DEFAULT_METRICS_PORT, Env
from kerasjob_contract import trainer_config as trainer_config_parser
from kerasjob_dev.testing.manifests import (
    IMAGE,
    PVC,
    env_of,
    jax_job,
    job,
)


def test_valid_jobs_have_no_problems() -> None:
    assert validation.validate_job(job()) == []
    assert validation.validate_job(job({"workers": 1})) == []
    spec = {
        "workers": 4,
        "chief": {},
        "evaluator": {},
        "checkpoint": {"volume": PVC},
        "template": {"spec": {"containers": [{"image": "x"}, {"name": "s"}]}},
    }
    assert validation.validate_job(job(spec)) == []


@pytest.mark.parametrize(
    ("spec", "name", "message"),
    [
        ({"workers": 0}, "mnist", "spec.workers: Input should be greater than or equal to 1"),
        ({"workers": 1, "bogus": 1}, "mnist", "spec.bogus: Extra inputs are not permitted"),
        ({"workers": 1}, "Mnist", "must be a DNS-1035 label"),
        ({"workers": 1}, "1mnist", "must be a DNS-1035 label"),
        ({"workers": 1}, "a" * 55, "is too long: Pod name/hostname"),
        ({"workers": 1, "port": DEFAULT_METRICS_PORT}, "mnist", "collides with the metrics port"),
        (
            {"workers": 1, "trainer": {"dataset": {"source": "path"}}},
            "mnist",
            "dataset.path is required",
        ),
        ({"workers": 1, "checkpoint": {"mountPath": "rel"}}, "mnist", "must be an absolute path"),
        (
            {"workers": 1, "checkpoint": {"volume": {**PVC, "emptyDir": {}}}},
            "mnist",
            "exactly one volume source",
        ),
        ({"workers": 2}, "mnist", "needs a shared spec.checkpoint.volume"),
        (
            {"workers": 2, "checkpoint": {"volume": {"emptyDir": {}}}},
            "mnist",
            "needs a shared spec.checkpoint.volume",
        ),
        ({"workers": 1, "evaluator": {}}, "mnist", "needs a shared spec.checkpoint.volume"),
        (
            {"workers": 1, "template": {"spec": {"restartPolicy": "Always"}}},
            "mnist",
            "spec.template.spec.restartPolicy is set by the operator",
        ),
        (
            {"workers": 1, "template": {"spec": {"containers": [{"name": "t"}, {"image": "x"}]}}},
            "mnist",
            "spec.template.spec.containers[1] needs a name",
        ),
        (
            {
                "workers": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "trainer", "env": [{"name": "TF_CONFIG", "value": "{}"}]}
                        ]
                    }
                },
            },
            "mnist",
            "sets TF_CONFIG, which the operator sets",
        ),
        (
            {"workers": 1, "template": {"spec": {"volumes": [{"name": "kerasjob-checkpoint"}]}}},
            "mnist",
            "may not define 'kerasjob-checkpoint'",
        ),
        (
            {
                "workers": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "trainer",
                                "volumeMounts": [
                                    {"name": "x", "mountPath": "/kerasjob/checkpoint"}
                                ],
                            }
                        ]
                    }
                },
            },
            "mnist",
            "mounts something at the checkpoint mountPath",
        ),
        ({"workers": 1, "template": {"kind": "Pod"}}, "mnist", "may only have metadata and spec"),
        (
            {"workers": 1, "template": {"spec": {"containers": {"name": "x"}}}},
            "mnist",
            "spec.template.spec.containers must be a list of objects",
        ),
        (
            {"workers": 1, "chief": {"template": {"spec": {"hostname": "x"}}}},
            "mnist",
            "spec.chief.template.spec.hostname is set by the operator",
        ),
    ],
)
def test_validation_messages(spec: dict[str, Any], name: str, message: str) -> None:
    problems = validation.validate_job(job(spec, name=name))
    assert any(message in p for p in problems), problems


def test_name_length_limit_counts_the_longest_pod() -> None:
    # 10 workers: the longest is <name>-worker-9, 9 characters longer than <name>
    assert (
        validation.validate_job(job({"workers": 11, "checkpoint": {"volume": PVC}}, name="a" * 54))
        != []
    )
    assert (
        validation.validate_job(job({"workers": 10, "checkpoint": {"volume": PVC}}, name="a" * 54))
        == []
    )
    assert children.is_dns_label("a" * 63) and not children.is_dns_label("a" * 64)


def test_trainer_command_reaches_the_trainer_and_is_validated() -> None:
    """spec.trainer.command: passed in KERASJOB_TRAINER_CONFIG, parsed by the trainer."""
    command = ["python", "/opt/kerasjob-user/train.py", "--epochs=2"]
    env = env_of(
        children.build_pod(
            job({"workers": 1, "trainer": {"command": command}}), "worker", 0, default_image=IMAGE
        )
    )
    cfg = trainer_config_parser.parse_config(env[Env.TRAINER_CONFIG.value])
    assert cfg.command == tuple(command)
    with pytest.raises(pydantic.ValidationError):
        KerasJob.from_body(job({"workers": 1, "trainer": {"command": []}}))
    with pytest.raises(pydantic.ValidationError):
        KerasJob.from_body(job({"workers": 1, "trainer": {"command": ["python", ""]}}))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"chief": {}}, JAX_NO_CHIEF),
        ({"chief": {"replicas": 1}}, JAX_NO_CHIEF),
        ({"evaluator": {}}, JAX_NO_EVALUATOR),
    ],
)
def test_jax_rejects_chief_and_evaluator(extra: dict[str, Any], message: str) -> None:
    problems = validation.validate_job(jax_job(extra))
    assert message in problems, problems
    assert message.startswith("backend jax: ")


def test_jax_messages_say_why() -> None:
    assert JAX_NO_CHIEF == (
        "backend jax: process 0 (worker 0) is the chief; spec.chief is for backend tensorflow"
    )
    assert "spec.evaluator is for backend tensorflow" in JAX_NO_EVALUATOR


def test_valid_jax_jobs_have_no_problems() -> None:
    assert validation.validate_job(jax_job()) == []
    assert (
        validation.validate_job(jax_job({"chief": {"replicas": 0}, "evaluator": {"replicas": 0}}))
        == []
    )
    assert (
        validation.validate_job(
            job(
                {
                    "workers": 1,
                    "trainer": {"backend": "jax", "command": ["python", "/opt/train.py"]},
                }
            )
        )
        == []
    )
    # the same roles are fine for tensorflow
    assert (
        validation.validate_job(
            job({"workers": 2, "chief": {}, "evaluator": {}, "checkpoint": {"volume": PVC}})
        )
        == []
    )


def test_template_labels_and_annotations_are_checked_as_kubernetes_does() -> None:
    from kerasjob.manifests.validation import validate_job

    def problems(meta: dict[str, Any]) -> list[str]:
        return validate_job(job({"workers": 1, "template": {"metadata": meta}}))

    assert problems({"labels": {"team": "a-b_c.d", "example.com/x": ""}}) == []
    (huge,) = problems({"labels": {"big": "x" * 100_000}})
    assert huge == (
        "spec.template.metadata.labels['big']: a label value must be at most 63 characters "
        "(it has 100000)"
    )
    (bad,) = problems({"labels": {"a": "-x"}})
    assert bad.startswith("spec.template.metadata.labels['a']: a label value must be alphanum")
    (key,) = problems({"labels": {"Bad_Prefix/x": "1"}})
    assert "labels['Bad_Prefix/x']: the key's prefix must be a DNS subdomain" in key
    (long_key,) = problems({"annotations": {"k" * 64: "v"}})
    assert "the key's name must be at most 63 characters" in long_key
    (size,) = problems({"annotations": {f"a{i}": "x" * 1024 for i in range(300)}})
    assert size.startswith("spec.template.metadata.annotations: 308") and "256 KiB" in size
    # Within 256 KiB: fine.
    assert problems({"annotations": {f"a{i}": "x" * 1024 for i in range(200)}}) == []
    assert problems({"labels": {"n": 5}}) == [
        "spec.template.metadata.labels['n']: the value must be a string"
    ]


# --- checkpoint.location: a bucket instead of a volume (the CRD's CEL rules, repeated) ------

S3 = {"location": "s3://ckpt-bucket/team", "endpoint": "http://versitygw:7070", "pathStyle": True}


@pytest.mark.parametrize(
    "checkpoint",
    [
        S3,
        {"location": "s3://ckpt-bucket", "region": "eu-west-1"},
        {"location": "gs://ckpt.bucket_1/a/b/", "credentials": {"secretName": "gcs-key"}},
        {"location": "s3://abc", "credentials": {"secretName": "aws-keys"}},
    ],
)
def test_a_bucket_location_replaces_the_shared_volume(checkpoint: dict[str, Any]) -> None:
    spec = {"workers": 2, "chief": {}, "evaluator": {}, "checkpoint": checkpoint}
    assert validation.validate_job(job(spec)) == []


@pytest.mark.parametrize(
    ("checkpoint", "message"),
    [
        ({**S3, "volume": PVC}, "checkpoint.volume and checkpoint.location are exclusive"),
        ({"location": "s3://x", "volume": {"emptyDir": {}}}, "are exclusive"),
        ({"location": "http://bucket/x"}, "must be s3://BUCKET[/PREFIX] or gs://BUCKET"),
        ({"location": "s3://Upper-Case"}, "must be s3://BUCKET[/PREFIX] or gs://BUCKET"),
        ({"location": "gs://ab"}, "must be s3://BUCKET[/PREFIX] or gs://BUCKET"),
        ({"location": "s3://-bucket"}, "must be s3://BUCKET[/PREFIX] or gs://BUCKET"),
        ({"location": "s3://bucket", "endpoint": "versitygw:7070"}, "http:// or https://"),
        ({"location": "s3://bucket", "endpoint": "ftp://store"}, "http:// or https://"),
        ({"volume": PVC, "endpoint": "http://store"}, "are for a checkpoint.location"),
        ({"volume": PVC, "region": "us-east-1"}, "are for a checkpoint.location"),
        ({"volume": PVC, "pathStyle": False}, "are for a checkpoint.location"),
        ({"volume": PVC, "credentials": {"secretName": "s"}}, "are for a checkpoint.location"),
    ],
)
def test_bucket_location_problems(checkpoint: dict[str, Any], message: str) -> None:
    problems = validation.validate_job(job({"workers": 2, "checkpoint": checkpoint}))
    assert any(message in p for p in problems), problems


def test_a_single_pod_job_keeps_its_emptydir_but_not_beside_a_location() -> None:
    assert validation.validate_job(job({"workers": 1})) == []
    assert (
        validation.validate_job(job({"workers": 1, "checkpoint": {"location": "gs://bkt"}})) == []
    )
    both = {"workers": 1, "checkpoint": {"location": "gs://bkt", "volume": {"emptyDir": {}}}}
    assert validation.validate_job(job(both)) == [
        "spec.checkpoint.volume and checkpoint.location are exclusive: a job checkpoints to "
        "a volume or to a bucket"
    ]


def test_multi_pod_message_names_both_ways() -> None:
    (problem,) = validation.validate_job(job({"workers": 2}))
    assert problem.endswith("or a spec.checkpoint.location")


def test_bucket_settings_and_reserved_names() -> None:
    secret = {"secretName": "Not_A_Name"}
    problems = validation.validate_job(
        job({"workers": 2, "checkpoint": {"location": "s3://bkt", "credentials": secret}})
    )
    assert any(p.startswith("spec.checkpoint.credentials.secretName") for p in problems), problems
    tpl = {"spec": {"volumes": [{"name": children.GCS_CREDENTIALS_VOLUME, "emptyDir": {}}]}}
    problems = validation.validate_job(job({"workers": 1, "template": tpl}))
    assert problems == [
        "spec.template.spec.volumes may not define 'kerasjob-gcs-credentials': use "
        "spec.checkpoint.credentials"
    ]
    for name in children.BUCKET_ENV:
        env = [{"name": name, "value": "s3://other"}]
        tpl = {"spec": {"containers": [{"name": "trainer", "env": env}]}}
        problems = validation.validate_job(job({"workers": 1, "template": tpl}))
        assert problems == [
            f"spec.template.spec.containers[0].env sets {name}, which the operator sets"
        ]

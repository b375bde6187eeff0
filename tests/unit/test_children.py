"""children: the Service and Pods a KerasJob wants, and validate_job."""

from __future__ import annotations

import copy
import json
from typing import Any

import pydantic
import pytest

from kerasjob.api import (
    JAX_NO_CHIEF,
    JAX_NO_EVALUATOR,
    KerasJob,
    ReplicaRole,
    RestartPolicy,
    labels,
)
from kerasjob.manifests import children, validation
from kerasjob_contract import DEFAULT_METRICS_PORT, JAX_IDENTITY_ENV, Env
from kerasjob_contract import trainer_config as trainer_config_parser

IMAGE = "kerasjob/trainer:test"
TMP = {"name": "kerasjob-tmp", "emptyDir": {}}
PVC = {"persistentVolumeClaim": {"claimName": "ckpt"}}


def job(spec: dict[str, Any] | None = None, name: str = "mnist", **meta: Any) -> dict[str, Any]:
    spec = {"workers": 2, "checkpoint": {"volume": PVC}} if spec is None else spec
    return {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": name, "namespace": "ml", "uid": "uid-1", "generation": 1, **meta},
        "spec": spec,
    }


def env_of(pod: dict[str, Any], container: str = "trainer") -> dict[str, str]:
    c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def trainer(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")


# --- Service -----------------------------------------------------------------------------


def test_service_is_headless_and_selects_the_job() -> None:
    svc = children.build_service(job())
    assert svc["kind"] == "Service"
    assert svc["metadata"]["name"] == "mnist" and svc["metadata"]["namespace"] == "ml"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {labels.JOB_NAME: "mnist"}
    assert svc["spec"]["ports"] == [
        {"name": "tf", "port": 2222, "targetPort": 2222, "protocol": "TCP"}
    ]
    assert svc["metadata"]["ownerReferences"] == [children.owner_reference(job())]
    assert svc["metadata"]["labels"][labels.MANAGED_BY] == "kerasjob"


def test_label_selectors() -> None:
    assert labels.selector("j") == {"kerasjob.dev/job-name": "j"}
    assert labels.selector_string("j") == "kerasjob.dev/job-name=j"


def test_service_port_follows_spec() -> None:
    svc = children.build_service(job({"workers": 1, "port": 3000}))
    assert svc["spec"]["ports"][0]["port"] == 3000


# --- Pods: identity, labels, ownership ----------------------------------------------------


def test_pod_identity_and_dns() -> None:
    pod = children.build_pod(job(), "worker", 1, default_image=IMAGE)
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"]["name"] == "mnist-worker-1"
    assert pod["metadata"]["namespace"] == "ml"
    assert pod["spec"]["hostname"] == "mnist-worker-1"
    assert pod["spec"]["subdomain"] == "mnist"


def test_pod_labels_and_owner() -> None:
    pod = children.build_pod(job(), ReplicaRole.WORKER, 1, default_image=IMAGE)
    lbls = pod["metadata"]["labels"]
    assert lbls[labels.JOB_NAME] == "mnist"
    assert lbls[labels.REPLICA_TYPE] == "worker"
    assert lbls[labels.REPLICA_INDEX] == "1"
    assert lbls[labels.MANAGED_BY] == labels.MANAGED_BY_VALUE
    assert labels.CHIEF not in lbls
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kerasjob.dev/v1alpha1",
            "kind": "KerasJob",
            "name": "mnist",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_chief_label_is_worker_0_or_the_dedicated_chief() -> None:
    plain = children.desired_pods(job(), default_image=IMAGE)
    assert [p["metadata"]["labels"].get(labels.CHIEF) for p in plain] == ["true", None]
    spec = {"workers": 2, "chief": {}, "checkpoint": {"volume": PVC}}
    with_chief = children.desired_pods(job(spec), default_image=IMAGE)
    assert {
        p["metadata"]["name"]: p["metadata"]["labels"].get(labels.CHIEF) for p in with_chief
    } == {"mnist-worker-0": None, "mnist-worker-1": None, "mnist-chief-0": "true"}


def test_annotations() -> None:
    pod = children.build_pod(job(), "worker", 0, default_image=IMAGE, restart_attempt=4)
    ann = pod["metadata"]["annotations"]
    assert ann[labels.RESTART_ATTEMPT] == "4"
    assert ann[labels.JOB_GENERATION] == "1"
    # No spec-hash annotation: it was written and never read (a template change applies to
    # Pods created afterwards; JOB_GENERATION says which spec made a Pod).
    assert set(ann) == {labels.RESTART_ATTEMPT, labels.JOB_GENERATION}


def test_trainer_container_defaults() -> None:
    pod = children.build_pod(job(), "worker", 0, default_image=IMAGE)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer"]
    c = trainer(pod)
    assert c["image"] == IMAGE
    assert c["command"] == ["python", "-m", "kerasjob_trainer"]
    assert c["ports"] == [
        {"name": "tf", "containerPort": 2222, "protocol": "TCP"},
        {"name": "metrics", "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"},
    ]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["volumeMounts"] == [
        {"name": children.CHECKPOINT_VOLUME, "mountPath": "/kerasjob/checkpoint"},
        {"name": children.TMP_VOLUME, "mountPath": "/tmp"},
    ]
    assert pod["spec"]["volumes"] == [{"name": children.CHECKPOINT_VOLUME, **PVC}, TMP]
    # Pod Security "restricted" by default.
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_template_may_loosen_the_security_context() -> None:
    spec = {
        "workers": 1,
        "template": {
            "spec": {
                "securityContext": {"runAsNonRoot": False},
                "containers": [
                    {"name": "trainer", "securityContext": {"readOnlyRootFilesystem": False}}
                ],
            }
        },
    }
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert trainer(pod)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["enableServiceLinks"] is False


def test_env() -> None:
    pod = children.build_pod(job(), "worker", 1, default_image=IMAGE, restart_attempt=2)
    env = env_of(pod)
    assert json.loads(env[Env.TF_CONFIG.value]) == {
        "cluster": {
            "worker": ["mnist-worker-0.mnist.ml.svc:2222", "mnist-worker-1.mnist.ml.svc:2222"]
        },
        "task": {"type": "worker", "index": 1},
    }
    assert env[Env.JOB_NAME.value] == "mnist"
    assert env[Env.NAMESPACE.value] == "ml"
    assert env[Env.ROLE.value] == "worker"
    assert env[Env.INDEX.value] == "1"
    assert env[Env.CHECKPOINT_DIR.value] == "/kerasjob/checkpoint/ml/mnist/uid-1"
    assert env[Env.RESTART_ATTEMPT.value] == "2"
    assert env[Env.METRICS_PORT.value] == str(DEFAULT_METRICS_PORT)
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert json.loads(env[Env.TRAINER_CONFIG.value]) == {
        "model": "mnist-mlp",
        "dataset": {"source": "mnist-sample"},
        "epochs": 3,
        "stepsPerEpoch": 200,
        "batchSizePerReplica": 64,
        "seed": 42,
        "saveFreq": 100,
        "deterministic": False,
        "backend": "tensorflow",
    }
    # every env value is a string, as the API requires
    assert all(isinstance(v, str) for v in env.values())


def test_trainer_config_is_accepted_by_the_trainer() -> None:
    spec = {
        "workers": 1,
        "trainer": {
            "model": "pkg.mod:build",
            "epochs": 2,
            "learningRate": 0.01,
            "dataset": {"source": "path", "path": "/data/train.npz"},
        },
        "checkpoint": {"saveFreq": 7},
    }
    env = env_of(children.build_pod(job(spec), "worker", 0, default_image=IMAGE))
    cfg = trainer_config_parser.parse_config(env[Env.TRAINER_CONFIG.value])
    assert cfg.model == "pkg.mod:build" and cfg.epochs == 2 and cfg.save_freq == 7
    assert cfg.learning_rate == 0.01
    assert cfg.dataset.source == "npz" and cfg.dataset.path == "/data/train.npz"


@pytest.mark.parametrize(
    ("dataset", "source", "path"),
    [
        ({"source": "path", "path": "/d/x.npz"}, "npz", "/d/x.npz"),
        ({"source": "path", "path": "/d/records"}, "tfrecord", "/d/records"),
        ({"source": "path", "path": "/d/x.bin", "format": "npz"}, "npz", "/d/x.bin"),
        ({"source": "synthetic"}, "synthetic", None),
    ],
)
def test_dataset_is_passed_as_spelled_and_understood_by_the_trainer(
    dataset: dict[str, Any], source: str, path: str | None
) -> None:
    cfg = children.trainer_config(job({"workers": 1, "trainer": {"dataset": dataset}}))
    assert cfg["dataset"] == dataset
    parsed = trainer_config_parser.parse_config(json.dumps(cfg))
    assert (parsed.dataset.source, parsed.dataset.path) == (source, path)
    # the operator's own reading of the format agrees with the trainer's
    fmt = KerasJob.from_body(
        job({"workers": 1, "trainer": {"dataset": dataset}})
    ).spec.trainer.dataset.resolved_format()
    assert (fmt.value if fmt else source) == source


@pytest.mark.parametrize(
    ("policy", "pod_policy"),
    [
        (RestartPolicy.ON_FAILURE, "Never"),  # the operator restarts: no CrashLoopBackOff
        (RestartPolicy.NEVER, "Never"),
        (RestartPolicy.EXIT_CODE, "Never"),
    ],
)
def test_pod_restart_policy(policy: RestartPolicy, pod_policy: str) -> None:
    assert children.pod_restart_policy(policy) == pod_policy
    spec = {"workers": 1, "restartPolicy": policy.value}
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert pod["spec"]["restartPolicy"] == pod_policy


def test_single_worker_without_volume_gets_empty_dir() -> None:
    pod = children.build_pod(job({"workers": 1}), "worker", 0, default_image=IMAGE)
    assert pod["spec"]["volumes"] == [{"name": children.CHECKPOINT_VOLUME, "emptyDir": {}}, TMP]


def test_checkpoint_mount_path_and_dir_follow_spec() -> None:
    spec = {"workers": 1, "checkpoint": {"mountPath": "/ckpt/", "volume": PVC}}
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert trainer(pod)["volumeMounts"][0]["mountPath"] == "/ckpt/"
    assert env_of(pod)[Env.CHECKPOINT_DIR.value] == "/ckpt/ml/mnist/uid-1"


# --- image precedence ---------------------------------------------------------------------


def test_image_precedence() -> None:
    assert trainer(children.build_pod(job(), "worker", 0, default_image=IMAGE))["image"] == IMAGE
    j = job()
    j["spec"]["image"] = "spec:image"
    assert trainer(children.build_pod(j, "worker", 0, default_image=IMAGE))["image"] == "spec:image"
    j["spec"]["template"] = {"spec": {"containers": [{"name": "trainer", "image": "tpl:image"}]}}
    assert trainer(children.build_pod(j, "worker", 0, default_image=IMAGE))["image"] == "tpl:image"


#: The operator's default images per backend, as `runtimes.default_images(config)` gives them.
IMAGES = {"tensorflow": "kerasjob/trainer:test-cpu", "jax": "kerasjob/trainer:test-jax-cpu"}


def test_default_image_follows_the_backend() -> None:
    """A job that names no image runs its own backend's default: jax has no TensorFlow."""
    tf_job = job()
    assert (
        trainer(children.build_pod(tf_job, "worker", 0, default_image=IMAGES))["image"]
        == "kerasjob/trainer:test-cpu"
    )
    tf_job["spec"]["trainer"] = {"backend": "tensorflow"}
    assert (
        trainer(children.build_pod(tf_job, "worker", 0, default_image=IMAGES))["image"]
        == "kerasjob/trainer:test-cpu"
    )
    assert {
        trainer(p)["image"] for p in children.desired_pods(jax_job(), default_image=IMAGES)
    } == {"kerasjob/trainer:test-jax-cpu"}
    probe = children.build_probe_pod(
        jax_job({"elastic": {"minWorkers": 1}}), 3, default_image=IMAGES
    )
    assert trainer(probe)["image"] == "kerasjob/trainer:test-jax-cpu"
    # One image for every backend (a str) is still taken as it is.
    assert (
        trainer(children.build_pod(jax_job(), "worker", 0, default_image=IMAGE))["image"] == IMAGE
    )


def test_spec_image_wins_over_the_backends_default() -> None:
    j = jax_job({"image": "spec:image"})
    assert (
        trainer(children.build_pod(j, "worker", 1, default_image=IMAGES))["image"] == "spec:image"
    )
    j = jax_job({"template": {"spec": {"containers": [{"name": "trainer", "image": "tpl"}]}}})
    assert trainer(children.build_pod(j, "worker", 1, default_image=IMAGES))["image"] == "tpl"


def test_default_images_of_the_operator_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from kerasjob.config import DEFAULT_JAX_TRAINER_IMAGE, DEFAULT_TRAINER_IMAGE, OperatorConfig
    from kerasjob.manifests.runtimes import default_images

    monkeypatch.delenv("KERASJOB_DEFAULT_IMAGE", raising=False)
    monkeypatch.delenv("KERASJOB_DEFAULT_JAX_IMAGE", raising=False)
    assert default_images(OperatorConfig()) == {
        "tensorflow": DEFAULT_TRAINER_IMAGE,
        "jax": DEFAULT_JAX_TRAINER_IMAGE,
    }
    assert DEFAULT_TRAINER_IMAGE == "kerasjob/trainer:0.1.0-cpu"
    assert DEFAULT_JAX_TRAINER_IMAGE == "kerasjob/trainer:0.1.0-jax-cpu"
    monkeypatch.setenv("KERASJOB_DEFAULT_IMAGE", "reg/trainer:dev-cpu")
    monkeypatch.setenv("KERASJOB_DEFAULT_JAX_IMAGE", "reg/trainer:dev-jax-cpu")
    images = default_images(OperatorConfig())
    assert images == {"tensorflow": "reg/trainer:dev-cpu", "jax": "reg/trainer:dev-jax-cpu"}
    assert (
        trainer(children.build_pod(jax_job(), "worker", 0, default_image=images))["image"]
        == "reg/trainer:dev-jax-cpu"
    )
    assert (
        trainer(children.build_pod(job(), "worker", 0, default_image=images))["image"]
        == "reg/trainer:dev-cpu"
    )


# --- template merge -----------------------------------------------------------------------


def test_template_merges_over_defaults() -> None:
    j = job()
    j["spec"]["template"] = {
        "metadata": {
            "labels": {"team": "ml", labels.JOB_NAME: "hijack"},
            "annotations": {"a": "b"},
        },
        "spec": {
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "trainer",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "env": [
                        {"name": "EXTRA", "value": "1"},
                        {"name": "TF_USE_LEGACY_KERAS", "value": "0"},
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    pod = children.build_pod(j, "worker", 0, default_image=IMAGE)
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"][labels.JOB_NAME] == "mnist"  # operator's label wins
    assert pod["metadata"]["annotations"]["a"] == "b"
    assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "sidecar"]
    t = trainer(pod)
    assert t["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert t["command"] == ["python", "-m", "kerasjob_trainer"]
    env = env_of(pod)
    assert env["EXTRA"] == "1" and env["TF_USE_LEGACY_KERAS"] == "0"
    assert Env.TF_CONFIG.value in env
    assert [m["mountPath"] for m in t["volumeMounts"]] == ["/kerasjob/checkpoint", "/tmp", "/data"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == [
        children.CHECKPOINT_VOLUME,
        children.TMP_VOLUME,
        "data",
    ]


def test_first_container_is_the_trainer_when_none_is_named_trainer() -> None:
    j = job()
    j["spec"]["template"] = {
        "spec": {
            "containers": [
                {"name": "main", "image": "mine", "command": ["python", "train.py"]},
                {"name": "sidecar", "image": "busybox"},
            ]
        }
    }
    pod = children.build_pod(j, "worker", 0, default_image=IMAGE)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "sidecar"]
    t = trainer(pod)
    assert t["image"] == "mine" and t["command"] == ["python", "train.py"]
    assert Env.TF_CONFIG.value in env_of(pod)


def test_role_template_merges_over_job_template() -> None:
    spec = {
        "workers": 2,
        "checkpoint": {"volume": PVC},
        "template": {
            "spec": {
                "containers": [
                    {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "4"}}}
                ]
            }
        },
        "evaluator": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": None}}}
                    ]
                }
            }
        },
    }
    pods = {p["metadata"]["name"]: p for p in children.desired_pods(job(spec), default_image=IMAGE)}
    assert trainer(pods["mnist-worker-0"])["resources"] == {
        "limits": {"nvidia.com/gpu": 1, "cpu": "4"}
    }
    assert trainer(pods["mnist-evaluator-0"])["resources"] == {"limits": {"cpu": "4"}}


def test_operator_owned_fields_win_over_the_template() -> None:
    j = job()
    j["spec"]["template"] = {
        "metadata": {"name": "other", "namespace": "other", "generateName": "x-"},
        "spec": {
            "hostname": "h",
            "subdomain": "s",
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "trainer",
                    "env": [{"name": "TF_CONFIG", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                }
            ],
            "volumes": [{"name": children.CHECKPOINT_VOLUME, "hostPath": {"path": "/x"}}],
        },
    }
    pod = children.build_pod(j, "worker", 1, default_image=IMAGE)
    assert pod["metadata"]["name"] == "mnist-worker-1"
    assert pod["metadata"]["namespace"] == "ml"
    assert "generateName" not in pod["metadata"]
    assert pod["spec"]["hostname"] == "mnist-worker-1"
    assert pod["spec"]["subdomain"] == "mnist"
    assert pod["spec"]["restartPolicy"] == "Never"
    tf = next(e for e in trainer(pod)["env"] if e["name"] == "TF_CONFIG")
    assert set(tf) == {"name", "value"}
    assert pod["spec"]["volumes"] == [{"name": children.CHECKPOINT_VOLUME, **PVC}, TMP]


def test_build_does_not_modify_the_job() -> None:
    j = job()
    j["spec"]["template"] = {"spec": {"containers": [{"name": "main"}]}}
    before = copy.deepcopy(j)
    children.desired_pods(j, default_image=IMAGE)
    children.build_service(j)
    assert j == before


# --- desired_pods -------------------------------------------------------------------------


def test_desired_pods_all_roles() -> None:
    spec = {"workers": 3, "chief": {}, "evaluator": {"replicas": 1}, "checkpoint": {"volume": PVC}}
    pods = children.desired_pods(
        KerasJob.from_body(job(spec)), default_image=IMAGE, restart_attempt=1
    )
    names = [p["metadata"]["name"] for p in pods]
    assert names == [
        "mnist-worker-0",
        "mnist-worker-1",
        "mnist-worker-2",
        "mnist-chief-0",
        "mnist-evaluator-0",
    ]
    for pod in pods:
        env = env_of(pod)
        cfg = json.loads(env[Env.TF_CONFIG.value])
        assert cfg["task"] == {"type": env[Env.ROLE.value], "index": int(env[Env.INDEX.value])}
        assert set(cfg["cluster"]) == {"chief", "worker"}
        assert env[Env.RESTART_ATTEMPT.value] == "1"


def test_zero_replica_roles_have_no_pods() -> None:
    spec = {"workers": 1, "chief": {"replicas": 0}, "evaluator": {"replicas": 0}}
    assert [
        p["metadata"]["name"] for p in children.desired_pods(job(spec), default_image=IMAGE)
    ] == ["mnist-worker-0"]


# --- validate_job -------------------------------------------------------------------------


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


def test_network_policy_admits_only_the_jobs_pods_to_the_tf_port() -> None:
    body = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {
            "workers": 2,
            "port": 2345,
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}},
        },
    }
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}
    policy = children.build_network_policy(body, metrics_from=[peer])
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["name"] == "j"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u"
    own = {"matchLabels": {"kerasjob.dev/job-name": "j"}}
    assert policy["spec"]["podSelector"] == own
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    tf, metrics = policy["spec"]["ingress"]
    assert tf == {"from": [{"podSelector": own}], "ports": [{"protocol": "TCP", "port": 2345}]}
    assert metrics == {"from": [peer], "ports": [{"protocol": "TCP", "port": 9464}]}
    # No peers configured: the metrics port takes no connections at all.
    assert len(children.build_network_policy(body)["spec"]["ingress"]) == 1


def test_node_lost_tolerations() -> None:
    """A lost node's taints are tolerated for the operator's seconds (not Kubernetes' 300),
    unless the template says otherwise for a key, or tolerates everything."""
    from kerasjob.manifests.children import NODE_LOST_TAINTS, node_lost_tolerations

    added = node_lost_tolerations(None, 60)
    assert [(t["key"], t["effect"], t["tolerationSeconds"]) for t in added] == [
        (k, "NoExecute", 60) for k in NODE_LOST_TAINTS
    ]
    own = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 900,
    }
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    kept = node_lost_tolerations([gpu, own], 60)
    assert kept[:2] == [gpu, own] and [t["key"] for t in kept[2:]] == [
        "node.kubernetes.io/not-ready"
    ]
    everything = [{"operator": "Exists"}]
    assert node_lost_tolerations(everything, 60) == everything
    # In the Pod, after the template's own tolerations; none without the setting.
    spec = {
        "workers": 2,
        "checkpoint": {"volume": PVC},
        "template": {"spec": {"tolerations": [gpu]}},
    }
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE, node_lost_toleration=5)
    assert pod["spec"]["tolerations"][0] == gpu
    assert {t["key"]: t["tolerationSeconds"] for t in pod["spec"]["tolerations"][1:]} == {
        k: 5 for k in NODE_LOST_TAINTS
    }
    plain = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert plain["spec"]["tolerations"] == [gpu]


# --- spec.trainer.backend ---------------------------------------------------------------------


JAX_COORDINATOR = "mnist-worker-0.mnist.ml.svc:2222"


def jax_job(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return job(
        {"workers": 3, "checkpoint": {"volume": PVC}, "trainer": {"backend": "jax"}, **(spec or {})}
    )


@pytest.mark.parametrize("index", [0, 1, 2])
def test_jax_env_of_a_three_worker_job(index: int) -> None:
    pod = children.build_pod(jax_job(), "worker", index, default_image=IMAGE, restart_attempt=1)
    assert [(e["name"], e["value"]) for e in trainer(pod)["env"]] == [
        ("KERAS_BACKEND", "jax"),
        ("KERAS_DISTRIBUTION_JOB_ADDRESSES", JAX_COORDINATOR),
        ("KERAS_DISTRIBUTION_NUM_PROCESSES", "3"),
        ("KERAS_DISTRIBUTION_PROCESS_ID", str(index)),
        ("JAX_COORDINATOR_ADDRESS", JAX_COORDINATOR),
        ("JAX_NUM_PROCESSES", "3"),
        ("JAX_PROCESS_ID", str(index)),
        ("KERASJOB_NAME", "mnist"),
        ("KERASJOB_NAMESPACE", "ml"),
        ("KERASJOB_ROLE", "worker"),
        ("KERASJOB_INDEX", str(index)),
        ("KERASJOB_CHECKPOINT_DIR", "/kerasjob/checkpoint/ml/mnist/uid-1"),
        ("KERASJOB_RESTART_ATTEMPT", "1"),
        ("KERASJOB_TRAINER_CONFIG", trainer(pod)["env"][13]["value"]),
        ("KERASJOB_METRICS_PORT", str(DEFAULT_METRICS_PORT)),
    ]
    env = env_of(pod)
    assert Env.TF_CONFIG.value not in env and "TF_USE_LEGACY_KERAS" not in env
    cfg = trainer_config_parser.parse_config(env[Env.TRAINER_CONFIG.value])
    assert cfg.backend == "jax"
    # worker 0 is process 0, the chief; the Pod still publishes the job's port
    assert pod["metadata"]["labels"].get(labels.CHIEF) == ("true" if index == 0 else None)
    assert any(p["containerPort"] == 2222 for p in trainer(pod)["ports"])


def test_jax_env_of_an_elastic_job_at_reduced_size() -> None:
    spec = {
        "workers": 4,
        "elastic": {"minWorkers": 2},
        "trainer": {"backend": "jax", "batchSizePerReplica": 12},
    }
    pod = children.build_pod(jax_job(spec), "worker", 1, default_image=IMAGE, workers=2)
    env = env_of(pod)
    assert env["KERAS_DISTRIBUTION_NUM_PROCESSES"] == env["JAX_NUM_PROCESSES"] == "2"
    assert env["KERAS_DISTRIBUTION_PROCESS_ID"] == env["JAX_PROCESS_ID"] == "1"
    assert env["JAX_COORDINATOR_ADDRESS"] == JAX_COORDINATOR
    assert Env.TF_CONFIG.value not in env
    cfg = trainer_config_parser.parse_config(env[Env.TRAINER_CONFIG.value])
    assert cfg.backend == "jax" and cfg.elastic is not None
    assert cfg.elastic.preferred_workers == 4
    # at its preferred size: 4 processes
    full = env_of(children.build_pod(jax_job(spec), "worker", 3, default_image=IMAGE))
    assert full["JAX_NUM_PROCESSES"] == "4" and full["JAX_PROCESS_ID"] == "3"


def test_tensorflow_env_is_unchanged() -> None:
    """The default backend and an explicit 'tensorflow' give today's env, in today's order."""
    for spec in (
        {"workers": 2, "checkpoint": {"volume": PVC}},
        {"workers": 2, "checkpoint": {"volume": PVC}, "trainer": {"backend": "tensorflow"}},
    ):
        pod = children.build_pod(job(spec), "worker", 1, default_image=IMAGE)
        assert [e["name"] for e in trainer(pod)["env"]] == [
            "TF_CONFIG",
            "KERASJOB_NAME",
            "KERASJOB_NAMESPACE",
            "KERASJOB_ROLE",
            "KERASJOB_INDEX",
            "KERASJOB_CHECKPOINT_DIR",
            "KERASJOB_RESTART_ATTEMPT",
            "KERASJOB_TRAINER_CONFIG",
            "KERASJOB_METRICS_PORT",
            "TF_USE_LEGACY_KERAS",
        ]
        env = env_of(pod)
        assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
        assert not {e.value for e in JAX_IDENTITY_ENV} & set(env)


def test_env_is_the_same_on_every_render() -> None:
    for body in (job(), jax_job()):
        assert children.build_pod(body, "worker", 1, default_image=IMAGE) == children.build_pod(
            copy.deepcopy(body), "worker", 1, default_image=IMAGE
        )


def test_jax_identity_is_owned() -> None:
    assert {e.value for e in JAX_IDENTITY_ENV} | {"TF_CONFIG"} <= children.OWNED_ENV
    # A template cannot set them, whatever the job's backend ...
    for backend in ("jax", "tensorflow"):
        spec = {
            "workers": 1,
            "trainer": {"backend": backend},
            "template": {
                "spec": {
                    "containers": [
                        {"name": "trainer", "env": [{"name": "JAX_PROCESS_ID", "value": "7"}]}
                    ]
                }
            },
        }
        problems = validation.validate_job(job(spec))
        assert any("sets JAX_PROCESS_ID, which the operator sets" in p for p in problems)
    # ... and the Pod of an unvalidated one keeps the operator's values, not another
    # backend's identity.
    spec = {
        "workers": 1,
        "trainer": {"backend": "jax"},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "env": [
                            {"name": "JAX_PROCESS_ID", "value": "7"},
                            {"name": "TF_CONFIG", "value": "{}"},
                            {"name": "MINE", "value": "1"},
                        ],
                    }
                ]
            }
        },
    }
    env = env_of(children.build_pod(job(spec), "worker", 0, default_image=IMAGE))
    assert env["JAX_PROCESS_ID"] == "0" and env["MINE"] == "1" and "TF_CONFIG" not in env


def test_network_policy_ports_per_backend() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}
    own = {"podSelector": {"matchLabels": {"kerasjob.dev/job-name": "mnist"}}}
    metrics = {"from": [peer], "ports": [{"protocol": "TCP", "port": 9464}]}
    tf = children.build_network_policy(
        job({**jax_job()["spec"], "port": 2345, "trainer": {"backend": "tensorflow"}}),
        metrics_from=[peer],
    )
    assert tf["spec"]["ingress"] == [
        {"from": [own], "ports": [{"protocol": "TCP", "port": 2345}]},
        metrics,
    ]
    # jax: the job's own Pods on every TCP port (coordinator + gloo's ephemeral ports)
    jax = children.build_network_policy(jax_job({"port": 2345}), metrics_from=[peer])
    assert jax["spec"]["ingress"] == [{"from": [own], "ports": [{"protocol": "TCP"}]}, metrics]
    assert children.build_network_policy(jax_job())["spec"]["ingress"] == [
        {"from": [own], "ports": [{"protocol": "TCP"}]}
    ]


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

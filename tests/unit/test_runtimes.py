"""Runtimes: each backend's identity variables and the ports its Pods reach each other on;
the Pods, NetworkPolicy and default image `children` builds per backend."""

from __future__ import annotations

import copy
import json

import pytest

from kerasjob.api import (
    ReplicaRole,
    labels,
)
from kerasjob.manifests import children, validation
from kerasjob.manifests.runtimes import (
    IDENTITY_NAMES,
    RUNTIMES,
    JaxRuntime,
    TensorFlowRuntime,
    runtime_for,
)
from kerasjob.manifests.tf_config import build_tf_config, tf_config_json
from kerasjob_contract import DEFAULT_METRICS_PORT, JAX_IDENTITY_ENV, Backend, Env
from kerasjob_contract import trainer_config as trainer_config_parser
from kerasjob_contract.trainer_config import BACKENDS
from kerasjob_dev.testing.manifests import (
    IMAGE,
    JAX_COORDINATOR,
    PVC,
    env_of,
    jax_job,
    job,
    trainer,
)

COORDINATOR = "mnist-worker-0.mnist.ml.svc:2222"


def test_every_backend_has_a_runtime() -> None:
    assert tuple(b.value for b in Backend) == BACKENDS
    assert set(RUNTIMES) == set(Backend)
    assert isinstance(runtime_for("tensorflow"), TensorFlowRuntime)
    assert isinstance(runtime_for(Backend.JAX), JaxRuntime)
    with pytest.raises(ValueError):
        runtime_for("torch")


def test_each_runtime_names_its_default_image_setting() -> None:
    from kerasjob.config import OperatorConfig
    from kerasjob.manifests.runtimes import default_image_for, default_images

    assert runtime_for("tensorflow").default_image_setting == "default_image"
    assert runtime_for("jax").default_image_setting == "default_jax_image"
    config = OperatorConfig(default_image="tf:img", default_jax_image="jax:img")
    images = default_images(config)
    assert images == {"tensorflow": "tf:img", "jax": "jax:img"}
    assert default_image_for(images, Backend.JAX) == "jax:img"
    assert default_image_for(images, "tensorflow") == "tf:img"
    assert default_image_for("one:img", "jax") == "one:img"


def test_identity_names_of_every_backend() -> None:
    names = {Env.TF_CONFIG.value, *(e.value for e in JAX_IDENTITY_ENV)}
    assert names == IDENTITY_NAMES
    assert runtime_for("tensorflow").identity_names == ("TF_CONFIG",)
    assert runtime_for("jax").identity_names == tuple(e.value for e in JAX_IDENTITY_ENV)


# --- tensorflow ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "index"), [("worker", 0), ("worker", 1), ("chief", 0), ("evaluator", 0)]
)
def test_tensorflow_identity_is_tf_config(role: str, index: int) -> None:
    roles = {ReplicaRole.WORKER: 2, ReplicaRole.CHIEF: 1, ReplicaRole.EVALUATOR: 1}
    env = runtime_for("tensorflow").identity_env("mnist", "ml", roles, 2222, role, index)
    assert env == {
        "TF_CONFIG": tf_config_json(build_tf_config("mnist", "ml", roles, 2222, role, index))
    }


def test_tensorflow_defaults_and_ports() -> None:
    rt = runtime_for("tensorflow")
    assert rt.default_env() == {"TF_USE_LEGACY_KERAS": "1"}
    assert rt.ingress_ports(2345) == [{"protocol": "TCP", "port": 2345}]


def test_tensorflow_unknown_task_is_an_error() -> None:
    with pytest.raises(ValueError, match="is not in the job"):
        runtime_for("tensorflow").identity_env("j", "ns", {"worker": 2}, 2222, "worker", 2)


# --- jax -------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 2])
def test_jax_three_workers_every_index(index: int) -> None:
    env = runtime_for("jax").identity_env("mnist", "ml", {"worker": 3}, 2222, "worker", index)
    assert env == {
        "KERAS_BACKEND": "jax",
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": COORDINATOR,
        "KERAS_DISTRIBUTION_NUM_PROCESSES": "3",
        "KERAS_DISTRIBUTION_PROCESS_ID": str(index),
        "JAX_COORDINATOR_ADDRESS": COORDINATOR,
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": str(index),
    }
    # A fixed order: the same env on every render.
    assert list(env) == [e.value for e in JAX_IDENTITY_ENV]
    assert "TF_CONFIG" not in env


def test_jax_coordinator_is_worker_0_on_the_jobs_port() -> None:
    env = runtime_for("jax").identity_env(
        "j", "ns", {ReplicaRole.WORKER: 2}, 31337, ReplicaRole.WORKER, 1
    )
    assert env["JAX_COORDINATOR_ADDRESS"] == "j-worker-0.j.ns.svc:31337"
    assert env["KERAS_DISTRIBUTION_JOB_ADDRESSES"] == "j-worker-0.j.ns.svc:31337"


def test_jax_num_processes_is_the_current_size() -> None:
    """An elastic job at 2 of its 4 workers: 2 processes, as TF_CONFIG would list 2."""
    env = runtime_for("jax").identity_env("mnist", "ml", {"worker": 2}, 2222, "worker", 1)
    assert env["KERAS_DISTRIBUTION_NUM_PROCESSES"] == env["JAX_NUM_PROCESSES"] == "2"
    tf = json.loads(
        runtime_for("tensorflow").identity_env("mnist", "ml", {"worker": 2}, 2222, "worker", 1)[
            "TF_CONFIG"
        ]
    )
    assert len(tf["cluster"]["worker"]) == 2


@pytest.mark.parametrize(
    ("roles", "role", "index", "match"),
    [
        ({"worker": 2}, "worker", 2, "is not in the job"),
        ({"worker": 2}, "worker", -1, "is not in the job"),
        ({"worker": 2}, "chief", 0, "is not in the job"),
        ({"worker": 2, "chief": 1}, "worker", 0, "workers only, not chief"),
        ({"worker": 2, "evaluator": 1}, "evaluator", 0, "workers only, not evaluator"),
    ],
)
def test_jax_has_workers_only(roles: dict[str, int], role: str, index: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        runtime_for("jax").identity_env("j", "ns", roles, 2222, role, index)


def test_jax_defaults_and_ports() -> None:
    rt = runtime_for("jax")
    assert rt.default_env() == {}  # no TF_USE_LEGACY_KERAS: Keras 3
    # Every TCP port between the job's Pods: the coordinator and gloo's ephemeral ports.
    assert rt.ingress_ports(2222) == [{"protocol": "TCP"}]


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

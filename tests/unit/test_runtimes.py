"""Runtimes: each backend's identity variables and the ports its Pods reach each other on."""

from __future__ import annotations

import json

import pytest

from kerasjob.api import ReplicaRole
from kerasjob.manifests.runtimes import (
    IDENTITY_NAMES,
    RUNTIMES,
    JaxRuntime,
    TensorFlowRuntime,
    runtime_for,
)
from kerasjob.manifests.tf_config import build_tf_config, tf_config_json
from kerasjob_contract import JAX_IDENTITY_ENV, Backend, Env
from kerasjob_contract.trainer_config import BACKENDS

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

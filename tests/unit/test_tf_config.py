"""TF_CONFIG: one cluster for every task of a job, its own task for each Pod."""

from __future__ import annotations

import json

import pytest

from kerasjob.api import ReplicaRole
from kerasjob.manifests.tf_config import build_tf_config, pod_name, task_address, tf_config_json


def _worker(i: int, job: str = "mnist", ns: str = "ml", port: int = 2222) -> str:
    return f"{job}-worker-{i}.{job}.{ns}.svc:{port}"


@pytest.mark.parametrize("index", [0, 1, 2])
def test_three_workers_every_index(index: int) -> None:
    cfg = build_tf_config("mnist", "ml", {"worker": 3}, 2222, "worker", index)
    assert cfg == {
        "cluster": {"worker": [_worker(0), _worker(1), _worker(2)]},
        "task": {"type": "worker", "index": index},
    }


def test_cluster_is_identical_for_every_task() -> None:
    roles = {ReplicaRole.WORKER: 2, ReplicaRole.CHIEF: 1, ReplicaRole.EVALUATOR: 1}
    tasks = [("worker", 0), ("worker", 1), ("chief", 0), ("evaluator", 0)]
    clusters = {
        json.dumps(build_tf_config("j", "ns", roles, 2222, r, i)["cluster"]) for r, i in tasks
    }
    assert len(clusters) == 1


def test_with_chief() -> None:
    cfg = build_tf_config("mnist", "ml", {"worker": 2, "chief": 1}, 2222, "chief", 0)
    assert cfg["cluster"] == {
        "chief": ["mnist-chief-0.mnist.ml.svc:2222"],
        "worker": [_worker(0), _worker(1)],
    }
    assert cfg["task"] == {"type": "chief", "index": 0}
    # chief first: a stable order gives a stable env, hence a stable Pod spec hash
    assert list(cfg["cluster"]) == ["chief", "worker"]


def test_evaluator_is_not_in_the_cluster_but_has_its_task() -> None:
    roles = {"worker": 2, "evaluator": 1}
    cfg = build_tf_config("mnist", "ml", roles, 2222, "evaluator", 0)
    assert cfg["cluster"] == {"worker": [_worker(0), _worker(1)]}
    assert cfg["task"] == {"type": "evaluator", "index": 0}
    worker_cfg = build_tf_config("mnist", "ml", roles, 2222, "worker", 1)
    assert "evaluator" not in worker_cfg["cluster"]


def test_zero_replica_roles_are_omitted() -> None:
    cfg = build_tf_config("j", "ns", {"worker": 1, "chief": 0}, 2222, "worker", 0)
    assert cfg["cluster"] == {"worker": ["j-worker-0.j.ns.svc:2222"]}


def test_custom_port() -> None:
    cfg = build_tf_config("j", "ns", {"worker": 1}, 31337, "worker", 0)
    assert cfg["cluster"]["worker"] == ["j-worker-0.j.ns.svc:31337"]


@pytest.mark.parametrize(("role", "index"), [("worker", 3), ("worker", -1), ("chief", 0)])
def test_unknown_task_is_an_error(role: str, index: int) -> None:
    with pytest.raises(ValueError, match="is not in the job"):
        build_tf_config("j", "ns", {"worker": 3}, 2222, role, index)


def test_unknown_role_is_an_error() -> None:
    with pytest.raises(ValueError):
        build_tf_config("j", "ns", {"worker": 1}, 2222, "ps", 0)


def test_names_and_json() -> None:
    assert pod_name("j", ReplicaRole.EVALUATOR, 0) == "j-evaluator-0"
    assert task_address("j", "ns", "chief", 0, 1) == "j-chief-0.j.ns.svc:1"
    cfg = build_tf_config("j", "ns", {"worker": 1}, 2222, "worker", 0)
    text = tf_config_json(cfg)
    assert " " not in text and json.loads(text) == cfg

"""TF_CONFIG: one cluster for every task of a job, its own task for each Pod; what the operator
builds, the contract parses and every reader in the trainer reads the same."""

from __future__ import annotations

import json

import pytest

from kerasjob.api import ReplicaRole
from kerasjob.manifests.tf_config import build_tf_config, pod_name, task_address, tf_config_json
from kerasjob_contract import tf_config as contract
from kerasjob_trainer.core import supervisor
from kerasjob_trainer.runtimes.tf_keras.cluster import parse_tf_config
from kerasjob_trainer.runtimes.tf_ps.cluster import parse_ps_tf_config


def _worker(i: int, job: str = "mnist", ns: str = "ml", port: int = 2222) -> str:
    return f"{job}-worker-{i}.{job}.{ns}.svc:{port}"


@pytest.mark.parametrize("index", [0, 1, 2])
def test_three_workers_every_index(index: int) -> None:
    cfg = build_tf_config("mnist", "ml", {"worker": 3}, 2222, "worker", index)
    assert cfg.to_dict() == {
        "cluster": {"worker": [_worker(0), _worker(1), _worker(2)]},
        "task": {"type": "worker", "index": index},
    }


def test_cluster_is_identical_for_every_task() -> None:
    roles = {ReplicaRole.WORKER: 2, ReplicaRole.CHIEF: 1, ReplicaRole.EVALUATOR: 1}
    tasks = [("worker", 0), ("worker", 1), ("chief", 0), ("evaluator", 0)]
    clusters = {
        json.dumps(build_tf_config("j", "ns", roles, 2222, r, i).to_dict()["cluster"])
        for r, i in tasks
    }
    assert len(clusters) == 1


def test_with_chief() -> None:
    cfg = build_tf_config("mnist", "ml", {"worker": 2, "chief": 1}, 2222, "chief", 0)
    assert cfg.to_dict()["cluster"] == {
        "chief": ["mnist-chief-0.mnist.ml.svc:2222"],
        "worker": [_worker(0), _worker(1)],
    }
    assert cfg.to_dict()["task"] == {"type": "chief", "index": 0}
    # chief first: a stable order gives a stable env, hence a stable Pod spec hash
    assert list(cfg.to_dict()["cluster"]) == ["chief", "worker"]


def test_evaluator_is_not_in_the_cluster_but_has_its_task() -> None:
    roles = {"worker": 2, "evaluator": 1}
    cfg = build_tf_config("mnist", "ml", roles, 2222, "evaluator", 0)
    assert cfg.to_dict()["cluster"] == {"worker": [_worker(0), _worker(1)]}
    assert cfg.to_dict()["task"] == {"type": "evaluator", "index": 0}
    worker_cfg = build_tf_config("mnist", "ml", roles, 2222, "worker", 1)
    assert "evaluator" not in worker_cfg.to_dict()["cluster"]


def test_zero_replica_roles_are_omitted() -> None:
    cfg = build_tf_config("j", "ns", {"worker": 1, "chief": 0}, 2222, "worker", 0)
    assert cfg.to_dict()["cluster"] == {"worker": ["j-worker-0.j.ns.svc:2222"]}


def test_custom_port() -> None:
    cfg = build_tf_config("j", "ns", {"worker": 1}, 31337, "worker", 0)
    assert cfg.to_dict()["cluster"]["worker"] == ["j-worker-0.j.ns.svc:31337"]


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
    assert " " not in text and json.loads(text) == cfg.to_dict()


# -- the contract: what the operator builds, every reader in the trainer parses -----------------

JOBS = {
    "workers": {"worker": 3},
    "chief and evaluator": {"chief": 1, "worker": 2, "evaluator": 1},
    "parameter servers": {"chief": 1, "worker": 2, "ps": 2},
}


def _tasks(counts: dict[str, int]) -> list[tuple[str, int]]:
    return [(role, i) for role, n in counts.items() for i in range(n)]


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_task_round_trips_through_the_contract_and_each_reader(job: str) -> None:
    counts = JOBS[job]
    for role, index in _tasks(counts):
        built = build_tf_config("mnist", "ml", counts, 2222, role, index)
        text = tf_config_json(built)
        assert contract.parse_tf_config(text) == built
        assert supervisor.replica_name({"TF_CONFIG": text}) == f"{role}-{index}"
        if "ps" in counts:
            ps = parse_ps_tf_config(text)
            assert (ps.role, ps.index, ps.workers) == (role, index, counts["worker"])
            assert ps.cluster == {r: list(built.addresses(r)) for r in ("chief", "worker", "ps")}
            assert ps.own_address == task_address("mnist", "ml", role, index, 2222)
        else:
            info = parse_tf_config(text)
            assert (info.role, info.index) == (role, index)
            assert info.workers == counts.get("chief", 0) + counts["worker"]
            assert info.is_chief == (role == "chief" or ("chief" not in counts and index == 0))


def test_the_contract_refuses_what_it_would_not_build() -> None:
    with pytest.raises(ValueError, match="roles are"):
        contract.build_tf_config({"server": 1}, lambda r, i: f"h:{i + 1}", "server", 0)
    with pytest.raises(ValueError, match="not host:port"):
        contract.build_tf_config({"worker": 1}, lambda r, i: "nohost", "worker", 0)
    assert contract.parse_tf_config(None) is None and contract.parse_tf_config(" ") is None
    with pytest.raises(contract.ConfigError, match="role 'ps' is not supported"):
        contract.parse_tf_config(
            tf_config_json(build_tf_config("j", "ns", JOBS["parameter servers"], 1, "ps", 0)),
            roles=("chief", "worker"),
        )


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        ("a:1", True),
        ("a.b.svc:65535", True),
        ("[::1]:2222", True),
        ("a", False),
        (":1", False),
        ("a:0", False),
        ("a:65536", False),
        ("a:x", False),
    ],
)
def test_one_rule_for_an_address(address: str, ok: bool) -> None:
    assert contract.is_address(address) is ok

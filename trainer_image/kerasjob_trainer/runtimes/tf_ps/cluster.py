"""TF_CONFIG of a parameter-server job: a chief (the coordinator), workers and ps tasks.
Pure Python, no TensorFlow."""

from __future__ import annotations

import dataclasses
import json

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.runtimes.tf_keras.cluster import ClusterInfo

ROLES = ("chief", "worker", "ps")


@dataclasses.dataclass(frozen=True)
class PsCluster(ClusterInfo):
    """Who this process is in a parameter-server cluster: the tf-keras runtime's
    `ClusterInfo` over every task (chief, workers and ps)."""

    @property
    def cluster(self) -> dict[str, list[str]]:
        return self.training_cluster

    @property
    def workers(self) -> int:
        """The workers the chief dispatches steps to (constant across restarts)."""
        return len(self.cluster["worker"])

    @property
    def own_address(self) -> str:
        return self.cluster[self.role][self.index]

    def addresses(self, *roles: str) -> list[str]:
        """The addresses of the tasks of `roles` (this task's own left out)."""
        return [a for r in roles for a in self.cluster.get(r, []) if a != self.own_address]


def parse_ps_tf_config(text: str | None) -> PsCluster:
    """TF_CONFIG text -> PsCluster (ConfigError: exit 78 before TensorFlow starts)."""
    try:
        raw = json.loads(text or "")
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON: {e}") from None
    cluster = raw.get("cluster") if isinstance(raw, dict) else None
    task = raw.get("task") if isinstance(raw, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ConfigError('strategy parameterServer needs a TF_CONFIG with "cluster" and "task"')
    for role in ROLES:
        addresses = cluster.get(role)
        if not isinstance(addresses, list) or not addresses:
            raise ConfigError(f"strategy parameterServer needs cluster.{role} in TF_CONFIG")
        if not all(isinstance(a, str) and _is_address(a) for a in addresses):
            raise ConfigError(f"TF_CONFIG cluster.{role} must be a list of 'host:port'")
    if len(cluster["chief"]) != 1 or set(cluster) - {*ROLES, "evaluator"}:
        raise ConfigError("TF_CONFIG of a parameter-server job: one chief, workers and ps")
    role, index = str(task.get("type")), task.get("index", 0)
    if role not in ROLES:
        raise ConfigError(f"TF_CONFIG task.type {task.get('type')!r} is not one of {ROLES}")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(cluster[role]):
        raise ConfigError(f"TF_CONFIG task {role}:{index!r} is not in cluster.{role}")
    return PsCluster(role, index, {r: list(cluster[r]) for r in ROLES})


def _is_address(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)

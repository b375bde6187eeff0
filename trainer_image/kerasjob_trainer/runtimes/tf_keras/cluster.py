"""Parse TF_CONFIG into the facts the trainer needs. Pure Python, no TensorFlow."""

from __future__ import annotations

import dataclasses
import json

from kerasjob_contract.trainer_config import ConfigError

ROLES = ("chief", "worker", "evaluator")


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """Who this process is. `training_cluster` excludes the evaluator: it never joins the
    collectives, and leaving it out keeps the training group from waiting on it."""

    role: str
    index: int
    training_cluster: dict[str, list[str]]

    @property
    def is_evaluator(self) -> bool:
        return self.role == "evaluator"

    @property
    def num_workers(self) -> int:
        return sum(len(v) for v in self.training_cluster.values())

    @property
    def is_chief(self) -> bool:
        if self.role == "chief":
            return True
        return self.role == "worker" and self.index == 0 and not self.training_cluster.get("chief")

    @property
    def multi_worker(self) -> bool:
        return bool(self.training_cluster) and not self.is_evaluator

    # -- the core's view of who this process is (`core.runtime.Identity`) ------------------

    @property
    def workers(self) -> int:
        """The tasks of the training group (at least this one)."""
        return max(self.num_workers, 1)

    @property
    def multi_process(self) -> bool:
        return self.num_workers > 1

    @property
    def name(self) -> str:
        """The goodput and audit files' name for this process: role and index."""
        return f"{self.role}{self.index}"


LOCAL = ClusterInfo(role="worker", index=0, training_cluster={})


def parse_tf_config(text: str | None) -> ClusterInfo:
    """TF_CONFIG text -> ClusterInfo; unset or empty means a single local worker."""
    if not text or not text.strip():
        return LOCAL
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError("TF_CONFIG must be a JSON object")
    cluster = raw.get("cluster")
    task = raw.get("task")
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ConfigError('TF_CONFIG needs "cluster" and "task" objects')
    for role, addresses in cluster.items():
        if role not in ROLES:
            raise ConfigError(f"TF_CONFIG role {role!r} is not supported (only {ROLES})")
        if not isinstance(addresses, list) or not all(
            isinstance(a, str) and _is_address(a) for a in addresses
        ):
            raise ConfigError(f"TF_CONFIG cluster.{role} must be a list of 'host:port'")
    for role in ("chief", "evaluator"):
        if len(cluster.get(role, [])) > 1:
            raise ConfigError(f"TF_CONFIG may hold at most one {role}")
    role, index = task.get("type"), task.get("index", 0)
    if role not in ROLES:
        raise ConfigError(f"TF_CONFIG task.type {role!r} is not one of {ROLES}")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ConfigError(f"TF_CONFIG task.index must be a non-negative integer, got {index!r}")
    if role != "evaluator" and index >= len(cluster.get(role, [])):
        raise ConfigError(f"TF_CONFIG task {role}:{index} is not in cluster.{role}")
    training = {r: list(cluster[r]) for r in ("chief", "worker") if cluster.get(r)}
    if not training:
        raise ConfigError("TF_CONFIG cluster has no chief or worker")
    return ClusterInfo(role=role, index=index, training_cluster=training)


def _is_address(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)

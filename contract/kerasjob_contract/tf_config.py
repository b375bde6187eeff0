"""TF_CONFIG: a TensorFlow process's identity (backend tensorflow, with or without parameter
servers). The operator writes it (`build_tf_config`), the trainer reads it (`parse_tf_config`:
the supervisor and every TensorFlow runtime); this module is its one definition.

    TF_CONFIG = {"cluster": {role: ["host:port", ...]}, "task": {"type": role, "index": i}}

Every Pod of a job gets the same "cluster" and its own "task". As in TensorFlow (and
Kubeflow's TFJob), the evaluator is left out of "cluster": it is not a member of the training
group, but its own TF_CONFIG still lists the cluster. Pure Python, no TensorFlow: a malformed
TF_CONFIG is a ConfigError (exit 78) before any framework starts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kerasjob_contract.trainer_config import ConfigError

CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"
#: Every role, in the order "cluster" lists them: a deterministic JSON string means an
#: identical environment on every render (the operator's Pod spec hash does not flap).
ROLES = (CHIEF, WORKER, PS, EVALUATOR)
#: Roles with at most one task.
SINGLE_ROLES = (CHIEF, EVALUATOR)


@dataclasses.dataclass(frozen=True)
class TfConfig:
    """One process's TF_CONFIG: the job's cluster (role -> addresses, in `ROLES` order) and
    this process's task."""

    cluster: Mapping[str, tuple[str, ...]]
    task_type: str
    task_index: int = 0

    def addresses(self, role: str) -> tuple[str, ...]:
        """The addresses of `role`'s tasks (none: an empty tuple)."""
        return tuple(self.cluster.get(role, ()))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the TF_CONFIG variable."""
        return {
            "cluster": {role: list(addresses) for role, addresses in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }

    def to_json(self) -> str:
        """The compact JSON string put in the TF_CONFIG variable."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


def is_address(address: str) -> bool:
    """A task's address: host:port, the port 1..65535."""
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def build_tf_config(
    counts: Mapping[str, int],
    address: Callable[[str, int], str],
    task_type: str,
    task_index: int,
) -> TfConfig:
    """The TF_CONFIG of task `task_type:task_index` of a job with `counts` tasks per role,
    task i of a role reached at `address(role, i)`. Roles with no task, and the evaluator,
    are left out of "cluster". ValueError for an unknown role, a task not in the job or an
    address that is not host:port."""
    unknown = sorted(set(counts) - set(ROLES))
    if unknown:
        raise ValueError(f"TF_CONFIG roles are {ROLES}, not {unknown}")
    if task_type not in ROLES or not 0 <= task_index < counts.get(task_type, 0):
        shown = ", ".join(f"{r}={n}" for r, n in counts.items()) or "no tasks"
        raise ValueError(f"task {task_type}:{task_index} is not in the job ({shown})")
    cluster = {
        role: tuple(address(role, i) for i in range(counts[role]))
        for role in ROLES
        if role != EVALUATOR and counts.get(role, 0) > 0
    }
    for role, addresses in cluster.items():
        bad = [a for a in addresses if not is_address(a)]
        if bad:
            raise ValueError(f"TF_CONFIG cluster.{role}: {bad[0]!r} is not host:port")
    return TfConfig(cluster, task_type, task_index)


def parse_tf_config(text: str | None, roles: Sequence[str] = ROLES) -> TfConfig | None:
    """TF_CONFIG text -> TfConfig; None when it is unset or blank. `roles`: those the reader
    runs (a cluster or a task of another role is refused). The cluster keeps the roles it
    lists, empty ones too, in `ROLES` order. ConfigError (exit 78) when it cannot work."""
    if not text or not text.strip():
        return None
    served = tuple(roles)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError("TF_CONFIG must be a JSON object")
    cluster, task = raw.get("cluster"), raw.get("task")
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ConfigError('TF_CONFIG needs "cluster" and "task" objects')
    for role, addresses in cluster.items():
        if role not in served:
            raise ConfigError(f"TF_CONFIG role {role!r} is not supported (only {served})")
        if not isinstance(addresses, list) or not all(
            isinstance(a, str) and is_address(a) for a in addresses
        ):
            raise ConfigError(f"TF_CONFIG cluster.{role} must be a list of 'host:port'")
    for role in SINGLE_ROLES:
        if len(cluster.get(role, [])) > 1:
            raise ConfigError(f"TF_CONFIG may hold at most one {role}")
    role, index = task.get("type"), task.get("index", 0)
    if not isinstance(role, str) or role not in served:
        raise ConfigError(f"TF_CONFIG task.type {role!r} is not one of {served}")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ConfigError(f"TF_CONFIG task.index must be a non-negative integer, got {index!r}")
    if role != EVALUATOR and index >= len(cluster.get(role, [])):
        raise ConfigError(f"TF_CONFIG task {role}:{index} is not in cluster.{role}")
    return TfConfig({r: tuple(cluster[r]) for r in ROLES if r in cluster}, role, index)

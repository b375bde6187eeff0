"""TF_CONFIG (`kerasjob_contract.tf_config`) of a parameter-server job: a chief (the
coordinator), workers and ps tasks. Pure Python, no TensorFlow."""

from __future__ import annotations

import dataclasses

from kerasjob_contract.tf_config import CHIEF, PS, WORKER, parse_tf_config
from kerasjob_contract.trainer_config import ConfigError

#: The roles of a parameter-server job (no evaluator: the operator refuses one with spec.ps).
ROLES = (CHIEF, WORKER, PS)


@dataclasses.dataclass(frozen=True)
class PsCluster:
    """Who this process is in a parameter-server cluster (`core.runtime.Identity`):
    `cluster` holds every task, chief, workers and ps; `workers` counts the worker tasks
    only (the chief and the ps train no batch)."""

    role: str
    index: int
    cluster: dict[str, list[str]]

    @property
    def is_chief(self) -> bool:
        return self.role == CHIEF

    @property
    def workers(self) -> int:
        """The workers the chief dispatches steps to (constant across restarts)."""
        return len(self.cluster[WORKER])

    @property
    def multi_process(self) -> bool:
        """Always: a chief, at least one worker and one ps."""
        return True

    @property
    def name(self) -> str:
        """The goodput and audit files' name for this process: role and index."""
        return f"{self.role}{self.index}"

    @property
    def own_address(self) -> str:
        return self.cluster[self.role][self.index]

    def addresses(self, *roles: str) -> list[str]:
        """The addresses of the tasks of `roles` (this task's own left out)."""
        return [a for r in roles for a in self.cluster.get(r, []) if a != self.own_address]


def parse_ps_tf_config(text: str | None) -> PsCluster:
    """TF_CONFIG text -> PsCluster (ConfigError: exit 78 before TensorFlow starts)."""
    tf_config = parse_tf_config(text, ROLES)
    if tf_config is None:
        raise ConfigError(
            "TF_CONFIG is not valid JSON (it is empty): strategy parameterServer needs one with "
            '"cluster" and "task"'
        )
    for role in ROLES:
        if not tf_config.addresses(role):
            raise ConfigError(f"strategy parameterServer needs cluster.{role} in TF_CONFIG")
    cluster = {r: list(tf_config.addresses(r)) for r in ROLES}
    return PsCluster(tf_config.task_type, tf_config.task_index, cluster)

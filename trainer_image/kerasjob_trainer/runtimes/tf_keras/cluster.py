"""TF_CONFIG (`kerasjob_contract.tf_config`) as the tf-keras runtime reads it: who this
process is in a MultiWorkerMirroredStrategy group. Pure Python, no TensorFlow."""

from __future__ import annotations

import dataclasses

from kerasjob_contract.tf_config import CHIEF, EVALUATOR, WORKER
from kerasjob_contract.tf_config import parse_tf_config as parse
from kerasjob_contract.trainer_config import ConfigError

#: The roles a MultiWorkerMirroredStrategy job has (no ps: that is `runtimes.tf_ps`).
ROLES = (CHIEF, WORKER, EVALUATOR)


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """Who this process is. `training_cluster` excludes the evaluator: it never joins the
    collectives, and leaving it out keeps the training group from waiting on it."""

    role: str
    index: int
    training_cluster: dict[str, list[str]]

    @property
    def is_evaluator(self) -> bool:
        return self.role == EVALUATOR

    @property
    def is_chief(self) -> bool:
        if self.role == CHIEF:
            return True
        return self.role == WORKER and self.index == 0 and not self.training_cluster.get(CHIEF)

    @property
    def multi_worker(self) -> bool:
        return bool(self.training_cluster) and not self.is_evaluator

    # -- the core's view of who this process is (`core.runtime.Identity`) ------------------

    @property
    def workers(self) -> int:
        """The tasks of the training group, chief included (at least 1: this one)."""
        return max(sum(len(v) for v in self.training_cluster.values()), 1)

    @property
    def multi_process(self) -> bool:
        return self.workers > 1

    @property
    def name(self) -> str:
        """The goodput and audit files' name for this process: role and index."""
        return f"{self.role}{self.index}"


LOCAL = ClusterInfo(role=WORKER, index=0, training_cluster={})


def parse_tf_config(text: str | None) -> ClusterInfo:
    """TF_CONFIG text -> ClusterInfo; unset or empty means a single local worker."""
    tf_config = parse(text, ROLES)
    if tf_config is None:
        return LOCAL
    training = {r: list(tf_config.addresses(r)) for r in (CHIEF, WORKER) if tf_config.addresses(r)}
    if not training:
        raise ConfigError("TF_CONFIG cluster has no chief or worker")
    return ClusterInfo(tf_config.task_type, tf_config.task_index, training)

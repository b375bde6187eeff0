"""TF_CONFIG: the one place that decides which tasks a trainer sees and how it reaches them.

TF_CONFIG = {"cluster": {role: ["host:port", ...]}, "task": {"type": role, "index": i}}.
Every Pod of a job gets the same "cluster" and its own "task". Addresses are the stable DNS
names the job's headless Service gives each Pod through hostname/subdomain, so a re-created
Pod keeps its address. A job with parameter servers (spec.ps) lists them as "ps" tasks, which
ParameterServerStrategy reads. As in TensorFlow (and Kubeflow's TFJob), the evaluator is left out of
"cluster": it is not a member of the collective group, but its own TF_CONFIG still lists
the cluster so it knows where the chief writes checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kerasjob.api import ReplicaRole

#: Order of roles in "cluster": a deterministic JSON string means identical env on every
#: render, so the controller's spec hash does not flap.
_ORDER = (ReplicaRole.CHIEF, ReplicaRole.WORKER, ReplicaRole.PS, ReplicaRole.EVALUATOR)

#: Pods per role, keyed by the role or its name (`KerasJobSpec.replicas` or {"worker": 3}):
#: a union, since a Mapping's key type is invariant.
RoleCounts = Mapping[ReplicaRole, int] | Mapping[str, int]


def pod_name(job_name: str, role: ReplicaRole | str, index: int) -> str:
    """<job>-<role>-<index>: the Pod's name and hostname."""
    return f"{job_name}-{ReplicaRole(role).value}-{index}"


def task_address(
    job_name: str, namespace: str, role: ReplicaRole | str, index: int, port: int
) -> str:
    """<job>-<role>-<index>.<job>.<namespace>.svc:<port> (the headless Service's DNS name).

    The cluster domain (cluster.local) is left to the resolver's search path, so this works
    on clusters with a custom domain.
    """
    return f"{pod_name(job_name, role, index)}.{job_name}.{namespace}.svc:{port}"


def build_tf_config(
    job_name: str,
    namespace: str,
    roles: RoleCounts,
    port: int,
    task_role: ReplicaRole | str,
    task_index: int,
) -> dict[str, Any]:
    """TF_CONFIG for one task of a job.

    roles: replicas per role, e.g. {"worker": 3, "chief": 1}; roles with 0 replicas are
    omitted from "cluster". Raises ValueError for a task that does not exist in `roles`.
    """
    counts = {ReplicaRole(r): int(n) for r, n in roles.items()}
    role = ReplicaRole(task_role)
    if not 0 <= task_index < counts.get(role, 0):
        raise ValueError(f"task {role.value}:{task_index} is not in the job ({_fmt(counts)})")
    cluster = {
        r.value: [task_address(job_name, namespace, r, i, port) for i in range(counts[r])]
        for r in _ORDER
        if r is not ReplicaRole.EVALUATOR and counts.get(r, 0) > 0
    }
    return {"cluster": cluster, "task": {"type": role.value, "index": task_index}}


def tf_config_json(tf_config: Mapping[str, Any]) -> str:
    """The compact, key-ordered JSON string put in the TF_CONFIG variable."""
    return json.dumps(tf_config, separators=(",", ":"))


def _fmt(counts: Mapping[ReplicaRole, int]) -> str:
    return ", ".join(f"{r.value}={n}" for r, n in counts.items()) or "no tasks"

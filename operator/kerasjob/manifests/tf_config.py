"""TF_CONFIG of a job's Pods: which tasks a trainer sees and how it reaches them. The format,
its builder and its parser are the contract's (`kerasjob_contract.tf_config`); this module
names the tasks.

Every Pod of a job gets the same "cluster" and its own "task". Addresses are the stable DNS
names the job's headless Service gives each Pod through hostname/subdomain, so a re-created
Pod keeps its address. A job with parameter servers (spec.ps) lists them as "ps" tasks, which
ParameterServerStrategy reads. The evaluator is left out of "cluster" (as in TensorFlow and
Kubeflow's TFJob), but its own TF_CONFIG still lists the cluster so it knows where the chief
writes checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping

from kerasjob.api import ReplicaRole
from kerasjob_contract import tf_config as contract
from kerasjob_contract.tf_config import TfConfig

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
) -> TfConfig:
    """TF_CONFIG for one task of a job.

    roles: replicas per role, e.g. {"worker": 3, "chief": 1}; roles with 0 replicas are
    omitted from "cluster". Raises ValueError for a task that does not exist in `roles`.
    """
    counts = {ReplicaRole(r).value: int(n) for r, n in roles.items()}
    return contract.build_tf_config(
        counts,
        lambda role, i: task_address(job_name, namespace, role, i, port),
        ReplicaRole(task_role).value,
        task_index,
    )


def tf_config_json(tf_config: TfConfig) -> str:
    """The compact, key-ordered JSON string put in the TF_CONFIG variable."""
    return tf_config.to_json()

"""Every label and annotation key the operator writes, each in one place with its meaning.

Label values are what the controller selects on (its Pod index and the Service selector);
annotations carry bookkeeping that must travel with a Pod but is never selected on.
"""

from __future__ import annotations

from typing import Any

from kerasjob import API_GROUP, API_VERSION, KIND

_PREFIX = f"{API_GROUP}/"

# --- labels -----------------------------------------------------------------------------

#: The owning KerasJob's name. The Service selects on it and the controller's Pod index
#: groups Pods by it, so it is set on every child.
JOB_NAME = _PREFIX + "job-name"

#: The TF_CONFIG task type of a Pod: worker, chief or evaluator.
REPLICA_TYPE = _PREFIX + "replica-type"

#: The TF_CONFIG task index of a Pod within its role, as a decimal string.
REPLICA_INDEX = _PREFIX + "replica-index"

#: Marks the job's chief task (the dedicated chief, else worker 0): its success completes
#: the job and it serves progress metrics. Value "true"; absent on other Pods.
CHIEF = _PREFIX + "chief"

#: Kubernetes' recommended label: which tool manages the object.
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kerasjob"

#: Kubernetes' recommended label: the application's name (the job), for dashboards.
APP_NAME = "app.kubernetes.io/name"
APP_NAME_VALUE = "kerasjob"

#: Kubernetes' recommended label: the instance (the job's name).
APP_INSTANCE = "app.kubernetes.io/instance"

# --- annotations ------------------------------------------------------------------------

#: The job's restart attempt (disruptions + failures) when this Pod was created; the same
#: number the trainer sees in KERASJOB_RESTART_ATTEMPT. Lets the controller tell a Pod of
#: the current attempt from a straggler of an older one.
RESTART_ATTEMPT = _PREFIX + "restart-attempt"

#: The KerasJob's metadata.generation when this Pod was created, for debugging.
JOB_GENERATION = _PREFIX + "job-generation"


def selector(job_name: str) -> dict[str, str]:
    """Labels that select every child of a job (Service selector, Pod list selector)."""
    return {JOB_NAME: job_name}


def selector_string(job_name: str) -> str:
    """The same selector as a label-selector string, for list/watch calls."""
    return f"{JOB_NAME}={job_name}"


def controller_reference(name: str, uid: str) -> dict[str, Any]:
    """The ownerReference of everything a KerasJob owns (Pods, Service, NetworkPolicy, Kueue
    and gang Workloads, PodGroups): garbage-collected with the job."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }

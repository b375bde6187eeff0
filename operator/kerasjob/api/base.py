"""The API's building blocks: group/version constants, the model base classes, CEL rule
helper, timestamps, and the enumerations (phases, condition types, reasons, roles...)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from kerasjob import API_GROUP, API_VERSION
from kerasjob_contract.times import format_time

API_VERSION_FULL = f"{API_GROUP}/{API_VERSION}"

#: Directory, under checkpoint.mountPath, holding one sub-directory per job (see
#: `checkpoint_dir`). Kept here because the chart/docs and the controller refer to it.
DEFAULT_MOUNT_PATH = "/kerasjob/checkpoint"

#: A built-in model name (kebab-case) or "package.module:function". The trainer checks that
#: the built-in exists; the schema only rejects what can never work.
MODEL_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?"
    r"|[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*)$"
)

#: The core/v1 volume sources a checkpoint volume may use. Listed so that a typo such as
#: `persistentVolumeclaim` is rejected by the API server instead of by the kubelet later.
VOLUME_SOURCES = (
    "persistentVolumeClaim",
    "hostPath",
    "emptyDir",
    "nfs",
    "csi",
    "ephemeral",
    "cephfs",
    "glusterfs",
    "iscsi",
    "azureFile",
    "azureDisk",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "configMap",
    "secret",
    "projected",
    "image",
)


def _cel(rule: str, message: str) -> JsonDict:
    """One x-kubernetes-validations entry: a CEL rule and the message users see (typed as
    pydantic's JsonDict, what `json_schema_extra` lists hold)."""
    return {"rule": rule, "message": message}


#: A timestamp: parsed from any RFC 3339 string, written as metav1.Time.
Timestamp = Annotated[datetime, PlainSerializer(format_time, return_type=str, when_used="json")]


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown spec fields are errors."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )


class _StatusModel(_Model):
    # Status is written by (possibly newer) operators; never fail to parse it.
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------------------------------
# Enums
# ---------------------------------------------------------------------------------------


class ReplicaRole(str, enum.Enum):
    """The TF_CONFIG task type of a Pod."""

    WORKER = "worker"
    CHIEF = "chief"
    EVALUATOR = "evaluator"
    PS = "ps"
    """A parameter server (spec.ps): holds variables; the chief coordinates the workers."""


class RestartPolicy(str, enum.Enum):
    """What the operator does when a trainer exits with an error."""

    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(str, enum.Enum):
    """Which Pods are deleted when the job finishes."""

    RUNNING = "Running"
    ALL = "All"
    NONE = "None"


class Phase(str, enum.Enum):
    """The job's coarse state, for humans and printer columns; conditions are authoritative."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    QUEUED = "Queued"
    """Held by Kueue until its Workload is admitted (again): no Pods."""


class ConditionType(str, enum.Enum):
    """status.conditions[].type. Created stays True; at most one of Running, Restarting,
    Suspended is True while the job is active; Succeeded or Failed ends it."""

    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    ADMITTED = "Admitted"
    """Only for a job submitted to a Kueue LocalQueue: whether its Workload is admitted."""


class Reason(str, enum.Enum):
    """The job's own reasons, in conditions and Events. A condition about a Pod's outcome
    carries that outcome's reason instead (PodDeleted, Preempted, Evicted, an exit's reason:
    see `restart_policy`)."""

    CREATED = "Created"
    PODS_READY = "PodsReady"
    PODS_NOT_READY = "PodsNotReady"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    SUCCEEDED = "Succeeded"
    TASK_SUCCEEDED = "TaskSucceeded"
    POD_DISRUPTED = "PodDisrupted"
    POD_FAILED = "PodFailed"
    INVALID_SPEC = "InvalidSpec"
    INVALID_CONFIG = "InvalidConfig"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    NON_RETRYABLE_EXIT_CODE = "NonRetryableExitCode"
    POD_REJECTED = "PodRejected"
    SERVICE_REJECTED = "ServiceRejected"
    NETWORK_POLICY_REJECTED = "NetworkPolicyRejected"
    CREATE_FORBIDDEN = "CreateForbidden"
    CHECKPOINT_SECRET_MISSING = "CheckpointSecretMissing"
    """The Secret spec.checkpoint.credentials names does not exist, or lacks a key the
    bucket's scheme needs: no Pods are created until it does (looked at again on a timer)."""
    DISRUPTION_LOOP = "DisruptionLoop"
    DISRUPTION_COST = "DisruptionCost"
    """What one disruption cost the job (seconds lost, steps redone), from the chief's goodput."""
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    EVICTED = "Evicted"
    RESIZED = "Resized"
    RESIZING = "Resizing"
    CAPACITY_LOST = "CapacityLost"
    CAPACITY_RETURNED = "CapacityReturned"
    GANG_UNSCHEDULABLE = "GangUnschedulable"
    """Native gang scheduling: the job's Pods cannot all be placed at once (none is bound)."""
    GANG_REPLACED = "GangReplaced"
    """An elastic job's new size got a new PodGroup; the old one was deleted."""
    REGROUPING = "Regrouping"
    NODE_NOT_FOUND = "NodeNotFound"
    """A Pod's spec.nodeName (from the job's template) names a node that does not exist:
    the Pod garbage collector deletes every such Pod, so the job fails."""
    CHILD_RECREATED = "ChildRecreated"
    """A child the job owns (its Service, its NetworkPolicy) went missing while the job ran
    (deleted by hand, a namespace clean-up, a GitOps prune): it was made again."""
    CHILD_RESTORED = "ChildRestored"
    """A child the job owns (its Service, its NetworkPolicy) had a spec other than the one
    the operator renders for the job (changed by someone else, e.g. a policy loosened to
    admit everyone): its spec was patched back."""
    # Kueue: the job's Workload (Events).
    WORKLOAD_CREATED = "WorkloadCreated"
    """The job's Kueue Workload was created in its LocalQueue."""
    WORKLOAD_REPLACED = "WorkloadReplaced"
    """The job's roles or replicas changed (a Workload's podSets are immutable): its
    Workload was deleted, a new one follows."""
    WORKLOAD_RESIZED = "WorkloadResized"
    """An elastic job's Workload follows its size."""
    WORKLOAD_SHRINK_REFUSED = "WorkloadShrinkRefused"
    """Kueue refused a smaller worker count: the workers' quota went back through
    status.reclaimablePods."""
    WORKLOAD_SLICE_REPLACED = "WorkloadSliceReplaced"
    """An elastic job's older Workload slice was finished: a newer one is admitted."""
    WORKLOAD_SLICE_WITHDRAWN = "WorkloadSliceWithdrawn"
    """A grow slice was deleted before Kueue admitted it: the grow is no longer wanted."""
    GROW_WAITING_FOR_KUEUE = "GrowWaitingForKueue"
    """An elastic job grows once Kueue admits the bigger Workload slice it asked for."""
    QUOTA_RELEASED = "QuotaReleased"
    """After a Kueue eviction, once the job's Pods are gone, its Workload gave the quota
    back."""
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    """The WorkloadPriorityClass the job names does not exist: no Workload yet."""


class DatasetSource(str, enum.Enum):
    """Where the bundled trainer reads its data."""

    MNIST_SAMPLE = "mnist-sample"
    SYNTHETIC = "synthetic"
    PATH = "path"


class DatasetFormat(str, enum.Enum):
    """File format of a dataset read from a path."""

    NPZ = "npz"
    TFRECORD = "tfrecord"
    ARRAYRECORD = "arrayrecord"  # backend jax: read through Grain


class ConditionStatus(str, enum.Enum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


#: A label value as Kubernetes checks it (apimachinery's IsValidLabelValue): at most 63
#: characters, alphanumeric at both ends, '-', '_' and '.' between.
LABEL_VALUE_MAX = 63
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_LABEL_VALUE: JsonDict = {
    "type": "string",
    "description": "A label value: at most 63 characters, alphanumeric at both ends.",
    "maxLength": LABEL_VALUE_MAX,
    "pattern": LABEL_VALUE_PATTERN,
}
#: A PodTemplateSpec field: kept as given (the API server validates the Pods made from it),
#: but for its label values, which the API server checks at apply (a 2 MB value is refused
#: naming the label, not by etcd's request size later, naming nothing). Label keys and the
#: annotations' total size are the operator's (`validation`).
_TEMPLATE_SCHEMA: JsonDict = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "metadata": {
            "type": "object",
            "description": "The Pods' labels and annotations (and other ObjectMeta fields).",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "labels": {
                    "type": "object",
                    "description": "Labels added to the Pods; values as Kubernetes allows.",
                    "additionalProperties": _LABEL_VALUE,
                },
                "annotations": {
                    "type": "object",
                    "description": "Annotations added to the Pods (256 KiB in all at most).",
                    "additionalProperties": {
                        "type": "string",
                        "description": "An annotation value.",
                    },
                },
            },
        }
    },
}

"""The KerasJob API (kerasjob.dev/v1alpha1): pydantic models, the single source of truth.

Every field carries a description; `kerasjob.tools.crdgen` turns these models into the CRD's
OpenAPI schema, so `kubectl explain kerasjob.spec` reads exactly this text. Defaults live in
the models and are emitted into the CRD, so the API server and the operator agree on them.
Cross-field rules the schema alone cannot express are CEL `x-kubernetes-validations`,
attached here next to the fields they constrain (see `_cel`).

Serialise for the API server with `obj.model_dump(by_alias=True, exclude_none=True,
mode="json")` (or `KerasJob.to_manifest()`); parse a kopf body with `KerasJob.from_body()`.

Modules: `base` (constants, enums: Phase, ConditionType, Reason ...), `trainer`
(spec.trainer), `elastic` (spec.elastic, status.elastic), `spec` (KerasJobSpec),
`status` (KerasJobStatus); this module: the KerasJob object. Import everything from `kerasjob.api`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field

from kerasjob import KIND
from kerasjob.api.base import (
    API_VERSION_FULL,
    DEFAULT_MOUNT_PATH,
    LABEL_VALUE_MAX,
    LABEL_VALUE_PATTERN,
    MODEL_PATTERN,
    VOLUME_SOURCES,
    CleanPodPolicy,
    ConditionStatus,
    ConditionType,
    DatasetFormat,
    DatasetSource,
    Phase,
    Reason,
    ReplicaRole,
    RestartPolicy,
    Timestamp,
    _Model,
)
from kerasjob.api.elastic import BatchPolicy, ElasticSpec, ElasticStatus, Resize
from kerasjob.api.parameter_servers import (
    MAX_PS_REPLICAS,
    PS_NEEDS_CHIEF,
    PS_NEEDS_TENSORFLOW,
    PS_NO_EVALUATOR,
    PS_NOT_ELASTIC,
    ParameterServerSpec,
)
from kerasjob.api.spec import (
    BUCKET_ONLY,
    GCS_KEY_DIR,
    GCS_KEY_FILE,
    GOOGLE_CREDENTIALS_ENV,
    JAX_NO_CHIEF,
    JAX_NO_EVALUATOR,
    MOUNT_PATH_NOT_NORMAL,
    MOUNT_PATH_SYSTEM,
    NEEDS_SHARED,
    VOLUME_OR_LOCATION,
    CheckpointCredentials,
    CheckpointSpec,
    KerasJobSpec,
    ReplicaSpec,
    location_problems,
    mount_path_problem,
    required_secret_keys,
)
from kerasjob.api.status import (
    Condition,
    Goodput,
    KerasJobStatus,
    LastRestart,
    Progress,
    ReplicaStatus,
    RestartCounts,
    TrackedPod,
)
from kerasjob.api.trainer import DatasetSpec, TrainerSpec
from kerasjob_contract import Backend

# ---------------------------------------------------------------------------------------
# The resource
# ---------------------------------------------------------------------------------------


class KerasJob(_Model):
    """Distributed Keras training with MultiWorkerMirroredStrategy."""

    model_config = ConfigDict(extra="ignore")

    api_version: str = Field(
        API_VERSION_FULL,
        description="APIVersion defines the versioned schema of this representation.",
    )
    kind: str = Field(KIND, description="Kind is the REST resource type: KerasJob.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: KerasJobSpec = Field(
        default_factory=KerasJobSpec, description="The desired state of the job."
    )
    status: KerasJobStatus | None = Field(
        None, description="The observed state of the job, written by the operator."
    )

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> KerasJob:
        """Parse a KerasJob from a kopf body or any mapping (raises pydantic.ValidationError)."""
        return cls.model_validate(plain(body))

    def to_manifest(self) -> dict[str, Any]:
        """The object as the API server expects it (camelCase, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", "default"))

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))


def checkpoint_dir(mount_path: str, namespace: str, name: str, uid: str) -> str:
    """The job's own directory on the checkpoint volume: <mountPath>/<namespace>/<name>/<uid>.

    Namespace and name keep jobs that share one volume apart and make the directory easy to
    find; the uid makes a job deleted and re-created under the same name start fresh
    instead of resuming someone else's (possibly incompatible) backup.
    """
    return "/".join([mount_path.rstrip("/") or "", namespace, name, uid or "no-uid"])


def checkpoint_location(location: str, namespace: str, name: str, uid: str) -> str:
    """The job's own prefix in the bucket: <location>/<namespace>/<name>/<uid>, as
    `checkpoint_dir` on a volume (the same reasons)."""
    return "/".join([location.rstrip("/"), namespace, name, uid or "no-uid"])


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists: kopf bodies are read-only Mapping views."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


__all__ = [
    "API_VERSION_FULL",
    "BUCKET_ONLY",
    "DEFAULT_MOUNT_PATH",
    "GCS_KEY_DIR",
    "GCS_KEY_FILE",
    "GOOGLE_CREDENTIALS_ENV",
    "JAX_NO_CHIEF",
    "JAX_NO_EVALUATOR",
    "KIND",
    "LABEL_VALUE_MAX",
    "LABEL_VALUE_PATTERN",
    "MAX_PS_REPLICAS",
    "MODEL_PATTERN",
    "MOUNT_PATH_NOT_NORMAL",
    "MOUNT_PATH_SYSTEM",
    "NEEDS_SHARED",
    "PS_NEEDS_CHIEF",
    "PS_NEEDS_TENSORFLOW",
    "PS_NOT_ELASTIC",
    "PS_NO_EVALUATOR",
    "VOLUME_OR_LOCATION",
    "VOLUME_SOURCES",
    "Backend",
    "BatchPolicy",
    "CheckpointCredentials",
    "CheckpointSpec",
    "CleanPodPolicy",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DatasetFormat",
    "DatasetSource",
    "DatasetSpec",
    "ElasticSpec",
    "ElasticStatus",
    "Goodput",
    "KerasJob",
    "KerasJobSpec",
    "KerasJobStatus",
    "LastRestart",
    "ParameterServerSpec",
    "Phase",
    "Progress",
    "Reason",
    "ReplicaRole",
    "ReplicaSpec",
    "ReplicaStatus",
    "Resize",
    "RestartCounts",
    "RestartPolicy",
    "Timestamp",
    "TrackedPod",
    "TrainerSpec",
    "checkpoint_dir",
    "checkpoint_location",
    "location_problems",
    "mount_path_problem",
    "plain",
    "required_secret_keys",
]

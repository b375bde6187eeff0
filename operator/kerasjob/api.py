"""The KerasJob API (kerasjob.dev/v1alpha1): pydantic models, the single source of truth.

Every field carries a description; `kerasjob.crdgen` turns these models into the CRD's
OpenAPI schema, so `kubectl explain kerasjob.spec` reads exactly this text. Defaults live in
the models and are emitted into the CRD, so the API server and the operator agree on them.
Cross-field rules the schema alone cannot express are CEL `x-kubernetes-validations`,
attached here next to the fields they constrain (see `_cel`).

Serialise for the API server with `obj.model_dump(by_alias=True, exclude_none=True,
mode="json")` (or `KerasJob.to_manifest()`); parse a kopf body with `KerasJob.from_body()`.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from kerasjob import API_GROUP, API_VERSION, KIND
from kerasjob_contract import DEFAULT_TF_PORT
from kerasjob_contract.times import format_time
from kerasjob_contract.trainer_config import DEFAULTS as TRAINER_DEFAULTS

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
    "persistentVolumeClaim", "hostPath", "emptyDir", "nfs", "csi", "ephemeral", "cephfs",
    "glusterfs", "iscsi", "azureFile", "azureDisk", "gcePersistentDisk",
    "awsElasticBlockStore", "configMap", "secret", "projected", "image",
)


def _cel(rule: str, message: str) -> dict[str, str]:
    """One x-kubernetes-validations entry: a CEL rule and the message users see."""
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


class ConditionType(str, enum.Enum):
    """status.conditions[].type. Created stays True; at most one of Running, Restarting,
    Suspended is True while the job is active; Succeeded or Failed ends it."""

    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


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
    DISRUPTION_LOOP = "DisruptionLoop"


class DatasetSource(str, enum.Enum):
    """Where the bundled trainer reads its data."""

    MNIST_SAMPLE = "mnist-sample"
    SYNTHETIC = "synthetic"
    PATH = "path"


class DatasetFormat(str, enum.Enum):
    """File format of a dataset read from a path."""

    NPZ = "npz"
    TFRECORD = "tfrecord"


class ConditionStatus(str, enum.Enum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# ---------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------

_TEMPLATE_SCHEMA: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
# Object fields built by default_factory carry `"default": {}` into the CRD: the API server
# then creates the object and fills in its fields' defaults, so CEL rules and the operator
# always see e.g. spec.checkpoint.mountPath.


class DatasetSpec(_Model):
    """The training data of the bundled trainer."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("self.source != 'path' || has(self.path)",
                     "dataset.path is required when dataset.source is 'path'"),
                _cel("self.source == 'path' || (!has(self.path) && !has(self.format))",
                     "dataset.path and dataset.format are only allowed when dataset.source "
                     "is 'path'"),
            ]
        }
    )

    source: DatasetSource = Field(
        DatasetSource.MNIST_SAMPLE,
        description=(
            "Where the data comes from: 'mnist-sample' (5,000 real MNIST digits shipped in the "
            "trainer image, no network needed), 'synthetic' (random tensors shaped for the "
            "model, for benchmarks) or 'path' (files on a volume mounted through "
            "spec.template, see dataset.path). Default: mnist-sample."
        ),
    )
    path: str | None = Field(
        None,
        max_length=4096,
        description=(
            "Absolute path, inside the trainer container, of an .npz file or a TFRecord file "
            "or directory. Required when source is 'path', forbidden otherwise."
        ),
    )
    format: DatasetFormat | None = Field(
        None,
        description=(
            "File format of dataset.path: 'npz' or 'tfrecord'. When unset it is inferred "
            "from the path: a name ending in .npz is npz, anything else is TFRecord."
        ),
    )

    def resolved_format(self) -> DatasetFormat | None:
        """The effective file format (None unless source is 'path')."""
        if self.source is not DatasetSource.PATH or self.path is None:
            return None
        if self.format is not None:
            return self.format
        return DatasetFormat.NPZ if self.path.endswith(".npz") else DatasetFormat.TFRECORD


class TrainerSpec(_Model):
    """Configuration of the bundled trainer, passed to it as JSON in KERASJOB_TRAINER_CONFIG."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(f"self.model.matches('{MODEL_PATTERN}')",
                     "trainer.model must be a built-in model name (e.g. mnist-mlp) or "
                     "'package.module:function'"),
            ]
        }
    )

    model: str = Field(
        "mnist-mlp",
        min_length=1,
        max_length=256,
        description=(
            "The model to train: a built-in name (mnist-mlp, mnist-cnn, cifar10-cnn) or "
            "'package.module:function' naming a function, importable in the trainer image, "
            "that returns a compiled tf_keras model. Default: mnist-mlp."
        ),
    )
    dataset: DatasetSpec = Field(
        default_factory=DatasetSpec,
        description="The training data. Default: the MNIST sample bundled with the trainer.",
        json_schema_extra={"default": {}},
    )
    epochs: int = Field(
        TRAINER_DEFAULTS.epochs,
        ge=1,
        description=f"Number of epochs to train. Default: {TRAINER_DEFAULTS.epochs}.",
    )
    steps_per_epoch: int = Field(
        TRAINER_DEFAULTS.steps_per_epoch,
        ge=1,
        description=(
            f"Global training steps per epoch. Default: {TRAINER_DEFAULTS.steps_per_epoch}."
        ),
    )
    batch_size_per_replica: int = Field(
        TRAINER_DEFAULTS.batch_size_per_replica,
        ge=1,
        description=(
            "Batch size on each replica; the global batch is this times the number of "
            f"training replicas. Default: {TRAINER_DEFAULTS.batch_size_per_replica}."
        ),
    )
    learning_rate: float | None = Field(
        None,
        gt=0,
        description=(
            "Optimizer learning rate. When unset the built-in models use "
            f"{TRAINER_DEFAULTS.learning_rate:g} (Adam's default)."
        ),
    )
    seed: int = Field(
        TRAINER_DEFAULTS.seed,
        description=(
            "Seed for weight initialisation and dataset shuffling. The same seed on every "
            "worker is what keeps auto-sharded data free of duplicates and gaps. "
            f"Default: {TRAINER_DEFAULTS.seed}."
        ),
    )
    collective_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description=(
            "A collective operation that makes no progress for this long fails and the "
            "worker exits so the group restarts (a disruption). When unset the trainer's "
            f"default ({TRAINER_DEFAULTS.collective_timeout_seconds:g}s)."
        ),
    )
    stall_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description=(
            "No finished step for this long, after the first one, is treated as a silent "
            "peer: the worker exits so the group restarts. When unset the trainer's default "
            f"({TRAINER_DEFAULTS.stall_timeout_seconds:g}s)."
        ),
    )
    log_every_steps: int | None = Field(
        None,
        ge=0,
        description=(
            "Steps between progress log lines; 0 or unset logs every checkpoint.saveFreq steps."
        ),
    )
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description=(
            "Your own program instead of the bundled trainer, as an argv list like a "
            "container's command, e.g. [python, /opt/kerasjob-user/train.py, --lr=0.01]. The "
            "trainer image runs it (exec) with TF_CONFIG and the KERASJOB_* variables set; "
            "model and dataset are then ignored. The script comes from the image, or a "
            "ConfigMap or volume mounted through spec.template; with the "
            "kerasjob_trainer.session library it gets backups, save-on-SIGTERM (exit 42), "
            "peer-loss exits (43), progress and exact resume. A missing program or script "
            "fails the job at once (exit 78). Unset: the bundled trainer."
        ),
    )
    deterministic: bool = Field(
        TRAINER_DEFAULTS.deterministic,
        description=(
            "Reproducible training: TensorFlow op determinism, seeded and checkpointed "
            "random state. The same job then ends with the same weights whether or not it "
            "was disrupted (bit-identical on CPU). Costs some throughput (see the trainer "
            f"README). Default: {str(TRAINER_DEFAULTS.deterministic).lower()}."
        ),
    )


class ReplicaSpec(_Model):
    """An optional dedicated role (chief or evaluator)."""

    replicas: int = Field(
        1,
        ge=0,
        le=1,
        description="Number of Pods of this role: 0 or 1. Immutable. Default: 1.",
    )
    template: dict[str, Any] | None = Field(
        None,
        description=(
            "A PodTemplateSpec (metadata and spec) merged over spec.template for this role "
            "only (e.g. no GPU for the evaluator), with the same merge rules. Changes apply "
            "to Pods created afterwards."
        ),
        json_schema_extra=_TEMPLATE_SCHEMA,
    )


#: Top-level directories the checkpoint volume may not be mounted on or below: the
#: container's programs, libraries, configuration and kernel filesystems.
SYSTEM_DIRS = (
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "usr",
)
#: Directories the volume may not replace (below them is fine): /tmp is the trainer's
#: writable emptyDir, /run and /var hold the runtime's state.
RESERVED_DIRS = ("tmp", "run", "var")
#: A normalised absolute path: no empty, '.' or '..' segment; a trailing '/' is allowed.
_NORMAL_PATH = r"^(/[^/]+)+/?$"
_DOT_SEGMENT = r"/[.][.]?(/|$)"
_SYSTEM_PATH = "^/(" + "|".join(SYSTEM_DIRS) + ")(/|$)"
_RESERVED_PATH = "^/(" + "|".join(RESERVED_DIRS) + ")/?$"
MOUNT_PATH_NOT_NORMAL = (
    "checkpoint.mountPath must be a normalised absolute path below '/' (no '.', '..' or "
    "empty segments), e.g. /kerasjob/checkpoint"
)
MOUNT_PATH_SYSTEM = (
    "checkpoint.mountPath may not hide a system directory: not on or below /"
    + ", /".join(SYSTEM_DIRS) + ", not /" + ", /".join(RESERVED_DIRS) + " themselves"
)


def mount_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be the checkpoint mountPath (the CRD's CEL rules, repeated for
    objects that never went through the API server), or None."""
    if not re.match(_NORMAL_PATH, path) or re.search(_DOT_SEGMENT, path):
        normal = "/" + posixpath.normpath("/" + path).lstrip("/")
        hint = f" (normalised: {normal})" if path.startswith("/") else ""
        return MOUNT_PATH_NOT_NORMAL + hint
    if re.match(_SYSTEM_PATH, path) or re.match(_RESERVED_PATH, path):
        return MOUNT_PATH_SYSTEM
    return None


class CheckpointSpec(_Model):
    """Where BackupAndRestore state and the final model are written."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("self.mountPath.startsWith('/')",
                     "checkpoint.mountPath must be an absolute path"),
                _cel(f"self.mountPath.matches('{_NORMAL_PATH}') && "
                     f"!self.mountPath.matches('{_DOT_SEGMENT}')",
                     MOUNT_PATH_NOT_NORMAL),
                _cel(f"!self.mountPath.matches('{_SYSTEM_PATH}') && "
                     f"!self.mountPath.matches('{_RESERVED_PATH}')",
                     MOUNT_PATH_SYSTEM),
            ]
        }
    )

    volume: dict[str, dict[str, Any]] | None = Field(
        None,
        description=(
            "A core/v1 volume source without a name, with exactly one key, e.g. "
            "{persistentVolumeClaim: {claimName: ckpt}}, {nfs: {server: s, path: /x}} or "
            "{hostPath: {path: /data}}. All Pods of the job mount it, so with more than one "
            "Pod it must be shared (a ReadWriteMany claim, NFS, ...); emptyDir is allowed only "
            "for a single-Pod job, and its state is lost when the Pod is recreated. When "
            "unset, a single-Pod job gets an emptyDir. Immutable."
        ),
        json_schema_extra={
            "type": "object",
            "additionalProperties": _TEMPLATE_SCHEMA,
            # Bounds the CEL cost estimate (the API server refuses unbounded maps); the rule
            # below then says "exactly one" in words.
            "maxProperties": 4,
            "x-kubernetes-validations": [
                _cel("self.size() == 1",
                     "checkpoint.volume must have exactly one volume source key"),
                _cel("self.all(k, k in " + repr(list(VOLUME_SOURCES)) + ")",
                     "checkpoint.volume has an unknown volume source; expected one of "
                     + ", ".join(VOLUME_SOURCES)),
            ],
        },
    )
    mount_path: str = Field(
        DEFAULT_MOUNT_PATH,
        min_length=1,
        max_length=1024,
        description=(
            "Where the volume is mounted in every Pod. Each job uses its own directory below "
            "it, <mountPath>/<namespace>/<name>/<uid>, passed to the trainer as "
            "KERASJOB_CHECKPOINT_DIR, so jobs sharing one volume never collide and a job "
            "re-created under the same name starts fresh. Immutable. "
            "Default: /kerasjob/checkpoint."
        ),
    )
    save_freq: int = Field(
        TRAINER_DEFAULTS.save_freq,
        ge=1,
        description=(
            "BackupAndRestore saves every this many steps: a disruption loses at most this "
            f"many steps. Immutable. Default: {TRAINER_DEFAULTS.save_freq}."
        ),
    )


def _immutable(field: str) -> dict[str, str]:
    return _cel("self == oldSelf", f"{field} is immutable")


def _immutable_optional(field: str) -> dict[str, str]:
    # A field-level transition rule is skipped when the field is added or removed, so the
    # optional roles are checked from the spec, where both presence and value are visible.
    return _cel(
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field}.replicas == oldSelf.{field}.replicas)",
        f"{field} cannot be added, removed or resized after creation",
    )


class KerasJobSpec(_Model):
    """The desired state of a KerasJob."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _immutable_optional("chief"),
                _immutable_optional("evaluator"),
                _cel(
                    "(self.workers == 1 && (!has(self.chief) || self.chief.replicas == 0) && "
                    "(!has(self.evaluator) || self.evaluator.replicas == 0)) || "
                    "(has(self.checkpoint.volume) && !('emptyDir' in self.checkpoint.volume))",
                    "a job with more than one Pod needs a shared checkpoint.volume "
                    "(emptyDir is per Pod)",
                ),
            ]
        }
    )

    workers: int = Field(
        1,
        ge=1,
        le=1000,
        description=(
            "Number of MultiWorkerMirroredStrategy workers. Worker 0 is the chief (writes "
            "checkpoints and the final model) unless spec.chief has 1 replica. Immutable. "
            "Default: 1."
        ),
        json_schema_extra={"x-kubernetes-validations": [_immutable("workers")]},
    )
    chief: ReplicaSpec | None = Field(
        None,
        description=(
            "An optional dedicated chief Pod (replicas 0 or 1). When present with 1 replica "
            "it is the task whose success completes the job. Cannot be added, removed or "
            "resized after creation."
        ),
    )
    evaluator: ReplicaSpec | None = Field(
        None,
        description=(
            "An optional side-car evaluator Pod (replicas 0 or 1) that evaluates the chief's "
            "checkpoints. It is not part of the TF_CONFIG cluster and does not decide the "
            "job's outcome. Cannot be added, removed or resized after creation."
        ),
    )
    port: int = Field(
        DEFAULT_TF_PORT,
        ge=1,
        le=65535,
        description=(
            "The gRPC port every task listens on, published through the job's headless "
            "Service. Immutable. Default: 2222."
        ),
        json_schema_extra={"x-kubernetes-validations": [_immutable("port")]},
    )
    image: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description=(
            "Trainer image for every Pod. An image set on the trainer container in "
            "spec.template wins over this; when neither is set the operator's configured "
            "default trainer image is used."
        ),
    )
    trainer: TrainerSpec = Field(
        default_factory=TrainerSpec,
        description=(
            "What the bundled trainer trains (model, dataset, epochs ...). Ignored by custom "
            "commands except through the KERASJOB_TRAINER_CONFIG variable. Immutable."
        ),
        json_schema_extra={"default": {}, "x-kubernetes-validations": [_immutable("trainer")]},
    )
    template: dict[str, Any] | None = Field(
        None,
        description=(
            "A PodTemplateSpec (metadata and spec) merged over the operator's defaults for "
            "every role: image, resources and GPUs, volumes, nodeSelector, tolerations, "
            "command ... The container named 'trainer' (else the first container, renamed "
            "'trainer') is the trainer. Containers, env and volumes merge by name, "
            "volumeMounts by mountPath, ports by containerPort; other lists are replaced; "
            "null deletes a field. The operator keeps TF_CONFIG, the KERASJOB_* identity "
            "variables, hostname, subdomain and restartPolicy. Changes apply to Pods created "
            "afterwards."
        ),
        json_schema_extra=_TEMPLATE_SCHEMA,
    )
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec,
        description=(
            "The volume that holds BackupAndRestore state (resuming after restarts) and the "
            "final model. Immutable."
        ),
        json_schema_extra={
            "default": {}, "x-kubernetes-validations": [_immutable("checkpoint")]
        },
    )
    restart_policy: RestartPolicy = Field(
        RestartPolicy.ON_FAILURE,
        description=(
            "What happens when a trainer fails. OnFailure: restart it, counting failures "
            "against backoffLimit. Never: the first failure fails the job. ExitCode: restart "
            "on retryable exit codes (disruptions: 42, 43, signals), fail at once on "
            "permanent ones (1, 78 ...). Disruptions (eviction, preemption, lost node, lost "
            "peer) always restart and never count against backoffLimit. Default: OnFailure."
        ),
    )
    backoff_limit: int = Field(
        6,
        ge=0,
        description=(
            "Failures (not disruptions) allowed before the job is marked Failed, counted "
            "across Pod re-creations. Default: 6."
        ),
    )
    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        description=(
            "Seconds since the job started after which it is failed (reason DeadlineExceeded) "
            "and its Pods are stopped. Unset: no deadline."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        None,
        ge=0,
        description=(
            "Seconds after the job finished (Succeeded or Failed) after which the KerasJob "
            "and its children are deleted. Unset: kept forever."
        ),
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING,
        description=(
            "Which Pods are deleted when the job finishes: Running (those still running, "
            "e.g. an evaluator; finished Pods stay for their logs), All, or None. "
            "Default: Running."
        ),
    )
    suspend: bool = Field(
        False,
        description=(
            "True deletes the job's Pods (state is kept in the checkpoint) and holds it "
            "Suspended; setting it back to false resumes from the last backup. A suspension "
            "is neither a failure nor a disruption. Default: false."
        ),
    )

    # -- derived topology, used by children and the controller -------------------------

    def replicas(self) -> dict[ReplicaRole, int]:
        """Pods per role, roles with 0 replicas left out; workers first, then chief, evaluator."""
        out: dict[ReplicaRole, int] = {ReplicaRole.WORKER: self.workers}
        if self.chief is not None and self.chief.replicas > 0:
            out[ReplicaRole.CHIEF] = self.chief.replicas
        if self.evaluator is not None and self.evaluator.replicas > 0:
            out[ReplicaRole.EVALUATOR] = self.evaluator.replicas
        return out

    def has_dedicated_chief(self) -> bool:
        return self.chief is not None and self.chief.replicas == 1

    def chief_task(self) -> tuple[ReplicaRole, int]:
        """The task whose success completes the job: (chief, 0), else (worker, 0)."""
        if self.has_dedicated_chief():
            return ReplicaRole.CHIEF, 0
        return ReplicaRole.WORKER, 0

    def tasks(self) -> list[tuple[ReplicaRole, int]]:
        """Every (role, index) Pod of the job, in a stable order."""
        return [(role, i) for role, n in self.replicas().items() for i in range(n)]

    def role_spec(self, role: ReplicaRole) -> ReplicaSpec | None:
        """The ReplicaSpec of a dedicated role (None for workers)."""
        if role is ReplicaRole.CHIEF:
            return self.chief
        if role is ReplicaRole.EVALUATOR:
            return self.evaluator
        return None


# ---------------------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------------------


class Condition(_StatusModel):
    """A metav1.Condition."""

    type: str = Field(
        ...,
        min_length=1,
        max_length=316,
        description="Type of the condition, e.g. Running, Succeeded, Failed, Suspended.",
    )
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    reason: str = Field(
        "",
        max_length=1024,
        description="A CamelCase machine-readable reason for the last transition.",
    )
    message: str = Field(
        "", max_length=32768, description="A human-readable message about the transition."
    )
    last_transition_time: Timestamp | None = Field(
        None, description="When the condition last changed status."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation the condition was set for."
    )


class ReplicaStatus(_StatusModel):
    """Pod counts of one role."""

    active: int = Field(0, ge=0, description="Pods that exist and have not finished.")
    ready: int = Field(0, ge=0, description="Active Pods whose Ready condition is True.")
    succeeded: int = Field(0, ge=0, description="Pods whose trainer exited with 0.")
    failed: int = Field(0, ge=0, description="Pods that finished with a failure.")


class RestartCounts(_StatusModel):
    """How many times the job restarted, by cause."""

    disruptions: int = Field(
        0,
        ge=0,
        description=(
            "Restarts not caused by the program (eviction, preemption, lost node or peer, "
            "signals, exit codes 42/43). Never count against backoffLimit."
        ),
    )
    failures: int = Field(
        0, ge=0, description="Error exits of the program; counted against spec.backoffLimit."
    )


class LastRestart(_StatusModel):
    """The most recent restart."""

    time: Timestamp | None = Field(None, description="When the restart was decided.")
    reason: str = Field(
        "", max_length=1024, description="Why, e.g. Evicted, Preempted, PeerLost, Error."
    )
    pod: str = Field("", max_length=253, description="The Pod whose exit or loss caused it.")
    exit_code: int | None = Field(
        None, description="The trainer container's exit code, when it exited."
    )
    disruption: bool | None = Field(
        None, description="True for a disruption, false for a failure."
    )
    repeated: int | None = Field(
        None,
        ge=1,
        description=(
            "How many restarts in a row had this reason with no training progress in "
            "between (see status.progress.step); from 3 on, Pods are re-created with a "
            "growing delay (condition Restarting, reason DisruptionLoop)."
        ),
    )
    progress_step: int | None = Field(
        None, ge=0, description="status.progress.step when that run of restarts began."
    )


class Progress(_StatusModel):
    """Training progress reported by the chief."""

    epoch: int | None = Field(None, ge=0, description="Current epoch (0-based).")
    step: int | None = Field(None, ge=0, description="Global steps completed.")
    total_steps: int | None = Field(None, ge=0, description="epochs * stepsPerEpoch.")
    loss: float | None = Field(None, description="Most recent training loss.")
    metrics: dict[str, float] | None = Field(
        None, description="Most recent training metrics by name, e.g. accuracy."
    )
    samples_per_second: float | None = Field(
        None, ge=0, description="Global training throughput."
    )
    updated_at: Timestamp | None = Field(None, description="When this was last observed.")


class TrackedPod(_StatusModel):
    """What the operator already counted for one Pod (bookkeeping, see status.trackedPods)."""

    uid: str = Field("", max_length=64, description="UID of the incarnation last seen.")
    restart_count: int = Field(
        0, ge=0, description="Container restarts of that incarnation already counted."
    )
    counted: bool = Field(
        False, description="Its exit or loss has been counted (or it was deleted on purpose)."
    )
    succeeded: bool = Field(
        False, description="This task exited 0: it is never re-created. Survives re-creation."
    )
    stopped: bool = Field(
        False,
        description=(
            "The operator stopped this incarnation because the job had finished "
            "(cleanPodPolicy): its exit is not a failure."
        ),
    )


class KerasJobStatus(_StatusModel):
    """The observed state of a KerasJob, written by the operator."""

    phase: Phase | None = Field(
        None,
        description="Pending, Running, Restarting, Succeeded, Failed or Suspended.",
    )
    conditions: list[Condition] | None = Field(
        None,
        description="Standard conditions, one per type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    replica_statuses: dict[str, ReplicaStatus] | None = Field(
        None, description="Pod counts by role (worker, chief, evaluator)."
    )
    restarts: RestartCounts | None = Field(
        None, description="Restarts so far, split into disruptions and failures."
    )
    last_restart: LastRestart | None = Field(None, description="The most recent restart.")
    progress: Progress | None = Field(None, description="Training progress from the chief.")
    start_time: Timestamp | None = Field(
        None, description="When the operator first created the job's Pods."
    )
    completion_time: Timestamp | None = Field(
        None, description="When the job succeeded or failed."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation this status reflects."
    )
    tracked_pods: dict[str, TrackedPod] | None = Field(
        None,
        description=(
            "Operator bookkeeping, keyed by Pod name: which incarnation (UID) of each Pod was "
            "seen and what of it was already counted, so every restart is counted exactly "
            "once across Pod re-creations and operator restarts."
        ),
    )


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
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Standard object metadata."
    )
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


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists: kopf bodies are read-only Mapping views."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value

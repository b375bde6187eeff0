"""KerasJobSpec: replicas, roles, checkpointing, restart and run policy."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from kerasjob.api.base import (
    _TEMPLATE_SCHEMA,
    DEFAULT_MOUNT_PATH,
    VOLUME_SOURCES,
    CleanPodPolicy,
    ReplicaRole,
    RestartPolicy,
    _cel,
    _Model,
)
from kerasjob.api.elastic import ElasticSpec
from kerasjob.api.parameter_servers import PS_RULES, ParameterServerSpec
from kerasjob.api.trainer import MESH_RULES, TrainerSpec
from kerasjob_contract import DEFAULT_TF_PORT
from kerasjob_contract.trainer_config import DEFAULTS as TRAINER_DEFAULTS


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
    "bin",
    "boot",
    "dev",
    "etc",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "proc",
    "sbin",
    "sys",
    "usr",
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
    + ", /".join(SYSTEM_DIRS)
    + ", not /"
    + ", /".join(RESERVED_DIRS)
    + " themselves"
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


#: A bucket location: the scheme, a bucket name as S3 and GCS allow (3-63 lowercase letters,
#: digits, '.', '-', '_'; alphanumeric at both ends), an optional prefix. One pattern for the
#: CRD's CEL rule and the operator's check (no backslash: CEL strings would read it).
LOCATION_PATTERN = r"^(s3|gs)://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?$"
LOCATION_FORM = (
    "checkpoint.location must be s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX] (a bucket "
    "name of 3-63 lowercase letters, digits, '.', '-' or '_')"
)
#: An S3-compatible store's or a GCS emulator's URL.
ENDPOINT_PATTERN = r"^https?://[^/?#]+(/.*)?$"
ENDPOINT_FORM = "checkpoint.endpoint must be an http:// or https:// URL"
VOLUME_OR_LOCATION = (
    "checkpoint.volume and checkpoint.location are exclusive: a job checkpoints to a volume "
    "or to a bucket"
)
BUCKET_ONLY = (
    "checkpoint.endpoint, region, pathStyle and credentials are for a checkpoint.location "
    "(a bucket)"
)
NEEDS_SHARED = (
    "a job with more than one Pod needs a shared checkpoint.volume (emptyDir is per Pod) "
    "or a checkpoint.location"
)
#: What a credentials Secret must hold, per scheme: the standard AWS variables (envFrom),
#: or a service account key file mounted read-only for Google's client libraries.
S3_SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
"""Required; AWS_SESSION_TOKEN is optional."""
GCS_KEY_FILE = "key.json"
GCS_KEY_DIR = "/var/run/secrets/kerasjob/gcs"
#: The variable Google's client libraries read a service account key file from.
GOOGLE_CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def location_problems(location: str | None, endpoint: str | None) -> list[str]:
    """The form of checkpoint.location and endpoint (the CRD's CEL rules, repeated for
    objects that never went through the API server)."""
    problems: list[str] = []
    if location is not None and not re.match(LOCATION_PATTERN, location):
        problems.append(LOCATION_FORM)
    if endpoint is not None and not re.match(ENDPOINT_PATTERN, endpoint):
        problems.append(ENDPOINT_FORM)
    return problems


def required_secret_keys(location: str) -> tuple[str, ...]:
    """The keys the credentials Secret of a job checkpointing to ``location`` must hold."""
    return S3_SECRET_KEYS if location.startswith("s3://") else (GCS_KEY_FILE,)


class CheckpointCredentials(_Model):
    """Where the bucket's credentials come from."""

    secret_name: str = Field(
        ...,
        min_length=1,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description=(
            "A Secret in the job's namespace. For s3:// its keys become the trainer's env "
            "(envFrom): AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, optionally "
            "AWS_SESSION_TOKEN. For gs:// it is mounted read-only at "
            f"{GCS_KEY_DIR} and must hold {GCS_KEY_FILE} (a service account key; "
            f"{GOOGLE_CREDENTIALS_ENV} points at it). Until it exists with those keys the "
            "job creates no Pods (condition Created False, reason CheckpointSecretMissing)."
        ),
    )


class CheckpointSpec(_Model):
    """Where BackupAndRestore state and the final model are written: a volume, or a bucket."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.mountPath.startsWith('/')",
                    "checkpoint.mountPath must be an absolute path",
                ),
                _cel(
                    f"self.mountPath.matches('{_NORMAL_PATH}') && "
                    f"!self.mountPath.matches('{_DOT_SEGMENT}')",
                    MOUNT_PATH_NOT_NORMAL,
                ),
                _cel(
                    f"!self.mountPath.matches('{_SYSTEM_PATH}') && "
                    f"!self.mountPath.matches('{_RESERVED_PATH}')",
                    MOUNT_PATH_SYSTEM,
                ),
                _cel("!has(self.volume) || !has(self.location)", VOLUME_OR_LOCATION),
                _cel(
                    "has(self.location) || (!has(self.endpoint) && !has(self.region) && "
                    "!has(self.pathStyle) && !has(self.credentials))",
                    BUCKET_ONLY,
                ),
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
            "unset (and no location), a single-Pod job gets an emptyDir. Not with location. "
            "Immutable."
        ),
        json_schema_extra={
            "type": "object",
            "additionalProperties": _TEMPLATE_SCHEMA,
            # Bounds the CEL cost estimate (the API server refuses unbounded maps); the rule
            # below then says "exactly one" in words.
            "maxProperties": 4,
            "x-kubernetes-validations": [
                _cel(
                    "self.size() == 1", "checkpoint.volume must have exactly one volume source key"
                ),
                _cel(
                    "self.all(k, k in " + repr(list(VOLUME_SOURCES)) + ")",
                    "checkpoint.volume has an unknown volume source; expected one of "
                    + ", ".join(VOLUME_SOURCES),
                ),
            ],
        },
    )
    location: str | None = Field(
        None,
        max_length=1024,
        description=(
            "A bucket instead of a volume: s3://BUCKET[/PREFIX] (AWS S3 or an S3-compatible "
            "store, see endpoint) or gs://BUCKET[/PREFIX] (Google Cloud Storage). Each job "
            "writes below its own prefix, <location>/<namespace>/<name>/<uid>, passed to the "
            "trainer as KERASJOB_CHECKPOINT_LOCATION, so two jobs never share state and a job "
            "re-created under the same name starts fresh; every Pod gets an emptyDir at "
            "mountPath for local staging. Not with volume. Immutable."
        ),
        json_schema_extra={
            "x-kubernetes-validations": [_cel(f"self.matches('{LOCATION_PATTERN}')", LOCATION_FORM)]
        },
    )
    endpoint: str | None = Field(
        None,
        max_length=2048,
        description=(
            "With location: the URL of an S3-compatible store (MinIO, Ceph, versitygw ...) or "
            "of a GCS emulator, http:// or https://. Unset: the cloud's own. Immutable."
        ),
        json_schema_extra={
            "x-kubernetes-validations": [_cel(f"self.matches('{ENDPOINT_PATTERN}')", ENDPOINT_FORM)]
        },
    )
    region: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="With an s3:// location: the bucket's region. Immutable.",
    )
    path_style: bool | None = Field(
        None,
        description=(
            "With an s3:// location: path-style addressing (<endpoint>/<bucket>/<key>), which "
            "most S3-compatible stores need; unset or false: virtual-hosted style. Immutable."
        ),
    )
    credentials: CheckpointCredentials | None = Field(
        None,
        description=(
            "With location: a Secret holding the bucket's credentials. Unset: the Pod's own "
            "identity (GKE Workload Identity, EKS Pod Identity or IRSA through the Pods' "
            "service account, set in spec.template). Immutable."
        ),
    )
    mount_path: str = Field(
        DEFAULT_MOUNT_PATH,
        min_length=1,
        max_length=1024,
        description=(
            "Where the volume (with location: a Pod-local emptyDir) is mounted in every Pod. "
            "Each job uses its own directory below it, <mountPath>/<namespace>/<name>/<uid>, "
            "passed to the trainer as KERASJOB_CHECKPOINT_DIR, so jobs sharing one volume "
            "never collide and a job re-created under the same name starts fresh. Immutable. "
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


#: A domain-prefixed path, as Kubernetes' Job spec.managedBy (e.g. kueue.x-k8s.io/multikueue).
MANAGED_BY_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-._a-zA-Z0-9/]+$"
)


#: Backend jax has workers only (see TrainerSpec.backend): the CRD's CEL rules and the
#: operator's validation say so in the same words.
JAX_NO_CHIEF = (
    "backend jax: process 0 (worker 0) is the chief; spec.chief is for backend tensorflow"
)
JAX_NO_EVALUATOR = (
    "backend jax: the side-car evaluator runs tf-keras; spec.evaluator is for backend tensorflow"
)


def _immutable(field: str) -> JsonDict:
    return _cel("self == oldSelf", f"{field} is immutable")


def _immutable_optional(field: str) -> JsonDict:
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
                _immutable_optional("ps"),
                *PS_RULES,
                _cel(
                    "has(self.elastic) == has(oldSelf.elastic) && "
                    "(!has(self.elastic) || self.elastic == oldSelf.elastic)",
                    "elastic cannot be added, removed or changed after creation",
                ),
                _cel(
                    "has(self.managedBy) == has(oldSelf.managedBy) && "
                    "(!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
                    "managedBy is immutable",
                ),
                _cel(
                    "self.trainer.backend != 'jax' || !has(self.chief) || self.chief.replicas == 0",
                    JAX_NO_CHIEF,
                ),
                _cel(
                    "self.trainer.backend != 'jax' || !has(self.evaluator) || "
                    "self.evaluator.replicas == 0",
                    JAX_NO_EVALUATOR,
                ),
                _cel(
                    "!has(self.elastic) || self.elastic.minWorkers <= self.workers",
                    "elastic.minWorkers must be at most workers (the preferred size)",
                ),
                _cel(
                    "(self.workers == 1 && (!has(self.chief) || self.chief.replicas == 0) && "
                    "(!has(self.evaluator) || self.evaluator.replicas == 0)) || "
                    "(has(self.checkpoint.volume) && !('emptyDir' in self.checkpoint.volume)) "
                    "|| has(self.checkpoint.location)",
                    NEEDS_SHARED,
                ),
                *MESH_RULES,
            ]
        }
    )

    workers: int = Field(
        1,
        ge=1,
        le=1000,
        description=(
            "Number of workers (MultiWorkerMirroredStrategy workers, or JAX processes for "
            "backend jax). Worker 0 is the chief (writes checkpoints and the final model) "
            "unless spec.chief has 1 replica. For an elastic "
            "job, the preferred size (status.elastic.workers says how many run now). "
            "Immutable. Default: 1."
        ),
        json_schema_extra={"x-kubernetes-validations": [_immutable("workers")]},
    )
    elastic: ElasticSpec | None = Field(
        None,
        description=(
            "Elastic training: when capacity for a worker is gone the job shrinks (down to "
            "elastic.minWorkers) and trains on, and grows back to spec.workers when capacity "
            "returns. Each resize restarts all Pods from the last backup with a TF_CONFIG "
            "of the new size; it is neither a failure nor a disruption. Unset: the job "
            "always runs with spec.workers. Cannot be added, removed or changed after "
            "creation."
        ),
    )
    chief: ReplicaSpec | None = Field(
        None,
        description=(
            "An optional dedicated chief Pod (replicas 0 or 1). When present with 1 replica "
            "it is the task whose success completes the job. Backend tensorflow only. Cannot "
            "be added, removed or resized after creation."
        ),
    )
    evaluator: ReplicaSpec | None = Field(
        None,
        description=(
            "An optional side-car evaluator Pod (replicas 0 or 1) that evaluates the chief's "
            "checkpoints. It is not part of the TF_CONFIG cluster and does not decide the "
            "job's outcome. Backend tensorflow only. Cannot be added, removed or resized "
            "after creation."
        ),
    )
    ps: ParameterServerSpec | None = Field(
        None,
        description=(
            "Parameter servers: with spec.ps the job trains with tf-keras "
            "ParameterServerStrategy (variables on the ps Pods, the chief coordinating the "
            "workers through ClusterCoordinator) instead of MultiWorkerMirroredStrategy. "
            "Needs spec.chief (1 replica) and backend tensorflow. A lost worker is re-created "
            "alone while the chief trains on; a lost ps or chief restarts the group from the "
            "last backup. Cannot be added, removed or resized after creation."
        ),
    )
    port: int = Field(
        DEFAULT_TF_PORT,
        ge=1,
        le=65535,
        description=(
            "The gRPC port every task listens on (backend jax: worker 0's coordinator), "
            "published through the job's headless Service. Immutable. Default: 2222."
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
            "variables, KERAS_BACKEND, KERAS_DISTRIBUTION_* and JAX_* (backend jax), "
            "hostname, subdomain and restartPolicy. Changes apply to Pods created afterwards."
        ),
        json_schema_extra=_TEMPLATE_SCHEMA,
    )
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec,
        description=(
            "The volume, or the bucket (location), that holds BackupAndRestore state "
            "(resuming after restarts) and the final model. Immutable."
        ),
        json_schema_extra={"default": {}, "x-kubernetes-validations": [_immutable("checkpoint")]},
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
    managed_by: str | None = Field(
        None,
        max_length=63,
        pattern=MANAGED_BY_PATTERN,
        description=(
            "The controller that runs this job. Unset or 'kerasjob.dev/operator': the "
            "kerasjob operator. Any other domain-prefixed name hands the job to that "
            "controller: the operator then creates no Pod, Service or gang for it and never "
            "writes its status (Kueue's MultiKueue sets 'kueue.x-k8s.io/multikueue', runs a "
            "copy of the job on a worker cluster and copies its status back; with Kueue the "
            "operator still makes the job's Kueue Workload, which MultiKueue dispatches). "
            "Immutable."
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

    def replicas(self, workers: int | None = None) -> dict[ReplicaRole, int]:
        """Pods per role, roles with 0 replicas left out; workers first, then chief, evaluator.
        ``workers``: an elastic job's current size instead of spec.workers."""
        out: dict[ReplicaRole, int] = {ReplicaRole.WORKER: workers or self.workers}
        if self.chief is not None and self.chief.replicas > 0:
            out[ReplicaRole.CHIEF] = self.chief.replicas
        if self.evaluator is not None and self.evaluator.replicas > 0:
            out[ReplicaRole.EVALUATOR] = self.evaluator.replicas
        if self.ps is not None:
            out[ReplicaRole.PS] = self.ps.replicas
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

    def role_spec(self, role: ReplicaRole) -> ReplicaSpec | ParameterServerSpec | None:
        """The ReplicaSpec of a dedicated role (None for workers)."""
        if role is ReplicaRole.CHIEF:
            return self.chief
        if role is ReplicaRole.EVALUATOR:
            return self.evaluator
        if role is ReplicaRole.PS:
            return self.ps
        return None

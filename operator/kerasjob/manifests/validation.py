"""Semantic validation of a KerasJob: the problems its schema and CEL rules cannot catch
(names that make too-long Pod names, a template's clashes with what the operator owns, a
checkpoint volume that is not shared ...). An empty list means the job can run; the
controller fails a job with problems (reason InvalidSpec) and creates nothing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pydantic

from kerasjob.api import (
    BUCKET_ONLY,
    JAX_NO_CHIEF,
    JAX_NO_EVALUATOR,
    LABEL_VALUE_MAX,
    LABEL_VALUE_PATTERN,
    PS_NEEDS_CHIEF,
    PS_NEEDS_TENSORFLOW,
    PS_NO_EVALUATOR,
    PS_NOT_ELASTIC,
    VOLUME_OR_LOCATION,
    Backend,
    CheckpointSpec,
    DatasetSource,
    KerasJob,
    ReplicaRole,
    location_problems,
    mount_path_problem,
)
from kerasjob.k8s import bounded
from kerasjob.manifests.children import (
    CHECKPOINT_VOLUME,
    GCS_CREDENTIALS_VOLUME,
    OWNED_ENV,
    OWNED_POD_SPEC_FIELDS,
    JobLike,
    _job,
)
from kerasjob.manifests.tf_config import pod_name
from kerasjob_contract import DEFAULT_METRICS_PORT
from kerasjob_contract.mesh import MeshError, job_problems, parse_mesh
from kerasjob_contract.trainer_config import shards_builtin

_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Label and annotation keys and label values, as Kubernetes checks them (apimachinery's
# IsQualifiedName, IsValidLabelValue; ValidateAnnotations' total size).
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)
ANNOTATIONS_MAX_BYTES = 256 * 1024


def validation_problems(error: pydantic.ValidationError) -> list[str]:
    """A pydantic error as one problem per field: ``spec.workers: Input should be ...``."""
    return [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in error.errors()]


def validate_job(obj: JobLike) -> list[str]:
    """Problems the CRD schema cannot catch; an empty list means the job can run.

    The controller marks a job with any problem Failed (reason InvalidSpec) and creates
    nothing. Also repeats the CRD's CEL rules, for objects that never went through the API
    server (CLI, SDK, tests).
    """
    too_big = bounded.spec_problems(
        obj.get("spec") if isinstance(obj, Mapping) else _schemaless_parts(obj)
    )
    if too_big:  # before anything walks the spec recursively
        return too_big
    try:
        j = _job(obj)
    except pydantic.ValidationError as e:
        return validation_problems(e)
    problems = [
        *_name_problems(j),
        *_spec_problems(j),
        *_elastic_problems(j),
        *_ps_problems(j),
        *_mesh_problems(j),
    ]
    for where, tpl in _templates(j):
        problems.extend(_template_problems(where, tpl, j.spec.checkpoint.mount_path))
    return problems


def _name_problems(j: KerasJob) -> list[str]:
    """metadata.name names the Service and, with role and index, every Pod (hostnames)."""
    name = j.name
    if not name:
        return ["metadata.name is required"]
    if not (_DNS_1035_LABEL.match(name) and len(name) <= 63):
        return [
            f"metadata.name {name!r} must be a DNS-1035 label (at most 63 lowercase letters, "
            "digits and '-', starting with a letter): it names the job's Service"
        ]
    longest = max((pod_name(name, r, i) for r, i in j.spec.tasks()), key=len)
    if len(longest) > 63:
        return [
            f"metadata.name {name!r} is too long: Pod name/hostname {longest!r} must be "
            "at most 63 characters"
        ]
    return []


def _spec_problems(j: KerasJob) -> list[str]:
    """The port, the dataset, the checkpoint volume and the backend's roles."""
    problems: list[str] = []
    spec = j.spec
    if spec.port == DEFAULT_METRICS_PORT:
        problems.append(f"spec.port {spec.port} collides with the metrics port")
    ds = spec.trainer.dataset
    if ds.source is DatasetSource.PATH and not ds.path:
        problems.append("spec.trainer.dataset.path is required when dataset.source is 'path'")
    ckpt = spec.checkpoint
    if not ckpt.mount_path.startswith("/"):
        problems.append("spec.checkpoint.mountPath must be an absolute path")
    elif (mount_problem := mount_path_problem(ckpt.mount_path)) is not None:
        problems.append(f"spec.{mount_problem}")
    if ckpt.volume is not None and len(ckpt.volume) != 1:
        problems.append("spec.checkpoint.volume must have exactly one volume source key")
    problems.extend(_bucket_problems(ckpt))
    shared = (ckpt.volume is not None and "emptyDir" not in ckpt.volume) or (
        ckpt.location is not None
    )
    if len(spec.tasks()) > 1 and not shared:
        problems.append(
            "a job with more than one Pod needs a shared spec.checkpoint.volume "
            "(emptyDir is per Pod) or a spec.checkpoint.location"
        )
    if spec.trainer.backend is Backend.JAX:  # workers only (the CRD's CEL rules, repeated)
        roles = spec.replicas()
        if ReplicaRole.CHIEF in roles:
            problems.append(JAX_NO_CHIEF)
        if ReplicaRole.EVALUATOR in roles:
            problems.append(JAX_NO_EVALUATOR)
    return problems


def _bucket_problems(ckpt: CheckpointSpec) -> list[str]:
    """checkpoint.location and its settings (the CRD's CEL rules, repeated for objects that
    never went through the API server)."""
    problems = [f"spec.{p}" for p in location_problems(ckpt.location, ckpt.endpoint)]
    if ckpt.volume is not None and ckpt.location is not None:
        problems.append(f"spec.{VOLUME_OR_LOCATION}")
    settings = (ckpt.endpoint, ckpt.region, ckpt.path_style, ckpt.credentials)
    if ckpt.location is None and any(v is not None for v in settings):
        problems.append(f"spec.{BUCKET_ONLY}")
    return problems


def _ps_problems(j: KerasJob) -> list[str]:
    """spec.ps: a chief to coordinate, tf-keras, no elastic, no evaluator (the CRD's CEL
    rules, repeated for objects that never went through the API server)."""
    spec = j.spec
    if spec.ps is None:
        return []
    rules = (
        (spec.has_dedicated_chief(), PS_NEEDS_CHIEF),
        (spec.trainer.backend is Backend.TENSORFLOW, PS_NEEDS_TENSORFLOW),
        (spec.elastic is None, PS_NOT_ELASTIC),
        (ReplicaRole.EVALUATOR not in spec.replicas(), PS_NO_EVALUATOR),
    )
    return [message for ok, message in rules if not ok]


def _mesh_problems(j: KerasJob) -> list[str]:
    """spec.trainer.mesh: the contract's rules (the CRD's CEL rules, the same words, repeated
    for objects that never went through the API server)."""
    spec, trainer = j.spec, j.spec.trainer
    try:
        mesh = parse_mesh([a.model_dump() for a in trainer.mesh or []])
    except MeshError as e:  # e.g. two axes of one name (the CRD's list-map keys)
        return [f"spec.trainer.{e}"]
    if mesh is None:
        return []
    return job_problems(
        mesh,
        backend=trainer.backend.value,
        builtin_model=shards_builtin(trainer.model, trainer.command),
        workers=spec.workers,
        devices_per_process=trainer.devices_per_process,
        elastic=spec.elastic is not None,
    )


def _elastic_problems(j: KerasJob) -> list[str]:
    """minWorkers within the preferred size; for the bundled trainer (KeepGlobalBatch), a
    global batch every size from minWorkers up splits evenly (the trainer exits 78 else)."""
    spec, elastic = j.spec, j.spec.elastic
    if elastic is None:
        return []
    if elastic.min_workers > spec.workers:
        return [
            f"spec.elastic.minWorkers ({elastic.min_workers}) must be at most "
            f"spec.workers ({spec.workers}), the preferred size"
        ]
    if spec.trainer.command:  # a user's program picks its own batch (the session checks)
        return []
    chief = 1 if spec.has_dedicated_chief() else 0
    per_replica = spec.trainer.batch_size_per_replica
    global_batch = per_replica * (spec.workers + chief)
    uneven = [n for n in range(elastic.min_workers, spec.workers + 1) if global_batch % (n + chief)]
    if uneven:
        return [
            f"spec.trainer.batchSizePerReplica {per_replica}: the global batch "
            f"{global_batch} (kept by elastic.batchPolicy KeepGlobalBatch) cannot be split "
            f"evenly across {uneven[0]} worker(s){' and the chief' if chief else ''}; "
            f"choose a batch size that every size from elastic.minWorkers "
            f"({elastic.min_workers}) to workers ({spec.workers}) divides"
        ]
    return []


def _schemaless_parts(j: KerasJob) -> dict[str, Any]:
    """The spec fields without a schema (any depth, any size), as `bounded` checks them."""
    s = j.spec
    return {
        "template": s.template,
        "chief": {"template": s.chief.template} if s.chief else None,
        "evaluator": {"template": s.evaluator.template} if s.evaluator else None,
        "ps": {"template": s.ps.template} if s.ps else None,
        "checkpoint": {"volume": s.checkpoint.volume},
    }


def _templates(j: KerasJob) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if j.spec.template is not None:
        out.append(("spec.template", j.spec.template))
    for role in (ReplicaRole.CHIEF, ReplicaRole.EVALUATOR, ReplicaRole.PS):
        rs = j.spec.role_spec(role)
        if rs is not None and rs.template is not None:
            out.append((f"spec.{role.value}.template", rs.template))
    return out


def _template_problems(where: str, tpl: Any, mount_path: str) -> list[str]:
    problems: list[str] = []
    if not isinstance(tpl, Mapping):
        return [f"{where} must be an object (a PodTemplateSpec)"]
    unknown = sorted(set(tpl) - {"metadata", "spec"})
    if unknown:
        problems.append(f"{where} may only have metadata and spec, not {', '.join(unknown)}")
    problems.extend(_metadata_problems(where, tpl.get("metadata")))
    pod_spec = tpl.get("spec") or {}
    if not isinstance(pod_spec, Mapping):
        return [*problems, f"{where}.spec must be an object"]
    for key in OWNED_POD_SPEC_FIELDS:
        if key in pod_spec:
            problems.append(f"{where}.spec.{key} is set by the operator and may not be given")
    for key in ("containers", "initContainers", "volumes"):
        items = pod_spec.get(key)
        if items is not None and not (
            isinstance(items, list) and all(isinstance(i, Mapping) for i in items)
        ):
            problems.append(f"{where}.spec.{key} must be a list of objects")
            return problems
    containers = pod_spec.get("containers") or []
    for i, c in enumerate(containers):
        # The first container may be nameless: it becomes the trainer.
        if i > 0 and not c.get("name"):
            problems.append(f"{where}.spec.containers[{i}] needs a name")
        env = c.get("env") or []
        owned = sorted(OWNED_ENV.intersection(e.get("name") for e in env if isinstance(e, Mapping)))
        if owned:
            problems.append(
                f"{where}.spec.containers[{i}].env sets {', '.join(owned)}, which the operator sets"
            )
        for m in c.get("volumeMounts") or []:
            if isinstance(m, Mapping) and m.get("mountPath") == mount_path:
                problems.append(
                    f"{where}.spec.containers[{i}] mounts something at the checkpoint "
                    f"mountPath {mount_path}"
                )
    for v in pod_spec.get("volumes") or []:
        if v.get("name") == CHECKPOINT_VOLUME:
            problems.append(
                f"{where}.spec.volumes may not define {CHECKPOINT_VOLUME!r}: use "
                "spec.checkpoint.volume"
            )
        if v.get("name") == GCS_CREDENTIALS_VOLUME:
            problems.append(
                f"{where}.spec.volumes may not define {GCS_CREDENTIALS_VOLUME!r}: use "
                "spec.checkpoint.credentials"
            )
    return problems


def _metadata_problems(where: str, meta: Any) -> list[str]:
    """The template's labels and annotations, as the API server would check the Pod's."""
    if meta is None:
        return []
    if not isinstance(meta, Mapping):
        return [f"{where}.metadata must be an object"]
    problems: list[str] = []
    for field in ("labels", "annotations"):
        items = meta.get(field)
        if items is not None and not isinstance(items, Mapping):
            problems.append(f"{where}.metadata.{field} must be an object")
            continue
        for key, value in (items or {}).items():
            at = f"{where}.metadata.{field}[{_shown(key)}]"
            problems.extend(f"{at}: {p}" for p in _key_problems(str(key)))
            if value is not None and not isinstance(value, str):
                problems.append(f"{at}: the value must be a string")
            elif field == "labels" and value is not None:
                problems.extend(f"{at}: {p}" for p in _label_value_problems(value))
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        size = sum(len(str(k)) + len(str(v or "")) for k, v in annotations.items())
        if size > ANNOTATIONS_MAX_BYTES:
            problems.append(
                f"{where}.metadata.annotations: {size} bytes in all; at most "
                f"{ANNOTATIONS_MAX_BYTES} (256 KiB) are allowed"
            )
    return problems


def _shown(key: Any) -> str:
    text = str(key)
    return repr(text if len(text) <= 80 else text[:60] + "...")


def _key_problems(key: str) -> list[str]:
    """A label or annotation key: [prefix/]name (a DNS subdomain, and a qualified name)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _DNS_1123_SUBDOMAIN.match(prefix)):
        return ["the key's prefix must be a DNS subdomain (lowercase, at most 253 characters)"]
    if not (name and len(name) <= 63 and _QUALIFIED_NAME.match(name)):
        return [
            "the key's name must be at most 63 characters, alphanumeric at both ends, "
            "with '-', '_' and '.' between"
        ]
    return []


def _label_value_problems(value: str) -> list[str]:
    if len(value) > LABEL_VALUE_MAX:
        return [f"a label value must be at most {LABEL_VALUE_MAX} characters (it has {len(value)})"]
    if not _LABEL_VALUE.match(value):
        return ["a label value must be alphanumeric at both ends, with '-', '_' and '.' between"]
    return []

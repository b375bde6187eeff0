"""The desired children of a KerasJob: its headless Service and one Pod per task.

Pure functions: a KerasJob in, plain manifests out, no API calls. Each manifest is a Jinja2
template (templates/*.yaml.j2) rendered with the operator's defaults, then the user's
spec.template (and the role's own template) merged over it (merge.py), then the fields the
operator owns set again, so that no template can break TF_CONFIG (or a JAX process's
identity), naming or restarts. What differs per spec.trainer.backend (the identity
variables, the ports the job's Pods reach each other on) comes from `runtimes`.

The container named "trainer" is the trainer. If a user template has containers but none
named "trainer", its first container is taken as the trainer and renamed "trainer", so the
controller always finds the trainer's status under that name.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kerasjob.api import (
    GCS_KEY_DIR,
    GCS_KEY_FILE,
    GOOGLE_CREDENTIALS_ENV,
    KerasJob,
    ReplicaRole,
    RestartPolicy,
    checkpoint_dir,
    checkpoint_location,
    labels,
)
from kerasjob.manifests.merge import deep_merge, merge_into
from kerasjob.manifests.runtimes import (
    IDENTITY_NAMES,
    DefaultImages,
    default_image_for,
    runtime_for,
)
from kerasjob.manifests.templating import render
from kerasjob.manifests.tf_config import pod_name
from kerasjob.planner.elastic import PROBE_ROLE, probe_name
from kerasjob_contract import DEFAULT_METRICS_PORT, TRAINER_CONTAINER, Env
from kerasjob_contract.trainer_config import PARAMETER_SERVER

#: Name of the checkpoint volume in every Pod; reserved (a template may not define it).
CHECKPOINT_VOLUME = "kerasjob-checkpoint"
#: What the operator tells the trainer of a job's bucket (spec.checkpoint.location), each
#: variable only when its field is set.
BUCKET_ENV = (
    Env.CHECKPOINT_LOCATION.value,
    Env.CHECKPOINT_ENDPOINT.value,
    Env.CHECKPOINT_REGION.value,
    Env.CHECKPOINT_PATH_STYLE.value,
)
#: The writable /tmp of the trainer (its root filesystem is read-only by default).
TMP_VOLUME = "kerasjob-tmp"
DEFAULT_COMMAND = ("python", "-m", "kerasjob_trainer")
#: Seconds between SIGTERM and SIGKILL: enough for the trainer to save a backup (exit 42).
DEFAULT_TERMINATION_GRACE_SECONDS = 60
#: Fields of a role's ReplicaSpec/job template that the operator sets and a template may not.
OWNED_POD_SPEC_FIELDS = ("hostname", "subdomain", "restartPolicy")
#: Variables the operator owns; a template that sets one of them is invalid. The identity
#: variables of every backend (TF_CONFIG, KERAS_BACKEND, KERAS_DISTRIBUTION_*, JAX_*) are
#: owned whatever the job's backend: a template never gives a process a second identity.
OWNED_ENV = (
    frozenset(
        {
            Env.JOB_NAME.value,
            Env.NAMESPACE.value,
            Env.ROLE.value,
            Env.INDEX.value,
            Env.CHECKPOINT_DIR.value,
            Env.RESTART_ATTEMPT.value,
            *BUCKET_ENV,
        }
    )
    | IDENTITY_NAMES
)
#: The gs:// credentials Secret's volume (reserved, like the checkpoint volume).
GCS_CREDENTIALS_VOLUME = "kerasjob-gcs-credentials"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

JobLike = KerasJob | Mapping[str, Any]


def _job(job: JobLike) -> KerasJob:
    return job if isinstance(job, KerasJob) else KerasJob.from_body(job)


# --- small pieces the controller may use too -----------------------------------------------


def owner_reference(job: JobLike) -> dict[str, Any]:
    """The ownerReference every child carries: garbage-collected with the job."""
    j = _job(job)
    return labels.controller_reference(j.name, j.uid)


def pod_restart_policy(policy: RestartPolicy) -> str:
    """The Pod's restartPolicy, whatever the job's: always Never.

    Every restart is the operator's: it sees each exit, counts it, and re-creates the Pod.
    The kubelet would restart a container in place under CrashLoopBackOff (10 s, doubling to
    5 min), so that the n-th preemption of a run costs minutes: measured on the real node,
    five SIGTERM disruptions of one job took 8, 19, 31, 49 and 89 s to the first new step with
    in-place restarts (bench/recovery.py). A re-created Pod has no crash history.
    The job's ``restartPolicy`` still decides what a failure means (restart_policy.decide).
    """
    del policy  # the job's policy is applied by the controller, never by the kubelet
    return "Never"


def pod_labels(
    job_name: str, role: ReplicaRole | str, index: int, *, is_chief: bool
) -> dict[str, str]:
    """Labels of one task's Pod."""
    out = {
        **common_labels(job_name),
        labels.REPLICA_TYPE: ReplicaRole(role).value,
        labels.REPLICA_INDEX: str(index),
    }
    if is_chief:
        out[labels.CHIEF] = "true"
    return out


def common_labels(job_name: str) -> dict[str, str]:
    """Labels every child of a job carries."""
    return {
        labels.JOB_NAME: job_name,
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
        labels.APP_NAME: labels.APP_NAME_VALUE,
        labels.APP_INSTANCE: job_name,
    }


def job_checkpoint_location(job: JobLike) -> str | None:
    """<location>/<namespace>/<name>/<uid>: the job's KERASJOB_CHECKPOINT_LOCATION (None:
    the job checkpoints to a volume)."""
    j = _job(job)
    location = j.spec.checkpoint.location
    if location is None:
        return None
    return checkpoint_location(location, j.namespace, j.name, j.uid)


def bucket_env(job: JobLike) -> dict[str, str]:
    """The variables that tell the trainer of the job's bucket (none for a volume):
    KERASJOB_CHECKPOINT_LOCATION (the job's own prefix), _ENDPOINT, _REGION, _PATH_STYLE
    ("true"/"false"), each only when set; and for a gs:// Secret,
    GOOGLE_APPLICATION_CREDENTIALS at its key file."""
    j = _job(job)
    ckpt = j.spec.checkpoint
    location = job_checkpoint_location(j)
    if ckpt.location is None or location is None:
        return {}
    out = {Env.CHECKPOINT_LOCATION.value: location}
    if ckpt.endpoint is not None:
        out[Env.CHECKPOINT_ENDPOINT.value] = ckpt.endpoint
    if ckpt.region is not None:
        out[Env.CHECKPOINT_REGION.value] = ckpt.region
    if ckpt.path_style is not None:
        out[Env.CHECKPOINT_PATH_STYLE.value] = "true" if ckpt.path_style else "false"
    if ckpt.credentials is not None and ckpt.location.startswith("gs://"):
        out[GOOGLE_CREDENTIALS_ENV] = f"{GCS_KEY_DIR}/{GCS_KEY_FILE}"
    return out


def _bucket_credentials(j: KerasJob, pod_spec: dict[str, Any], trainer: dict[str, Any]) -> None:
    """The credentials Secret a job's bucket names, in the trainer (in place): for s3:// its
    keys as env (envFrom), for gs:// mounted read-only at `GCS_KEY_DIR`."""
    ckpt = j.spec.checkpoint
    if ckpt.location is None or ckpt.credentials is None:
        return
    secret = ckpt.credentials.secret_name
    if ckpt.location.startswith("s3://"):
        ref = {"secretRef": {"name": secret}}
        env_from = [e for e in trainer.get("envFrom") or [] if e != ref]
        trainer["envFrom"] = [*env_from, ref]
        return
    volume = {"name": GCS_CREDENTIALS_VOLUME, "secret": {"secretName": secret}}
    pod_spec["volumes"] = [
        v
        for v in pod_spec.get("volumes") or []
        if not (isinstance(v, Mapping) and v.get("name") == GCS_CREDENTIALS_VOLUME)
    ] + [volume]
    mount = {"name": GCS_CREDENTIALS_VOLUME, "mountPath": GCS_KEY_DIR, "readOnly": True}
    trainer["volumeMounts"] = [
        m
        for m in trainer.get("volumeMounts") or []
        if not (
            isinstance(m, Mapping)
            and (m.get("name") == GCS_CREDENTIALS_VOLUME or m.get("mountPath") == GCS_KEY_DIR)
        )
    ] + [mount]


def job_checkpoint_dir(job: JobLike) -> str:
    """<mountPath>/<namespace>/<name>/<uid>: the job's KERASJOB_CHECKPOINT_DIR."""
    j = _job(job)
    return checkpoint_dir(j.spec.checkpoint.mount_path, j.namespace, j.name, j.uid)


def trainer_config(job: JobLike) -> dict[str, Any]:
    """The object passed to the bundled trainer as KERASJOB_TRAINER_CONFIG.

    spec.trainer exactly as the API spells it (camelCase, unset fields left out; a path
    dataset's format is inferred by the trainer the same way as `DatasetSpec.resolved_format`)
    plus checkpoint.saveFreq, as `kerasjob_contract.Env.TRAINER_CONFIG` documents.
    """
    j = _job(job)
    out = j.spec.trainer.model_dump(by_alias=True, exclude_none=True, mode="json")
    out["saveFreq"] = j.spec.checkpoint.save_freq
    if j.spec.elastic is not None:  # the TF_CONFIG may name fewer workers than preferred
        out["elastic"] = {
            "preferredWorkers": j.spec.workers,
            "batchPolicy": j.spec.elastic.batch_policy.value,
        }
    if j.spec.ps is not None:  # the trainer's runtime for ParameterServerStrategy
        out["strategy"] = PARAMETER_SERVER
    return out


def role_template(job: JobLike, role: ReplicaRole | str) -> dict[str, Any]:
    """spec.template with the role's own template (chief/evaluator) merged over it."""
    j = _job(job)
    out = _normalise_template(j.spec.template or {})
    role_spec = j.spec.role_spec(ReplicaRole(role))
    if role_spec is not None and role_spec.template:
        out = deep_merge(out, _normalise_template(role_spec.template))
    return out


# --- the children ------------------------------------------------------------------------


def build_service(job: JobLike) -> dict[str, Any]:
    """The job's headless Service, named after the job."""
    return render("service.yaml.j2", **_shared_child(_job(job)))


def _shared_child(j: KerasJob) -> dict[str, Any]:
    """What the job's Service and NetworkPolicy templates share."""
    return {
        "job_name": j.name,
        "namespace": j.namespace,
        "labels": common_labels(j.name),
        "owner_references": [owner_reference(j)],
        "selector": labels.selector(j.name),
        "port": j.spec.port,
    }


def build_network_policy(
    job: JobLike, *, metrics_from: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The job's NetworkPolicy, named after the job: ingress to its Pods' training ports
    (the backend's `Runtime.ingress_ports`: the TF port; every TCP port for jax) only from
    the job's own Pods; to the metrics port only from ``metrics_from`` (NetworkPolicyPeers);
    nothing else (templates/networkpolicy.yaml.j2)."""
    j = _job(job)
    return render(
        "networkpolicy.yaml.j2",
        **_shared_child(j),
        ports=runtime_for(j.spec.trainer.backend).ingress_ports(j.spec.port),
        metrics_port=DEFAULT_METRICS_PORT,
        metrics_from=[dict(peer) for peer in metrics_from],
    )


def build_pod(
    job: JobLike,
    role: ReplicaRole | str,
    index: int,
    *,
    default_image: DefaultImages,
    restart_attempt: int = 0,
    workers: int | None = None,
    node_lost_toleration: int | None = None,
) -> dict[str, Any]:
    """The Pod of task (role, index): <job>-<role>-<index>.

    default_image: the operator's trainer image, used unless spec.image or the template's
    trainer container names one: one for every backend, or backend -> image
    (`runtimes.default_images(config)`), of which the job's backend picks its own.
    restart_attempt: disruptions + failures so far; it is in the Pod's env and annotations.
    workers: an elastic job's current size (its TF_CONFIG, or for jax its process count,
    names that many workers); None: spec.workers. The identity variables come from the
    backend's runtime. node_lost_toleration: tolerationSeconds for the NotReady/unreachable
    node taints (`node_lost_tolerations`); None: Kubernetes'.
    """
    j = _job(job)
    role = ReplicaRole(role)
    spec = j.spec
    name = pod_name(j.name, role, index)
    owned_env = _owned_env(j, role, index, workers, restart_attempt)
    annotations = {labels.RESTART_ATTEMPT: str(restart_attempt)}
    if "generation" in j.metadata:
        annotations[labels.JOB_GENERATION] = str(j.metadata["generation"])
    pod_lbls = pod_labels(j.name, role, index, is_chief=(role, index) == spec.chief_task())
    # A bucket's Pods (and a single Pod without a volume) stage on a Pod-local emptyDir.
    volume = {"name": CHECKPOINT_VOLUME, **(spec.checkpoint.volume or {"emptyDir": {}})}
    pod = _render_pod(j, name, pod_lbls, annotations, owned_env, volume, default_image)
    owned_spec = {key: pod["spec"][key] for key in OWNED_POD_SPEC_FIELDS}
    # The pod is freshly rendered, ours alone: the template is merged into it in place.
    template = role_template(j, role)
    merge_into(pod["metadata"], template.get("metadata") or {})
    merge_into(pod["spec"], template.get("spec") or {})

    # The operator's fields win over anything a template said.
    meta = pod["metadata"]
    meta.update(name=name, namespace=j.namespace, ownerReferences=[owner_reference(j)])
    meta["labels"] = {**(meta.get("labels") or {}), **pod_lbls}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    meta.pop("generateName", None)
    pod_spec = pod["spec"]
    pod_spec.update(owned_spec)
    trainer = _trainer_container(pod_spec)
    if trainer is not None:  # else a template removed it: the API server says what is wrong
        trainer["env"] = _keep_owned_env(trainer.get("env") or [], owned_env)
        _bucket_credentials(j, pod_spec, trainer)
    pod_spec["volumes"] = [
        volume if isinstance(v, Mapping) and v.get("name") == CHECKPOINT_VOLUME else v
        for v in pod_spec.get("volumes") or []
    ]
    if node_lost_toleration is not None:
        pod_spec["tolerations"] = node_lost_tolerations(
            pod_spec.get("tolerations"), node_lost_toleration
        )
    return pod


def _owned_env(
    j: KerasJob, role: ReplicaRole, index: int, workers: int | None, restart_attempt: int
) -> dict[str, str]:
    """The env the operator owns: the backend's identity variables and the task's own."""
    spec = j.spec
    runtime = runtime_for(spec.trainer.backend)
    return {
        **runtime.identity_env(j.name, j.namespace, spec.replicas(workers), spec.port, role, index),
        Env.JOB_NAME.value: j.name,
        Env.NAMESPACE.value: j.namespace,
        Env.ROLE.value: role.value,
        Env.INDEX.value: str(index),
        Env.CHECKPOINT_DIR.value: job_checkpoint_dir(j),
        **bucket_env(j),
        Env.RESTART_ATTEMPT.value: str(restart_attempt),
    }


def _render_pod(
    j: KerasJob,
    name: str,
    pod_lbls: Mapping[str, str],
    annotations: Mapping[str, str],
    owned_env: Mapping[str, str],
    volume: Mapping[str, Any],
    default_image: DefaultImages,
) -> dict[str, Any]:
    """pod.yaml.j2 for the task, before the role's template is merged in."""
    spec = j.spec
    default_env = {
        Env.TRAINER_CONFIG.value: json.dumps(trainer_config(j), separators=(",", ":")),
        Env.METRICS_PORT.value: str(DEFAULT_METRICS_PORT),
        **runtime_for(spec.trainer.backend).default_env(),
    }
    return render(
        "pod.yaml.j2",
        pod_name=name,
        job_name=j.name,
        namespace=j.namespace,
        labels=pod_lbls,
        annotations=annotations,
        owner_references=[owner_reference(j)],
        restart_policy=pod_restart_policy(spec.restart_policy),
        termination_grace_period_seconds=DEFAULT_TERMINATION_GRACE_SECONDS,
        container_name=TRAINER_CONTAINER,
        image=spec.image or default_image_for(default_image, spec.trainer.backend),
        command=list(DEFAULT_COMMAND),
        port=spec.port,
        metrics_port=DEFAULT_METRICS_PORT,
        env=[{"name": k, "value": v} for k, v in {**owned_env, **default_env}.items()],
        checkpoint_volume_name=CHECKPOINT_VOLUME,
        tmp_volume_name=TMP_VOLUME,
        mount_path=spec.checkpoint.mount_path,
        checkpoint_volume=volume,
    )


def _keep_owned_env(env: list[Any], owned_env: Mapping[str, str]) -> list[Any]:
    """A template's env with the owned names at the operator's value; another backend's
    identity variables are left out."""
    return [
        {"name": e["name"], "value": owned_env[e["name"]]}
        if isinstance(e, Mapping) and e.get("name") in owned_env
        else e
        for e in env
        if not (
            isinstance(e, Mapping) and e.get("name") in OWNED_ENV and e.get("name") not in owned_env
        )
    ]


#: The taints the node lifecycle controller puts on a node that stopped answering.
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def node_lost_tolerations(have: Any, seconds: int) -> list[Any]:
    """`have` plus NoExecute tolerations of a lost node's taints for `seconds`: a training
    group stalls as a whole when one of its nodes stops answering, so waiting Kubernetes'
    default 300 s before the Pods are evicted (and the group restarts elsewhere) is waiting
    for nothing. Keys the template already tolerates (or a toleration of everything) keep
    the template's choice."""
    tolerations = list(have) if isinstance(have, list) else []
    keys = {t.get("key") for t in tolerations if isinstance(t, Mapping)}
    if any(
        isinstance(t, Mapping) and not t.get("key") and t.get("operator") == "Exists"
        for t in tolerations
    ):
        return tolerations
    return tolerations + [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in NODE_LOST_TAINTS
        if key not in keys
    ]


#: The probe's container: sleeps until deleted (the operator deletes it once it is bound).
PROBE_COMMAND = ("python", "-c", "import time; time.sleep(86400)")


def build_probe_pod(
    job: JobLike, index: int, *, default_image: DefaultImages, priority_class: str | None = None
) -> dict[str, Any]:
    """An elastic job's probe Pod <job>-probe-<index>: worker 0's Pod with everything that
    decides where it may run (resources, nodeSelector, affinity, tolerations, volumes,
    priority), the trainer container only, sleeping; no TF_CONFIG, no hostname. Bound to a
    node means a worker fits there now (see `kerasjob.planner.elastic`)."""
    j = _job(job)
    pod = build_pod(j, ReplicaRole.WORKER, 0, default_image=default_image)
    meta, pod_spec = pod["metadata"], pod["spec"]
    meta["name"] = probe_name(j.name, index)
    meta["labels"] = {
        **meta["labels"],
        labels.REPLICA_TYPE: PROBE_ROLE,
        labels.REPLICA_INDEX: str(index),
    }
    meta["labels"].pop(labels.CHIEF, None)
    trainer = _trainer_container(pod_spec) or {}
    trainer.update(command=list(PROBE_COMMAND), args=[], env=[], ports=[])
    trainer.pop("envFrom", None)  # it trains nothing: no bucket credentials
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        trainer.pop(probe, None)
    pod_spec["containers"] = [trainer]
    pod_spec.pop("initContainers", None)
    pod_spec.pop("hostname", None)
    pod_spec.pop("subdomain", None)
    pod_spec["terminationGracePeriodSeconds"] = 1
    pod_spec.pop("priority", None)
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return pod


def desired_pods(
    job: JobLike, *, default_image: DefaultImages, restart_attempt: int = 0
) -> list[dict[str, Any]]:
    """Every Pod of the job, workers first, then chief, then evaluator."""
    j = _job(job)
    return [
        build_pod(j, role, index, default_image=default_image, restart_attempt=restart_attempt)
        for role, index in j.spec.tasks()
    ]


# --- helpers -------------------------------------------------------------------------------


def _normalise_template(tpl: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a user template whose trainer container is named "trainer"."""
    out = copy.deepcopy(dict(tpl))
    pod_spec = out.get("spec")
    if isinstance(pod_spec, dict):
        containers = pod_spec.get("containers")
        if (
            isinstance(containers, list)
            and containers
            and not any(
                isinstance(c, Mapping) and c.get("name") == TRAINER_CONTAINER for c in containers
            )
            and isinstance(containers[0], dict)
        ):
            containers[0]["name"] = TRAINER_CONTAINER
    return out


def _trainer_container(pod_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The trainer container; None only when a template deleted the containers."""
    for c in pod_spec.get("containers") or []:
        if isinstance(c, dict) and c.get("name") == TRAINER_CONTAINER:
            return c
    return None


def is_dns_label(value: str) -> bool:
    """RFC 1123 label: what a Pod hostname must be."""
    return len(value) <= 63 and bool(_DNS_LABEL.match(value))

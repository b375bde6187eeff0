"""TFJob (kubeflow.org/v1) -> KerasJob: `kerasjob convert tfjob.yaml`.

A TFJob's Pods run the user's own TensorFlow program with a TF_CONFIG; a KerasJob's do the
same (the operator sets TF_CONFIG in the same format), so the templates carry over: the
container named "tensorflow" becomes the trainer container, its command and image are kept.

| TFJob                                  | KerasJob                                        |
| -------------------------------------- | ----------------------------------------------- |
| tfReplicaSpecs.Worker.replicas         | spec.workers (a lone Chief/Master: 1 worker)    |
| tfReplicaSpecs.Chief / Master (1)      | spec.chief {replicas: 1, template}              |
| tfReplicaSpecs.Evaluator (1)           | spec.evaluator {replicas: 1, template}          |
| tfReplicaSpecs.PS                      | spec.ps {replicas, template} (a Chief added     |
|                                        |   from the Worker template when there is none)  |
| Worker template                        | spec.template (chief/evaluator: their own)      |
| restartPolicy OnFailure/Never/ExitCode | spec.restartPolicy (Always -> OnFailure)        |
| runPolicy.backoffLimit, TTL, deadline  | spec.backoffLimit, ttlSecondsAfterFinished,     |
|   cleanPodPolicy, suspend              |   activeDeadlineSeconds, cleanPodPolicy, suspend|
| runPolicy.schedulingPolicy             | priorityClass -> Pod priorityClassName; the     |
|                                        |   rest warned: a gang is the operator's         |
|                                        |   --gang-scheduling (minCount: every Pod), a    |
|                                        |   queue the kueue.x-k8s.io/queue-name label     |
| container port "tfjob-port"            | spec.port                                       |

A KerasJob with more than one Pod needs a shared checkpoint volume or a bucket
(BackupAndRestore); a TFJob has neither, so the conversion names a ReadWriteMany claim
(``checkpoint_claim``), or, given ``checkpoint_location`` (``--checkpoint s3://BUCKET/PREFIX``
or ``gs://...``), that bucket instead (with ``checkpoint_secret``: the Secret of its
credentials; without: the Pods' own identity), for any number of Pods.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kerasjob.api import API_VERSION_FULL, MAX_PS_REPLICAS, KerasJob, location_problems, plain
from kerasjob_contract import DEFAULT_TF_PORT, TRAINER_CONTAINER

TFJOB_API_VERSIONS = ("kubeflow.org/v1",)
TF_CONTAINER = "tensorflow"
TF_PORT_NAME = "tfjob-port"
DEFAULT_CHECKPOINT_CLAIM = "kerasjob-ckpt"
_ROLE_KEYS = {
    "worker": "Worker",
    "chief": "Chief",
    "master": "Master",
    "ps": "PS",
    "evaluator": "Evaluator",
}
_RESTART = {
    "OnFailure": "OnFailure",
    "Never": "Never",
    "ExitCode": "ExitCode",
    "Always": "OnFailure",
}


class ConversionError(ValueError):
    """The input is not a TFJob this converter can turn into a KerasJob."""


def convert_tfjob(
    tfjob: Mapping[str, Any],
    *,
    checkpoint_claim: str = DEFAULT_CHECKPOINT_CLAIM,
    checkpoint_location: str | None = None,
    checkpoint_secret: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(the KerasJob manifest, warnings about what has no equivalent). Pure.
    ``checkpoint_location``: a bucket (s3:// or gs://) instead of the claim."""
    if tfjob.get("kind") != "TFJob" or tfjob.get("apiVersion") not in TFJOB_API_VERSIONS:
        raise ConversionError(
            f"not a kubeflow.org/v1 TFJob: {tfjob.get('apiVersion')}/{tfjob.get('kind')}"
        )
    if checkpoint_location is not None:
        problems = location_problems(checkpoint_location, None)
        if problems:
            raise ConversionError(
                f"--checkpoint {checkpoint_location}: " + problems[0].split(" ", 1)[1]
            )
    elif checkpoint_secret is not None:
        raise ConversionError("--checkpoint-secret is for a bucket: give --checkpoint too")
    spec = plain(tfjob.get("spec") or {})
    warnings: list[str] = []
    replicas = _replica_specs(spec.get("tfReplicaSpecs") or {}, warnings)
    out_spec = _roles(replicas, warnings)
    out_spec.update(_restart_policy(replicas, warnings))
    out_spec.update(_run_policy(spec, out_spec, warnings))
    if checkpoint_location is not None:
        out_spec.update(_bucket(out_spec, checkpoint_location, checkpoint_secret, warnings))
    else:
        out_spec.update(_checkpoint(out_spec, checkpoint_claim, warnings))
    ignored = {
        "successPolicy": "the chief's success completes a KerasJob",
        "enableDynamicWorker": "a KerasJob that trains on the workers there is room for "
        "sets spec.elastic (minWorkers)",
    }
    for key, instead in ignored.items():
        if spec.get(key):
            warnings.append(f"{key}: {spec[key]!r} not converted ({instead})")
    warnings.append(
        "security: KerasJob Pods run as non-root with a read-only root filesystem (/tmp is "
        "writable); an image that runs as root needs spec.template.spec.securityContext."
        "runAsNonRoot: false"
    )
    meta = tfjob.get("metadata") or {}
    out_meta = {
        k: copy.deepcopy(meta[k])
        for k in ("name", "namespace", "labels", "annotations")
        if meta.get(k)
    }
    manifest = {
        "apiVersion": API_VERSION_FULL,
        "kind": "KerasJob",
        "metadata": out_meta,
        "spec": out_spec,
    }
    KerasJob.model_validate(manifest)  # the API models agree (schema errors raise here)
    return manifest, warnings


def _roles(replicas: Mapping[str, dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    """spec.workers, chief, evaluator, their templates and the port, from the replica specs."""
    worker, chief, evaluator = (replicas.get(r) for r in ("worker", "chief", "evaluator"))
    ps = replicas.get("ps")
    if ps and int(ps.get("replicas", 1)) > 0 and chief is None and worker is not None:
        chief = {"replicas": 1, "template": worker.get("template")}
        warnings.append(
            "PS without a Chief: a chief is added from the Worker template (a KerasJob's "
            "ParameterServerStrategy is coordinated by the chief)"
        )
    if ps and evaluator is not None:
        evaluator = None
        warnings.append(
            "Evaluator dropped: a KerasJob with parameter servers has no side-car evaluator "
            "(it reads MultiWorkerMirroredStrategy backups)"
        )
    if worker is None and chief is None:
        raise ConversionError("the TFJob has no Worker, Chief or Master replicas")
    if worker is None or int(worker.get("replicas", 1)) < 1:
        # A lone chief: worker 0 is the chief of a KerasJob without spec.chief.
        assert chief is not None
        worker, chief = chief, None
        warnings.append(
            "Chief without Workers: it becomes the single worker (worker 0 is the "
            "chief of a KerasJob)"
        )
    out_spec: dict[str, Any] = {"workers": int(worker.get("replicas", 1))}
    template, port = _template(worker.get("template"), "Worker", warnings)
    out_spec["template"] = template
    for role, rs in (("chief", chief), ("evaluator", evaluator)):
        if rs is None:
            continue
        n = int(rs.get("replicas", 1))
        if n > 1:
            warnings.append(f"{role}: {n} replicas reduced to 1 (the most a KerasJob has)")
        role_tpl, role_port = _template(rs.get("template"), role, warnings)
        port = port or role_port
        out_spec[role] = {"replicas": min(n, 1), "template": role_tpl}
    if ps and int(ps.get("replicas", 1)) > 0:
        ps_tpl, ps_port = _template(ps.get("template"), "PS", warnings)
        port = port or ps_port
        out_spec["ps"] = {"replicas": _ps_replicas(ps, warnings), "template": ps_tpl}
    if port and port != DEFAULT_TF_PORT:
        out_spec["port"] = port
    return out_spec


def _ps_replicas(ps: Mapping[str, Any], warnings: list[str]) -> int:
    n = int(ps.get("replicas", 1))
    if n > MAX_PS_REPLICAS:
        warnings.append(f"PS: {n} replicas reduced to {MAX_PS_REPLICAS} (the most a KerasJob has)")
    return min(n, MAX_PS_REPLICAS)


def _checkpoint(
    out_spec: Mapping[str, Any], checkpoint_claim: str, warnings: list[str]
) -> dict[str, Any]:
    """A shared checkpoint claim when the job has more than one Pod."""
    pods = out_spec["workers"] + sum(
        (out_spec.get(r) or {}).get("replicas", 0) for r in ("chief", "evaluator", "ps")
    )
    if pods <= 1:
        return {}
    warnings.append(
        f"checkpoint: {pods} Pods share the ReadWriteMany claim {checkpoint_claim!r} "
        "(KERASJOB_CHECKPOINT_DIR; create it first, e.g. examples/checkpoint-pvc.yaml)"
    )
    return {"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": checkpoint_claim}}}}


def _bucket(
    out_spec: Mapping[str, Any], location: str, secret: str | None, warnings: list[str]
) -> dict[str, Any]:
    """spec.checkpoint.location (and its credentials Secret) instead of a claim."""
    who = (
        f"the keys of Secret {secret!r}"
        if secret
        else "the Pods' own identity (GKE Workload Identity, EKS Pod Identity/IRSA: set "
        "spec.template.spec.serviceAccountName)"
    )
    warnings.append(
        f"checkpoint: backups go to {location.rstrip('/')}/<namespace>/<name>/<uid> "
        f"(KERASJOB_CHECKPOINT_LOCATION) with {who}; for an S3-compatible store add "
        "spec.checkpoint.endpoint (and pathStyle)"
    )
    checkpoint: dict[str, Any] = {"location": location}
    if secret:
        checkpoint["credentials"] = {"secretName": secret}
    del out_spec  # every job, one Pod or more, uses the bucket it is given
    return {"checkpoint": checkpoint}


def _replica_specs(specs: Mapping[str, Any], warnings: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, rs in specs.items():
        role = key.lower()
        if role not in _ROLE_KEYS:
            warnings.append(f"tfReplicaSpecs.{key}: unknown replica type, dropped")
            continue
        if role == "master":
            role = "chief"
        out[role] = rs or {}
    return out


def _template(tpl: Any, where: str, warnings: list[str]) -> tuple[dict[str, Any], int | None]:
    """The Pod template with the "tensorflow" container renamed; the TF port it declared."""
    tpl = copy.deepcopy(tpl or {})
    pod = tpl.setdefault("spec", {})
    containers = pod.get("containers") or []
    tf = next((c for c in containers if c.get("name") == TF_CONTAINER), None)
    if tf is None and containers:
        tf = containers[0]
        warnings.append(
            f"{where}: no container named {TF_CONTAINER!r}; the first one "
            f"({tf.get('name')!r}) becomes the trainer"
        )
    port = None
    if tf is not None:
        tf["name"] = TRAINER_CONTAINER
        ports = tf.get("ports") or []
        tf_port = next((p for p in ports if p.get("name") == TF_PORT_NAME), None)
        if tf_port:
            port = int(tf_port["containerPort"])
            rest = [p for p in ports if p is not tf_port]
            if rest:
                tf["ports"] = rest
            else:
                tf.pop("ports")
    if pod.get("restartPolicy"):
        pod.pop("restartPolicy")  # the operator owns the Pod restartPolicy
    return tpl, port


def _restart_policy(replicas: Mapping[str, dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    policies = {
        role: policy
        for role, rs in replicas.items()
        if role != "ps" and (policy := rs.get("restartPolicy"))
    }
    if not policies:
        return {}
    chosen = policies.get("worker") or next(iter(policies.values()))
    if len(set(policies.values())) > 1:
        warnings.append(
            f"restartPolicy differs by replica ({policies}); the job uses "
            f"{chosen!r} for all (a KerasJob has one)"
        )
    if chosen == "Always":
        warnings.append(
            "restartPolicy Always -> OnFailure (a finished trainer is never "
            "restarted; disruptions always are)"
        )
    return {"restartPolicy": _RESTART.get(chosen, "OnFailure")}


def _run_policy(
    spec: Mapping[str, Any], out_spec: dict[str, Any], warnings: list[str]
) -> dict[str, Any]:
    # runPolicy (v1), else the older top-level fields (cleanPodPolicy, ttl... on the spec).
    run = {
        **{
            k: spec[k]
            for k in (
                "cleanPodPolicy",
                "ttlSecondsAfterFinished",
                "activeDeadlineSeconds",
                "backoffLimit",
            )
            if k in spec
        },
        **(spec.get("runPolicy") or {}),
    }
    out: dict[str, Any] = {}
    for key in (
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "cleanPodPolicy",
        "suspend",
    ):
        if run.get(key) is not None:
            out[key] = run[key]
    sched = run.get("schedulingPolicy") or {}
    if sched.get("priorityClass"):
        for tpl in [out_spec["template"]] + [
            (out_spec.get(r) or {}).get("template") or {} for r in ("chief", "evaluator")
        ]:
            tpl.setdefault("spec", {}).setdefault("priorityClassName", sched["priorityClass"])
    dropped = {k: v for k, v in sched.items() if k != "priorityClass"}
    if dropped:
        warnings.append(
            f"runPolicy.schedulingPolicy {dropped} not converted: a KerasJob's Pods are "
            "one gang (minCount: every Pod) when the operator runs with "
            "--gang-scheduling, and a Kueue queue is the label "
            "kueue.x-k8s.io/queue-name (operator --kueue); a gang scheduler's "
            "schedulerName in the templates is kept"
        )
    if run.get("managedBy"):
        warnings.append(f"runPolicy.managedBy {run['managedBy']!r} ignored")
    return out

"""Kueue's names and the reads of a Workload the other parts share: the API's constants,
the job's queue and Workload names, a Workload's conditions, podSet counts and owner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kerasjob.planner.conditions import condition_true, get_condition

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOADS = "workloads"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
#: Kueue's label on a Workload naming the UID of the job it belongs to.
JOB_UID_LABEL = f"{GROUP}/job-uid"
#: Kueue's annotations of an elastic Workload and its slices (pkg/workloadslicing).
ELASTIC_ANNOTATION = f"{GROUP}/elastic-job"
REPLACEMENT_FOR_ANNOTATION = f"{GROUP}/workload-slice-replacement-for"
SLICE_NAME_ANNOTATION = f"{GROUP}/workload-slice-name"
#: Our own: the slice's number in its job's chain (0: the first Workload).
SLICE_ANNOTATION = "kerasjob.dev/workload-slice"
#: The podSet whose count an elastic job changes.
WORKER = "worker"

# Workload condition types (Kueue's API).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"


def queue_name(labels: Mapping[str, str] | None) -> str | None:
    """The LocalQueue a job is submitted to; None: Kueue does not manage it."""
    return (labels or {}).get(QUEUE_LABEL) or None


def workload_name(job_name: str, job_uid: str) -> str:
    """Deterministic, so a restarted operator finds it (``kerasjob-<job>-<uid prefix>``)."""
    return f"kerasjob-{job_name[:230]}-{job_uid[:8]}"


def slice_name(job_name: str, job_uid: str, serial: int) -> str:
    """The name of an elastic job's ``serial``-th Workload slice (0: `workload_name`); the
    grow slice of slice ``n`` is ``n + 1``, so a restarted operator makes no second one."""
    base = workload_name(job_name, job_uid)
    return base if serial == 0 else f"{base}-s{serial}"


def slice_serial(workload: Mapping[str, Any]) -> int:
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(SLICE_ANNOTATION, 0))
    except (TypeError, ValueError):
        return 0


def workload_key(workload: Mapping[str, Any]) -> str:
    """Kueue's workload.Key: ``<namespace>/<name>``."""
    meta = workload.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def conditions(workload: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((workload or {}).get("status") or {}).get("conditions") or [])


def condition(workload: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    return get_condition(conditions(workload), type_)


def is_true(workload: Mapping[str, Any] | None, type_: str) -> bool:
    return condition_true(conditions(workload), type_)


def finished(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, FINISHED)


def reserved(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue holds quota for it (Kueue's HasQuotaReservation)."""
    return is_true(workload, QUOTA_RESERVED)


def owned_by(workload: Mapping[str, Any], job_uid: str) -> bool:
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == job_uid for r in refs)


def generation(workload: Mapping[str, Any]) -> int | None:
    gen = (workload.get("metadata") or {}).get("generation")
    return gen if isinstance(gen, int) else None


def pod_set_counts(workload: Mapping[str, Any]) -> dict[str, int]:
    pod_sets = (workload.get("spec") or {}).get("podSets") or []
    return {str(p.get("name")): int(p.get("count", 0)) for p in pod_sets}


def reclaimable(workload: Mapping[str, Any], role: str = WORKER) -> int:
    for r in (workload.get("status") or {}).get("reclaimablePods") or []:
        if r.get("name") == role:
            return int(r.get("count") or 0)
    return 0


def admitted_workers(workload: Mapping[str, Any]) -> int:
    """The workers Kueue charges for: the worker podSet's count less those given back
    through reclaimablePods."""
    return pod_set_counts(workload).get(WORKER, 0) - reclaimable(workload)

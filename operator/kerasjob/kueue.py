"""Kueue integration, the pure part: what a KerasJob's Workload is, what its state means for
the job, and which writes to it are due. The controller does the I/O (`kueue_sync`).

A KerasJob labelled ``kueue.x-k8s.io/queue-name`` is a Kueue workload of an *external
framework* (Kueue's ``integrations.externalFrameworks: [KerasJob.v1alpha1.kerasjob.dev]``):
Kueue brings no controller or webhook for it, so the operator plays Kueue's job-framework
part itself (`GenericJob` in Kueue's pkg/controller/jobframework):

* it creates the job's Workload (owned by the job; one podSet per role with its count and
  Pod template; ``kueue.x-k8s.io/priority-class`` becomes the Workload's priority);
* the job is held, with no Pods, until the Workload is admitted (`gate`); the planner
  treats a held job exactly like ``spec.suspend`` (Pods deleted with their grace period, the
  trainer saves on SIGTERM; no restart counted);
* on admission the Pods get the assigned flavors' node labels and tolerations and the
  admission checks' podSetUpdates (`pod_set_updates`, `apply_update`);
* an eviction (Workload ``Evicted``: preemption, waitForPodsReady timeout, deactivation...)
  holds the job again; once its Pods are gone the operator gives the quota back
  (`release_status`), as Kueue's job reconciler does, and Kueue re-queues the Workload;
* the Workload's ``PodsReady`` follows the job's Pods (`pods_ready_status`), for Kueue's
  ``waitForPodsReady``; a job whose roles or replicas change gets a new Workload (`matches`);
* when the job ends the Workload gets ``Finished`` (`finished_status`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kerasjob import labels as lbl
from kerasjob.status import set_condition

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOADS = "workloads"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
#: Kueue's label on a Workload naming the UID of the job it belongs to.
JOB_UID_LABEL = f"{GROUP}/job-uid"

# Workload condition types (Kueue's API).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
RECOVERY = "WaitForRecovery"


def queue_name(labels: Mapping[str, str] | None) -> str | None:
    """The LocalQueue a job is submitted to; None: Kueue does not manage it."""
    return (labels or {}).get(QUEUE_LABEL) or None


def workload_name(job_name: str, job_uid: str) -> str:
    """Deterministic, so a restarted operator finds it (``kerasjob-<job>-<uid prefix>``)."""
    return f"kerasjob-{job_name[:230]}-{job_uid[:8]}"


def build_workload(
    job: Mapping[str, Any],
    pods_by_role: Mapping[str, tuple[int, Mapping[str, Any]]],
    *,
    priority: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """The Workload of ``job`` (its body): ``pods_by_role`` maps each role to its replica
    count and the manifest of its first Pod (the template Kueue accounts for);
    ``priority``: the WorkloadPriorityClass named by the job and its value."""
    meta = job["metadata"]
    pod_sets = []
    for role, (count, pod) in pods_by_role.items():
        pod_meta = pod.get("metadata") or {}
        template = {
            "metadata": {
                "labels": dict(pod_meta.get("labels") or {}),
                "annotations": dict(pod_meta.get("annotations") or {}),
            },
            "spec": copy.deepcopy(pod["spec"]),
        }
        pod_sets.append({"name": role, "count": count, "template": template})
    spec: dict[str, Any] = {"queueName": queue_name(meta.get("labels")), "podSets": pod_sets}
    if priority is not None:
        spec["priorityClassRef"] = {
            "group": GROUP,
            "kind": "WorkloadPriorityClass",
            "name": priority[0],
        }
        spec["priority"] = priority[1]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {lbl.JOB_NAME: meta["name"], JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [lbl.controller_reference(meta["name"], meta["uid"])],
        },
        "spec": spec,
    }


def condition(workload: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for c in ((workload or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def _true(workload: Mapping[str, Any] | None, type_: str) -> bool:
    c = condition(workload, type_)
    return c is not None and c.get("status") == "True"


@dataclass(frozen=True)
class Gate:
    """What Kueue says about running a job now: the planner's input."""

    admitted: bool
    reason: str
    """Queued (never admitted yet, or waiting again), Admitted, or Evicted."""
    message: str


#: Kueue's preemption message names the preemptor's job by UID.
_JOB_UID_RE = re.compile(r"JobUID: ([0-9a-fA-F-]{8,})")


def gate(
    queue: str,
    workload: Mapping[str, Any] | None,
    job_name_of: Callable[[str], str | None] | None = None,
) -> Gate:
    """Whether a job submitted to LocalQueue ``queue`` may run, and why (not).
    ``job_name_of``: a KerasJob's name by UID, to name who preempted it."""
    if workload is None:
        return Gate(False, "Queued", f"waiting for its Kueue Workload in LocalQueue {queue}")
    evicted = condition(workload, EVICTED)
    if evicted is not None and evicted.get("status") == "True":
        why = evicted.get("message") or evicted.get("reason") or "evicted"
        found = _JOB_UID_RE.search(why)
        by = job_name_of(found.group(1)) if found and job_name_of else None
        if by:
            why = f"by KerasJob {by}: {why}"
        return Gate(
            False,
            "Evicted",
            f"evicted by Kueue ({evicted.get('reason')}: {why}); waiting in LocalQueue "
            f"{queue} to be admitted again",
        )
    if _true(workload, ADMITTED):
        admission = (workload.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue") or "?"
        message = f"admitted by Kueue to ClusterQueue {cq} (LocalQueue {queue})"
        return Gate(True, "Admitted", message)
    reserved = condition(workload, QUOTA_RESERVED)
    detail = (reserved or {}).get("message") or "waiting for quota"
    if _true(workload, QUOTA_RESERVED):
        detail = "quota reserved, waiting for admission checks"
    return Gate(False, "Queued", f"queued in LocalQueue {queue}: {detail}")


@dataclass(frozen=True)
class PodSetUpdate:
    """What an admission adds to the Pods of one podSet."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def assigned_flavors(workload: Mapping[str, Any]) -> dict[str, list[str]]:
    """Role -> the names of the ResourceFlavors assigned to it (in resource order)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    out: dict[str, list[str]] = {}
    for psa in admission.get("podSetAssignments") or []:
        names = list(dict.fromkeys((psa.get("flavors") or {}).values()))
        out[str(psa.get("name"))] = names
    return out


def pod_set_updates(
    workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]
) -> dict[str, PodSetUpdate]:
    """Role -> the update of its Pods: the node labels and tolerations of its assigned
    ResourceFlavors (``flavors``: name -> ResourceFlavor body), then the podSetUpdates of
    the Workload's admission checks."""
    out: dict[str, PodSetUpdate] = {}
    checks = ((workload.get("status") or {}).get("admissionChecks")) or []
    for role, names in assigned_flavors(workload).items():
        selector: dict[str, str] = {}
        tolerations: list[Mapping[str, Any]] = []
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        for name in names:
            fspec = (flavors.get(name) or {}).get("spec") or {}
            selector.update(fspec.get("nodeLabels") or {})
            tolerations.extend(fspec.get("tolerations") or [])
        for check in checks:
            for upd in check.get("podSetUpdates") or []:
                if upd.get("name") != role:
                    continue
                selector.update(upd.get("nodeSelector") or {})
                tolerations.extend(upd.get("tolerations") or [])
                labels.update(upd.get("labels") or {})
                annotations.update(upd.get("annotations") or {})
        out[role] = PodSetUpdate(selector, tuple(tolerations), labels, annotations)
    return out


def apply_update(pod: dict[str, Any], update: PodSetUpdate | None) -> dict[str, Any]:
    """The Pod manifest with the admission's update merged in (in place; returned)."""
    if update is None:
        return pod
    meta = pod.setdefault("metadata", {})
    if update.labels:
        meta["labels"] = {**(meta.get("labels") or {}), **update.labels}
    if update.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **update.annotations}
    spec = pod.setdefault("spec", {})
    if update.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **update.node_selector}
    if update.tolerations:
        have = list(spec.get("tolerations") or [])
        spec["tolerations"] = have + [dict(t) for t in update.tolerations if t not in have]
    return pod


def _set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    return set_condition(
        conditions, type_, status, reason, message, now=now, generation=generation, add_false=True
    )


def release_status(workload: Mapping[str, Any], now: datetime) -> dict[str, Any] | None:
    """After an eviction, once the job's Pods are gone: the status that gives the quota back
    (QuotaReserved and Admitted False, no admission; Requeued when preempted), as Kueue's
    job reconciler writes it. None when nothing is to release."""
    evicted = condition(workload, EVICTED)
    status = workload.get("status") or {}
    if evicted is None or evicted.get("status") != "True" or not (
        status.get("admission") or _true(workload, QUOTA_RESERVED)
    ):
        return None
    gen = (workload.get("metadata") or {}).get("generation")
    reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
    conds = list(status.get("conditions") or [])
    requeue = reason in ("Preempted", "NodeFailures")
    conds = _set_condition(conds, REQUEUED, requeue, reason, message, now, gen)
    conds = _set_condition(conds, QUOTA_RESERVED, False, "Pending", message, now, gen)
    conds = _set_condition(
        conds, ADMITTED, False, "NoReservation", "The workload has no reservation", now, gen
    )
    return {"conditions": conds, "admission": None}


def finished_status(
    workload: Mapping[str, Any], succeeded: bool, message: str, now: datetime
) -> dict[str, Any] | None:
    """The job ended: the Workload's Finished condition (None when already there)."""
    if _true(workload, FINISHED):
        return None
    gen = (workload.get("metadata") or {}).get("generation")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    reason = "Succeeded" if succeeded else "Failed"
    return {"conditions": _set_condition(conds, FINISHED, True, reason, message, now, gen)}


def matches(workload: Mapping[str, Any], counts: Mapping[str, int]) -> bool:
    """Whether the Workload's podSets are the job's roles and counts (a job whose shape
    changed needs a new Workload: Kueue's podSets are immutable)."""
    pod_sets = (workload.get("spec") or {}).get("podSets") or []
    return {str(p.get("name")): int(p.get("count", 0)) for p in pod_sets} == dict(counts)


def pods_ready_status(
    workload: Mapping[str, Any], pods_ready: bool, now: datetime
) -> dict[str, Any] | None:
    """The Workload's PodsReady condition, as Kueue's job reconciler keeps it (what its
    ``waitForPodsReady`` reads): True (Started, or Recovered after a loss) once every Pod
    runs ready, else False (WaitForStart, or WaitForRecovery after it was True). None when
    unchanged."""
    current = condition(workload, PODS_READY) or {}
    admitted = _true(workload, ADMITTED) and not _true(workload, EVICTED)
    recovering = current.get("reason") in (RECOVERY, "Recovered")
    if admitted and pods_ready:
        status, reason = True, "Recovered" if recovering else "Started"
        message = "All pods reached readiness and the workload is running"
    elif admitted and (current.get("status") == "True" or current.get("reason") == RECOVERY):
        status, reason = False, RECOVERY
        message = "At least one pod has failed, waiting for recovery"
    else:
        status, reason = False, "WaitForStart"
        message = "Not all pods are ready or succeeded"
    if current.get("status") == ("True" if status else "False") and current.get("reason") == reason:
        return None
    gen = (workload.get("metadata") or {}).get("generation")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    return {"conditions": _set_condition(conds, PODS_READY, status, reason, message, now, gen)}


def owned_by(workload: Mapping[str, Any], job_uid: str) -> bool:
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == job_uid for r in refs)

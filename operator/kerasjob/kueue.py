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

An elastic job (spec.elastic) is an elastic Kueue workload (Kueue's
``ElasticJobsViaWorkloadSlices``): its Workload is marked ``kueue.x-k8s.io/elastic-job`` and
counts the job's *current* workers (status.elastic.workers), so Kueue charges what runs.

* **Shrink**: the admitted Workload's worker count is lowered in place (`shrunk_pod_sets`;
  Kueue's webhook allows a decrease with the gate on, and its cache then charges the smaller
  count: ``totalRequestsFromAdmission`` scales the admitted usage down to spec.podSets). With
  the gate off the update is refused and the workers go back through
  ``status.reclaimablePods`` instead (`reclaimable_status`: never given back while admitted).
* **Grow**: the job grows only once Kueue admitted a *workload slice* of the bigger size: a
  new Workload (`build_workload` with ``replaces``), annotated
  ``kueue.x-k8s.io/workload-slice-replacement-for: <ns>/<current slice>``, which Kueue's
  scheduler admits counting the current slice's quota as its own, and then finishes the
  current slice (Finished, ``WorkloadSliceReplaced``). `slices` tells the current slice, a
  pending grow slice and old slices still to finish (when the scheduler did not: the gate
  off) from the job's Workloads; slice names are deterministic (`slice_name`).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kerasjob import labels as lbl
from kerasjob.status import set_condition
from kerasjob_contract.times import parse_time

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
#: The Finished reason Kueue's scheduler gives a replaced slice.
SLICE_REPLACED = "WorkloadSliceReplaced"
#: The podSet whose count an elastic job changes.
WORKER = "worker"

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


def build_workload(
    job: Mapping[str, Any],
    pods_by_role: Mapping[str, tuple[int, Mapping[str, Any]]],
    *,
    priority: tuple[str, int] | None = None,
    elastic: bool = False,
    replaces: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Workload of ``job`` (its body): ``pods_by_role`` maps each role to its replica
    count and the manifest of its first Pod (the template Kueue accounts for);
    ``priority``: the WorkloadPriorityClass named by the job and its value. ``elastic``: an
    elastic job's slice; ``replaces``: the slice a grow slice replaces once admitted."""
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
    metadata: dict[str, Any] = {
        "name": workload_name(meta["name"], meta["uid"]),
        "namespace": meta["namespace"],
        "labels": {lbl.JOB_NAME: meta["name"], JOB_UID_LABEL: meta["uid"]},
        "ownerReferences": [lbl.controller_reference(meta["name"], meta["uid"])],
    }
    if elastic or replaces is not None:
        serial = 0 if replaces is None else slice_serial(replaces) + 1
        metadata["name"] = slice_name(meta["name"], meta["uid"], serial)
        annotations = {
            ELASTIC_ANNOTATION: "true",
            SLICE_ANNOTATION: str(serial),
            SLICE_NAME_ANNOTATION: workload_name(meta["name"], meta["uid"]),
        }
        if replaces is not None:
            annotations[REPLACEMENT_FOR_ANNOTATION] = workload_key(replaces)
        metadata["annotations"] = annotations
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": metadata,
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
    workers: int | None = None
    """An elastic job's workers Kueue admitted (its current slice; `admitted_workers`):
    the job never runs more."""
    recheck_after: float | None = None
    """Look again after this many seconds even if nothing changes (`gate_of`)."""


#: Kueue's preemption message names the preemptor's job by UID.
_JOB_UID_RE = re.compile(r"JobUID: ([0-9a-fA-F-]{8,})")


def gate(
    queue: str,
    workload: Mapping[str, Any] | None,
    job_name_of: Callable[[str], str | None] | None = None,
    *,
    elastic: bool = False,
) -> Gate:
    """Whether a job submitted to LocalQueue ``queue`` may run, and why (not).
    ``job_name_of``: a KerasJob's name by UID, to name who preempted it. ``elastic``: an
    elastic job's current slice (the gate then says how many workers Kueue admitted)."""
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
        workers = admitted_workers(workload) if elastic else None
        return Gate(True, "Admitted", message, workers)
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
    if (
        evicted is None
        or evicted.get("status") != "True"
        or not (status.get("admission") or _true(workload, QUOTA_RESERVED))
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


# -- elastic jobs: Workload slices -------------------------------------------------------


def pod_set_counts(workload: Mapping[str, Any]) -> dict[str, int]:
    pod_sets = (workload.get("spec") or {}).get("podSets") or []
    return {str(p.get("name")): int(p.get("count", 0)) for p in pod_sets}


def reclaimable(workload: Mapping[str, Any], role: str = WORKER) -> int:
    for r in (workload.get("status") or {}).get("reclaimablePods") or []:
        if r.get("name") == role:
            return int(r.get("count") or 0)
    return 0


def finished(workload: Mapping[str, Any]) -> bool:
    return _true(workload, FINISHED)


def reserved(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue holds quota for it (Kueue's HasQuotaReservation)."""
    return _true(workload, QUOTA_RESERVED)


def admitted_workers(workload: Mapping[str, Any]) -> int:
    """The workers Kueue charges for: the worker podSet's count less those given back
    through reclaimablePods."""
    return pod_set_counts(workload).get(WORKER, 0) - reclaimable(workload)


def same_shape(workload: Mapping[str, Any], counts: Mapping[str, int]) -> bool:
    """An elastic job's Workload has its roles, and its counts but the workers' (those
    follow the job's size: `shrunk_pod_sets`, slices)."""
    have = pod_set_counts(workload)
    return have.keys() == counts.keys() and all(
        have[r] == n for r, n in counts.items() if r != WORKER
    )


@dataclass(frozen=True)
class Slices:
    """An elastic job's Workloads (Kueue's workload slices), sorted out."""

    current: Mapping[str, Any] | None
    """The slice the job runs on (or waits for); None: none yet."""
    pending: Mapping[str, Any] | None = None
    """A grow slice, not yet admitted: it replaces ``current`` once Kueue admits it."""
    replaced: tuple[Mapping[str, Any], ...] = ()
    """Older slices not finished although a newer one holds quota (Kueue's scheduler
    finishes a replaced slice with the gate on; with it off, the operator must)."""
    extra: tuple[Mapping[str, Any], ...] = ()
    """Other unadmitted newer slices (a second grow slice: never made by us); to delete."""
    replacing: Mapping[str, Any] | None = None
    """While Kueue admits the current slice: the slice it replaces, which the scheduler has
    just finished (``WorkloadSliceReplaced``) and the current one's admission is the next
    write. The job runs on meanwhile (`gate_of`)."""


def slices(workloads: Iterable[Mapping[str, Any]], job_uid: str) -> Slices:
    """Sort the Workloads of the job with ``job_uid``: the current slice is the newest one
    holding quota, else the oldest one not finished, else (all finished: the job ended) the
    newest."""
    mine = sorted((w for w in workloads if owned_by(w, job_uid)), key=slice_serial)
    if not mine:
        return Slices(None)
    live = [w for w in mine if not _true(w, FINISHED)]
    if not live:
        return Slices(mine[-1])
    holding = [w for w in live if reserved(w)]
    current = holding[-1] if holding else live[0]
    at = slice_serial(current)
    newer = [w for w in live if slice_serial(w) > at]
    pending = newer[-1] if newer else None
    replacing = None
    if not holding:
        wanted = (
            (current.get("metadata") or {}).get("annotations", {}).get(REPLACEMENT_FOR_ANNOTATION)
        )
        replacing = next(
            (
                w
                for w in mine
                if workload_key(w) == wanted
                and (condition(w, FINISHED) or {}).get("reason") == SLICE_REPLACED
            ),
            None,
        )
    return Slices(
        current,
        pending,
        replaced=tuple(w for w in live if slice_serial(w) < at),
        extra=tuple(newer[:-1]),
        replacing=replacing,
    )


#: How long the job runs on while Kueue admits a slice it has finished the predecessor of
#: (two writes of its scheduler, normally milliseconds apart); then the job waits for it.
ADMITTING_GRACE_SECONDS = 10.0


def gate_of(
    queue: str,
    found: Slices,
    now: datetime,
    job_name_of: Callable[[str], str | None] | None = None,
) -> Gate:
    """An elastic job's gate: its current slice's, or, while Kueue admits a slice it has
    just finished the predecessor of, the predecessor's admission (for a grace period)."""
    old = found.replacing
    if old is not None:
        at = parse_time((condition(old, FINISHED) or {}).get("lastTransitionTime"))
        left = ADMITTING_GRACE_SECONDS - ((now - at).total_seconds() if at else 0.0)
        if left > 0:
            was = gate(queue, old, job_name_of, elastic=True)
            if was.admitted:
                name = (found.current or {}).get("metadata", {}).get("name")
                return dataclasses.replace(
                    was,
                    message=f"{was.message}; Kueue is admitting Workload slice {name}",
                    recheck_after=left,
                )
    return gate(queue, found.current, job_name_of, elastic=True)


def shrunk_pod_sets(workload: Mapping[str, Any], workers: int) -> list[dict[str, Any]]:
    """The Workload's podSets with ``workers`` workers, all else as they are (Kueue's
    webhook lets an admitted Workload's counts only decrease, nothing else change)."""
    out = []
    for p in (workload.get("spec") or {}).get("podSets") or []:
        p = copy.deepcopy(dict(p))
        if p.get("name") == WORKER:
            p["count"] = workers
        out.append(p)
    return out


def reclaimable_status(workload: Mapping[str, Any], workers: int) -> dict[str, Any] | None:
    """Without in-place shrink (Kueue's gate off): the status that gives back the quota of
    the workers above ``workers`` (``reclaimablePods``, which may only grow while
    admitted). None when nothing more to give back."""
    count = pod_set_counts(workload).get(WORKER, 0)
    give = count - workers
    if give <= reclaimable(workload):
        return None
    others = [
        dict(r)
        for r in (workload.get("status") or {}).get("reclaimablePods") or []
        if r.get("name") != WORKER
    ]
    return {"reclaimablePods": [*others, {"name": WORKER, "count": give}]}


def replaced_status(
    workload: Mapping[str, Any], by: Mapping[str, Any], now: datetime
) -> dict[str, Any] | None:
    """A slice replaced by ``by`` (admitted): Finished, as Kueue's scheduler writes it."""
    if _true(workload, FINISHED):
        return None
    gen = (workload.get("metadata") or {}).get("generation")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    name = (by.get("metadata") or {}).get("name")
    message = f"Replaced by workload slice {name}"
    return {"conditions": _set_condition(conds, FINISHED, True, SLICE_REPLACED, message, now, gen)}

"""Native gang scheduling, the pure part: a KerasJob's scheduling Workload and PodGroup
(``scheduling.k8s.io/v1alpha2``, Kubernetes 1.36, alpha) and what their state means for the
job. The controller does the I/O (`gang.sync`).

With ``kerasjob run --gang-scheduling`` every job's Pods are one gang: the kube-scheduler's
GangScheduling plugin binds none of them until all ``minCount`` can be placed at once, so two
jobs competing for the same capacity never each hold part of it while waiting for the rest
(the TFJob deadlock). Per job:

* a Workload (one PodGroupTemplate ``gang``, policy ``gang: {minCount}``, ``controllerRef``
  naming the KerasJob) and a PodGroup made from that template, both owned by the job (owner
  reference: garbage-collected with it) and labelled with its name;
* ``minCount`` is the number of Pods the job runs at once: every role (chief, workers,
  evaluator) at its current size. An elastic job's size changes (`elastic`) and both objects
  are immutable, so each size gets its own pair, named after the job's resize count
  (`gang_for`); the old pair is deleted (its PodGroup lingers, held by Kubernetes'
  ``podgroup-protection`` finalizer, until its last Pod is gone);
* every Pod is created with ``spec.schedulingGroup.podGroupName`` (immutable), after its
  PodGroup (the scheduler would wait for the group anyway);
* the PodGroup's ``PodGroupScheduled`` condition False (``Unschedulable``: the gang does not
  fit) becomes the job's ``Running`` condition False, reason ``GangUnschedulable``, with the
  scheduler's message of a waiting Pod (`explain`; the planner asks through
  `scheduling.Placement`, which `GangView` is).

Probe Pods of elastic jobs are not in the gang: each asks for one worker's place on its own.
Nor is a Pod re-created after one of the job's tasks finished for good (an evaluator done
early): the gang's minCount, every Pod of the job, would never be met again.
Names are deterministic, so an operator restarted at any moment finds what it made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kerasjob import API_GROUP, KIND
from kerasjob.api import Reason
from kerasjob.api import labels as lbl
from kerasjob.planner.conditions import get_condition
from kerasjob.planner.scheduling import PodGroup as Gang

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha2"
WORKLOADS = "workloads"
PODGROUPS = "podgroups"
#: The one PodGroupTemplate of a job's Workload.
TEMPLATE = "gang"
#: The PodGroup condition the scheduler writes, and its reasons (k8s.io/api scheduling/v1alpha2).
SCHEDULED = "PodGroupScheduled"
SCHEDULER_ERROR = "SchedulerError"
#: The PodGroup condition reason for a gang that does not fit.
UNSCHEDULABLE = "Unschedulable"
#: The job's reason while its gang cannot be placed.
REASON = Reason.GANG_UNSCHEDULABLE.value


@dataclass(frozen=True)
class PodGroupState:
    """What the controller knows of one of a job's PodGroups (from its index)."""

    name: str
    uid: str
    min_count: int | None
    scheduled: bool | None
    """PodGroupScheduled: True, False, or None (not written yet)."""
    reason: str = ""
    message: str = ""
    deleting: bool = False


@dataclass(frozen=True)
class GangView:
    """The job's gang objects as indexed: PodGroups and Workloads owned by this incarnation
    of the job, by name (`view` makes it). The planner's `scheduling.Placement` for the job:
    its gangs' names (`gang_for`) and why a gang waits (`explain`)."""

    job_name: str
    job_uid: str
    pod_groups: tuple[PodGroupState, ...] = ()
    workloads: tuple[str, ...] = ()

    def pod_group(self, name: str) -> PodGroupState | None:
        return next((p for p in self.pod_groups if p.name == name), None)

    def pod_group_for(self, min_count: int, epoch: int = 0) -> Gang:
        return gang_for(self.job_name, self.job_uid, min_count, epoch)

    def explain(self, group: Gang | None, pod_messages: Sequence[str]) -> tuple[str, str] | None:
        return explain(self, group, shortage(pod_messages))


def gang_for(job_name: str, job_uid: str, min_count: int, epoch: int = 0) -> Gang:
    """The gang of a job running ``min_count`` Pods; ``epoch``: its resize count (an elastic
    job's new size is a new PodGroup: the spec is immutable, and the old one may still be
    held by its finalizer). ``<job>-gang-<uid prefix>[-<epoch>]``: at most 253 characters."""
    name = f"{job_name[:230]}-gang-{job_uid[:8]}"
    return Gang(f"{name}-{epoch}" if epoch else name, min_count)


def shortage(pod_messages: Iterable[str]) -> str:
    """Of the scheduler's messages on a gang's waiting Pods, the one that says what is short
    (``0/4 nodes are available: 4 Insufficient cpu``); the others only say that they wait
    for the rest of the gang. '' when there is none."""
    messages = [m for m in pod_messages if m]
    return next(
        (m for m in messages if "nodes are available" in m), messages[0] if messages else ""
    )


def explain(view_: GangView, gang: Gang | None, pod_message: str = "") -> tuple[str, str] | None:
    """Why the job's Pods wait, when its gang cannot be placed: (reason, message) for the
    job's Running condition; None when the PodGroup does not say so. ``pod_message``: what
    the scheduler says of one of its waiting Pods (which resource is short)."""
    group = view_.pod_group(gang.name) if gang is not None else None
    if gang is None or group is None or group.scheduled is not False:
        return None
    why = group.message or group.reason
    message = (
        f"the gang of {gang.min_count} Pods cannot be placed together "
        f"(PodGroup {gang.name}: {group.reason or UNSCHEDULABLE}: {why}); no Pod is bound "
        "until all fit"
    )
    if pod_message:
        message += f": {pod_message}"
    return REASON, message


def owned_by(obj: Mapping[str, Any], job_uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == job_uid and r.get("controller") for r in refs)


def pod_group_state(body: Mapping[str, Any]) -> PodGroupState:
    meta = body.get("metadata") or {}
    gang = ((body.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    cond = get_condition((body.get("status") or {}).get("conditions") or [], SCHEDULED)
    scheduled = None if cond is None else cond.get("status") == "True"
    min_count = gang.get("minCount")
    return PodGroupState(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        min_count=int(min_count) if isinstance(min_count, int) else None,
        scheduled=scheduled,
        reason=str((cond or {}).get("reason") or ""),
        message=str((cond or {}).get("message") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def view(
    pod_groups: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    job_name: str,
    job_uid: str,
) -> GangView:
    """The job's gang objects (those of this incarnation of the job)."""
    return GangView(
        job_name=job_name,
        job_uid=job_uid,
        pod_groups=tuple(pod_group_state(p) for p in pod_groups if owned_by(p, job_uid)),
        workloads=tuple(
            str((w.get("metadata") or {}).get("name", ""))
            for w in workloads
            if owned_by(w, job_uid)
        ),
    )


def _metadata(job: Mapping[str, Any], name: str) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "name": name,
        "namespace": meta["namespace"],
        "labels": {lbl.JOB_NAME: meta["name"], lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE},
        "ownerReferences": [lbl.controller_reference(meta["name"], meta["uid"])],
    }


def _policy(gang: Gang) -> dict[str, Any]:
    return {"gang": {"minCount": gang.min_count}}


def build_workload(job: Mapping[str, Any], gang: Gang) -> dict[str, Any]:
    """The job's scheduling Workload: one PodGroupTemplate with the gang policy."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": _metadata(job, gang.name),
        "spec": {
            "controllerRef": {"apiGroup": API_GROUP, "kind": KIND, "name": job["metadata"]["name"]},
            "podGroupTemplates": [{"name": TEMPLATE, "schedulingPolicy": _policy(gang)}],
        },
    }


def build_pod_group(job: Mapping[str, Any], gang: Gang) -> dict[str, Any]:
    """The PodGroup made from the Workload's template (its policy copied, as the API asks)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": _metadata(job, gang.name),
        "spec": {
            "podGroupTemplateRef": {
                "workload": {"workloadName": gang.name, "podGroupTemplateName": TEMPLATE}
            },
            "schedulingPolicy": _policy(gang),
        },
    }


def apply(pod: dict[str, Any], gang: Gang | None) -> dict[str, Any]:
    """The Pod manifest in the gang (in place; returned)."""
    if gang is not None:
        pod.setdefault("spec", {})["schedulingGroup"] = {"podGroupName": gang.name}
    return pod


def stale(view_: GangView, gang: Gang | None) -> tuple[list[str], list[str]]:
    """The job's PodGroups and Workloads that are not ``gang``'s (an elastic job's earlier
    sizes; all of them when the job needs none any more), to delete."""
    keep = gang.name if gang is not None else None
    groups = [p.name for p in view_.pod_groups if p.name != keep and not p.deleting]
    workloads = [w for w in view_.workloads if w != keep]
    return groups, workloads


def missing(job: Mapping[str, Any], view_: GangView, gang: Gang) -> list[dict[str, Any]]:
    """The objects of ``gang`` to create before its Pods, in order: its Workload, then its
    PodGroup (the PodGroup admission refuses one whose Workload does not exist yet)."""
    out = []
    if gang.name not in view_.workloads:
        out.append(build_workload(job, gang))
    if view_.pod_group(gang.name) is None:
        out.append(build_pod_group(job, gang))
    return out


def replaced_message(groups: list[str], gang: Gang) -> str:
    """The Event's message when ``groups`` were deleted for ``gang``."""
    return f"PodGroup {', '.join(groups)} replaced by {gang.name} (a gang of {gang.min_count} Pods)"

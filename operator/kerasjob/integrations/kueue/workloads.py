"""A KerasJob's Kueue Workload: its body (`build_workload`, an elastic job's slices too) and
whether it still fits the job (`matches`, `same_shape`; `shrunk_pod_sets` for a shrink)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kerasjob.api import labels as lbl
from kerasjob.integrations.kueue.names import (
    ELASTIC_ANNOTATION,
    GROUP,
    JOB_UID_LABEL,
    REPLACEMENT_FOR_ANNOTATION,
    SLICE_ANNOTATION,
    SLICE_NAME_ANNOTATION,
    VERSION,
    WORKER,
    pod_set_counts,
    queue_name,
    slice_name,
    slice_serial,
    workload_key,
    workload_name,
)


def _pod_set(role: str, count: int, pod: Mapping[str, Any]) -> dict[str, Any]:
    pod_meta = pod.get("metadata") or {}
    template = {
        "metadata": {
            "labels": dict(pod_meta.get("labels") or {}),
            "annotations": dict(pod_meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(pod["spec"]),
    }
    return {"name": role, "count": count, "template": template}


def _slice_metadata(
    meta: Mapping[str, Any], replaces: Mapping[str, Any] | None
) -> tuple[str, dict[str, str]]:
    """An elastic Workload slice's name and annotations."""
    serial = 0 if replaces is None else slice_serial(replaces) + 1
    annotations = {
        ELASTIC_ANNOTATION: "true",
        SLICE_ANNOTATION: str(serial),
        SLICE_NAME_ANNOTATION: workload_name(meta["name"], meta["uid"]),
    }
    if replaces is not None:
        annotations[REPLACEMENT_FOR_ANNOTATION] = workload_key(replaces)
    return slice_name(meta["name"], meta["uid"], serial), annotations


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
    pod_sets = [_pod_set(role, count, pod) for role, (count, pod) in pods_by_role.items()]
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
        metadata["name"], metadata["annotations"] = _slice_metadata(meta, replaces)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": metadata,
        "spec": spec,
    }


def matches(workload: Mapping[str, Any], counts: Mapping[str, int]) -> bool:
    """Whether the Workload's podSets are the job's roles and counts (a job whose shape
    changed needs a new Workload: Kueue's podSets are immutable)."""
    return pod_set_counts(workload) == dict(counts)


def same_shape(workload: Mapping[str, Any], counts: Mapping[str, int]) -> bool:
    """An elastic job's Workload has its roles, and its counts but the workers' (those
    follow the job's size: `shrunk_pod_sets`, slices)."""
    have = pod_set_counts(workload)
    return have.keys() == counts.keys() and all(
        have[r] == n for r, n in counts.items() if r != WORKER
    )


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

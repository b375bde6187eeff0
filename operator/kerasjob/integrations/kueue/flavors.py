"""What a Kueue admission adds to the job's Pods: the node labels and tolerations of the
assigned ResourceFlavors and the admission checks' podSetUpdates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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


def _update(
    role: str,
    names: list[str],
    flavors: Mapping[str, Mapping[str, Any]],
    checks: list[Mapping[str, Any]],
) -> PodSetUpdate:
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
    return PodSetUpdate(selector, tuple(tolerations), labels, annotations)


def pod_set_updates(
    workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]
) -> dict[str, PodSetUpdate]:
    """Role -> the update of its Pods: the node labels and tolerations of its assigned
    ResourceFlavors (``flavors``: name -> ResourceFlavor body), then the podSetUpdates of
    the Workload's admission checks."""
    checks = ((workload.get("status") or {}).get("admissionChecks")) or []
    return {
        role: _update(role, names, flavors, checks)
        for role, names in assigned_flavors(workload).items()
    }


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

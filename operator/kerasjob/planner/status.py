"""The job's status: phase and Pod counts, computed from what was observed.

Pure functions over plain dictionaries in the wire format (camelCase), so the result can be
diffed against the stored status (`merge_patch`) and written with one merge patch. Its
conditions are set and read with `conditions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kerasjob.api import Phase, wire
from kerasjob.planner.podview import PodView

# The phase names are the API's (kerasjob.api.Phase); plain strings here, as stored in status.
PENDING = Phase.PENDING.value
RUNNING = Phase.RUNNING.value
RESTARTING = Phase.RESTARTING.value
SUCCEEDED = Phase.SUCCEEDED.value
FAILED = Phase.FAILED.value
SUSPENDED = Phase.SUSPENDED.value
QUEUED = Phase.QUEUED.value
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})

__all__ = [
    "FAILED",
    "PENDING",
    "QUEUED",
    "RESTARTING",
    "RUNNING",
    "SUCCEEDED",
    "SUSPENDED",
    "TERMINAL_PHASES",
    "active_phase",
    "merge_patch",
    "replica_statuses",
]


def replica_statuses(
    roles: Iterable[str],
    pods: Iterable[PodView],
    succeeded_roles: Iterable[str],
    *,
    stopped: Iterable[str] = (),
) -> dict[str, wire.ReplicaStatus]:
    """Pod counts per role: active (exists, not finished, not terminating), ready, succeeded
    (tasks that exited 0, even if their Pod is gone; one role per such task), failed (Pods
    now in phase Failed, except the ``stopped`` ones: the operator ended them because the
    job had finished)."""

    def zero() -> wire.ReplicaStatus:
        return {"active": 0, "ready": 0, "succeeded": 0, "failed": 0}

    out = {role: zero() for role in roles}
    stopped = set(stopped)
    for pod in pods:
        counts = out.setdefault(pod.role, zero())
        if pod.phase == "Failed" and pod.name in stopped:
            continue
        if pod.phase == "Failed":
            counts["failed"] += 1
        elif not pod.finished and not pod.deleting:
            counts["active"] += 1
            if pod.ready and pod.phase == "Running":
                counts["ready"] += 1
    for role in succeeded_roles:
        out.setdefault(role, zero())["succeeded"] += 1
    return out


def active_phase(previous: str | None, *, all_ready: bool, restarted: bool) -> str:
    """Phase of a job that is neither finished nor suspended.

    Running once every wanted Pod is Running and Ready; Restarting when it was running (or a
    restart was counted) and some Pod is not; Pending before it first ran.
    """
    if all_ready:
        return RUNNING
    if previous in (RUNNING, RESTARTING) or restarted:
        return RESTARTING
    return PENDING


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new`` (``{}`` if equal).

    Dictionaries are diffed recursively, removed keys become ``None``, lists and scalars are
    replaced whole.
    """
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in old or before != value:
            patch[key] = value
    return patch

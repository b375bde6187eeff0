"""The job's status: phase, conditions and Pod counts, computed from what was observed.

Pure functions over plain dictionaries in the wire format (camelCase), so the result can be
diffed against the stored status (`merge_patch`) and written with one merge patch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kerasjob.api import ConditionType, Phase
from kerasjob.podview import PodView
from kerasjob_contract.times import format_time

# The phase names are the API's (kerasjob.api.Phase); plain strings here, as stored in status.
PENDING = Phase.PENDING.value
RUNNING = Phase.RUNNING.value
RESTARTING = Phase.RESTARTING.value
SUCCEEDED = Phase.SUCCEEDED.value
FAILED = Phase.FAILED.value
SUSPENDED = Phase.SUSPENDED.value
QUEUED = Phase.QUEUED.value
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})

#: Condition types (metav1.Condition), as TFJob and JobSet use them.
COND_CREATED = ConditionType.CREATED.value
COND_RUNNING = ConditionType.RUNNING.value
COND_RESTARTING = ConditionType.RESTARTING.value
COND_SUCCEEDED = ConditionType.SUCCEEDED.value
COND_FAILED = ConditionType.FAILED.value
COND_SUSPENDED = ConditionType.SUSPENDED.value
COND_ADMITTED = ConditionType.ADMITTED.value


def get_condition(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def condition_true(conditions: Iterable[Mapping[str, Any]], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
    add_false: bool = False,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with ``type_`` set; lastTransitionTime moves only on a change
    of status. A condition that does not exist yet is not added as False (absent == False)
    unless ``add_false`` (a False condition that carries a reason worth showing).
    """
    wanted = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(cond)
            continue
        found = True
        new = dict(cond)
        if cond.get("status") != wanted:
            new["lastTransitionTime"] = format_time(now)
        new.update(status=wanted, reason=reason, message=message)
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    if not found and (status or add_false):
        new = {
            "type": type_,
            "status": wanted,
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(now),
        }
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    return out


def replica_statuses(
    roles: Iterable[str],
    pods: Iterable[PodView],
    succeeded_roles: Iterable[str],
    *,
    stopped: Iterable[str] = (),
) -> dict[str, dict[str, int]]:
    """Pod counts per role: active (exists, not finished, not terminating), ready, succeeded
    (tasks that exited 0, even if their Pod is gone; one role per such task), failed (Pods
    now in phase Failed, except the ``stopped`` ones: the operator ended them because the
    job had finished)."""

    def zero() -> dict[str, int]:
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

"""Conditions (metav1.Condition and the like: a list of ``{type, status, reason, message,
lastTransitionTime}``) on any object, in the wire format: the one place they are read and
written, for the job's status, a Pod's, or an integration's objects (a Workload's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from kerasjob.api import wire
from kerasjob_contract.times import format_time


def get_condition(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def condition_true(conditions: Iterable[Mapping[str, Any]], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def condition_if(
    conditions: Iterable[Mapping[str, Any]], type_: str, status: str
) -> Mapping[str, Any] | None:
    """The condition ``type_`` when its status is ``status`` ("True", "False"), else None."""
    cond = get_condition(conditions, type_)
    return cond if cond is not None and cond.get("status") == status else None


def set_condition(
    conditions: Sequence[wire.Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
    add_false: bool = False,
) -> list[wire.Condition]:
    """Return ``conditions`` (metav1.Conditions: the job's, a Workload's) with ``type_`` set;
    lastTransitionTime moves only on a change of status. A condition that does not exist yet
    is not added as False (absent == False) unless ``add_false`` (a False condition that
    carries a reason worth showing).
    """
    wanted = "True" if status else "False"
    out: list[wire.Condition] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(cond)
            continue
        found = True
        new = cond.copy()
        if cond.get("status") != wanted:
            new["lastTransitionTime"] = format_time(now)
        new["status"], new["reason"], new["message"] = wanted, reason, message
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

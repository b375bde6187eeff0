"""The writes to a Workload's status the operator makes as Kueue's job reconciler and
scheduler would: each returns the status patch due, or None when nothing is."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from kerasjob.api import wire
from kerasjob.integrations.kueue.names import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PODS_READY,
    QUOTA_RESERVED,
    REQUEUED,
    WORKER,
    condition,
    conditions,
    generation,
    is_true,
    pod_set_counts,
    reclaimable,
)
from kerasjob.integrations.kueue.reasons import WorkloadReason as WR
from kerasjob.planner.conditions import set_condition


def _conditions(workload: Mapping[str, Any]) -> list[wire.Condition]:
    """The Workload's conditions, copied: metav1.Conditions, the shape of the job's own."""
    return [cast(wire.Condition, dict(c)) for c in conditions(workload)]


def _with(
    workload: Mapping[str, Any],
    type_: str,
    status: bool,
    reason: WR,
    message: str,
    now: datetime,
    conds: list[wire.Condition] | None = None,
) -> list[wire.Condition]:
    """The Workload's conditions (or ``conds``) with ``type_`` set (added even when False)."""
    have = _conditions(workload) if conds is None else conds
    return set_condition(
        have,
        type_,
        status,
        reason.value,
        message,
        now=now,
        generation=generation(workload),
        add_false=True,
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
        or not (status.get("admission") or is_true(workload, QUOTA_RESERVED))
    ):
        return None
    reason = str(evicted.get("reason") or WR.EVICTED.value)
    message = str(evicted.get("message") or "")
    requeue = reason in (WR.PREEMPTED, WR.NODE_FAILURES)
    conds = set_condition(
        _conditions(workload),
        REQUEUED,
        requeue,
        reason,
        message,
        now=now,
        generation=generation(workload),
        add_false=True,
    )
    conds = _with(workload, QUOTA_RESERVED, False, WR.PENDING, message, now, conds)
    no_reservation = "The workload has no reservation"
    conds = _with(workload, ADMITTED, False, WR.NO_RESERVATION, no_reservation, now, conds)
    return {"conditions": conds, "admission": None}


def finished_status(
    workload: Mapping[str, Any], succeeded: bool, message: str, now: datetime
) -> dict[str, Any] | None:
    """The job ended: the Workload's Finished condition (None when already there)."""
    if is_true(workload, FINISHED):
        return None
    reason = WR.SUCCEEDED if succeeded else WR.FAILED
    return {"conditions": _with(workload, FINISHED, True, reason, message, now)}


def pods_ready_status(
    workload: Mapping[str, Any], pods_ready: bool, now: datetime
) -> dict[str, Any] | None:
    """The Workload's PodsReady condition, as Kueue's job reconciler keeps it (what its
    ``waitForPodsReady`` reads): True (Started, or Recovered after a loss) once every Pod
    runs ready, else False (WaitForStart, or WaitForRecovery after it was True). None when
    unchanged."""
    current = condition(workload, PODS_READY) or {}
    admitted = is_true(workload, ADMITTED) and not is_true(workload, EVICTED)
    recovering = current.get("reason") in (WR.WAIT_FOR_RECOVERY, WR.RECOVERED)
    if admitted and pods_ready:
        status, reason = True, WR.RECOVERED if recovering else WR.STARTED
        message = "All pods reached readiness and the workload is running"
    elif admitted and (
        current.get("status") == "True" or current.get("reason") == WR.WAIT_FOR_RECOVERY
    ):
        status, reason = False, WR.WAIT_FOR_RECOVERY
        message = "At least one pod has failed, waiting for recovery"
    else:
        status, reason = False, WR.WAIT_FOR_START
        message = "Not all pods are ready or succeeded"
    if current.get("status") == ("True" if status else "False") and current.get("reason") == reason:
        return None
    return {"conditions": _with(workload, PODS_READY, status, reason, message, now)}


def reclaimable_status(workload: Mapping[str, Any], workers: int) -> dict[str, Any] | None:
    """Without in-place shrink (Kueue's gate off): the status that gives back the quota of
    the workers above ``workers`` (``reclaimablePods``, which may only grow while
    admitted). None when nothing more to give back."""
    give = pod_set_counts(workload).get(WORKER, 0) - workers
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
    if is_true(workload, FINISHED):
        return None
    message = f"Replaced by workload slice {(by.get('metadata') or {}).get('name')}"
    return {"conditions": _with(workload, FINISHED, True, WR.SLICE_REPLACED, message, now)}

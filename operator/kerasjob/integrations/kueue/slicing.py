"""An elastic job's Kueue Workload slices sorted out (`slices`): the current one, a pending
grow slice, replaced ones still to finish and extra ones to delete."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kerasjob.integrations.kueue.names import (
    FINISHED,
    REPLACEMENT_FOR_ANNOTATION,
    condition,
    finished,
    owned_by,
    reserved,
    slice_serial,
    workload_key,
)
from kerasjob.integrations.kueue.reasons import WorkloadReason


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


def _replacing(
    current: Mapping[str, Any], mine: list[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The slice ``current`` replaces, when Kueue's scheduler has just finished it."""
    wanted = (current.get("metadata") or {}).get("annotations", {}).get(REPLACEMENT_FOR_ANNOTATION)
    return next(
        (
            w
            for w in mine
            if workload_key(w) == wanted
            and (condition(w, FINISHED) or {}).get("reason") == WorkloadReason.SLICE_REPLACED
        ),
        None,
    )


def slices(workloads: Iterable[Mapping[str, Any]], job_uid: str) -> Slices:
    """Sort the Workloads of the job with ``job_uid``: the current slice is the newest one
    holding quota, else the oldest one not finished, else (all finished: the job ended) the
    newest."""
    mine = sorted((w for w in workloads if owned_by(w, job_uid)), key=slice_serial)
    if not mine:
        return Slices(None)
    live = [w for w in mine if not finished(w)]
    if not live:
        return Slices(mine[-1])
    holding = [w for w in live if reserved(w)]
    current = holding[-1] if holding else live[0]
    at = slice_serial(current)
    newer = [w for w in live if slice_serial(w) > at]
    return Slices(
        current,
        newer[-1] if newer else None,
        replaced=tuple(w for w in live if slice_serial(w) < at),
        extra=tuple(newer[:-1]),
        replacing=None if holding else _replacing(current, mine),
    )

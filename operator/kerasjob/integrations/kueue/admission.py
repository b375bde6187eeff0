"""Kueue's gate: whether a job of a LocalQueue may run now, and why (not), from its
Workload (`gate`) or an elastic job's Workload slices (`gate_of`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kerasjob.api import Reason
from kerasjob.integrations.kueue.names import (
    ADMITTED,
    EVICTED,
    FINISHED,
    QUOTA_RESERVED,
    admitted_workers,
    condition,
    is_true,
)
from kerasjob.integrations.kueue.slicing import Slices
from kerasjob.planner.scheduling import Gate
from kerasjob_contract.times import parse_time

#: Kueue's preemption message names the preemptor's job by UID.
_JOB_UID_RE = re.compile(r"JobUID: ([0-9a-fA-F-]{8,})")

#: How long the job runs on while Kueue admits a slice it has finished the predecessor of
#: (two writes of its scheduler, normally milliseconds apart); then the job waits for it.
ADMITTING_GRACE_SECONDS = 10.0


#: Who admits, in the planner's messages (`scheduling.Gate.by`).
KUEUE = "Kueue"


def _evicted(
    queue: str, evicted: Mapping[str, Any], job_name_of: Callable[[str], str | None] | None
) -> Gate:
    why = evicted.get("message") or evicted.get("reason") or "evicted"
    found = _JOB_UID_RE.search(why)
    by = job_name_of(found.group(1)) if found and job_name_of else None
    if by:
        why = f"by KerasJob {by}: {why}"
    return Gate(
        False,
        Reason.EVICTED.value,
        f"evicted by Kueue ({evicted.get('reason')}: {why}); waiting in LocalQueue "
        f"{queue} to be admitted again",
        by=KUEUE,
    )


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
    queued = Reason.QUEUED.value
    if workload is None:
        return Gate(
            False, queued, f"waiting for its Kueue Workload in LocalQueue {queue}", by=KUEUE
        )
    evicted = condition(workload, EVICTED)
    if evicted is not None and evicted.get("status") == "True":
        return _evicted(queue, evicted, job_name_of)
    if is_true(workload, ADMITTED):
        admission = (workload.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue") or "?"
        message = f"admitted by Kueue to ClusterQueue {cq} (LocalQueue {queue})"
        workers = admitted_workers(workload) if elastic else None
        return Gate(True, Reason.ADMITTED.value, message, workers, by=KUEUE)
    reserved = condition(workload, QUOTA_RESERVED)
    detail = (reserved or {}).get("message") or "waiting for quota"
    if is_true(workload, QUOTA_RESERVED):
        detail = "quota reserved, waiting for admission checks"
    return Gate(False, queued, f"queued in LocalQueue {queue}: {detail}", by=KUEUE)


def admitting_left(found: Slices, now: datetime) -> float:
    """Seconds the job runs on while Kueue admits the current slice after finishing the one
    it replaces (0: it is not doing so, or for too long)."""
    old = found.replacing
    if old is None:
        return 0.0
    at = parse_time((condition(old, FINISHED) or {}).get("lastTransitionTime"))
    return max(0.0, ADMITTING_GRACE_SECONDS - ((now - at).total_seconds() if at else 0.0))


def gate_of(
    queue: str,
    found: Slices,
    now: datetime,
    job_name_of: Callable[[str], str | None] | None = None,
) -> Gate:
    """An elastic job's gate: its current slice's, or, while Kueue admits a slice it has
    just finished the predecessor of, the predecessor's admission (for a grace period)."""
    left = admitting_left(found, now)
    if found.replacing is not None and left > 0:
        was = gate(queue, found.replacing, job_name_of, elastic=True)
        if was.admitted:
            name = (found.current or {}).get("metadata", {}).get("name")
            return dataclasses.replace(
                was,
                message=f"{was.message}; Kueue is admitting Workload slice {name}",
                recheck_after=left,
            )
    return gate(queue, found.current, job_name_of, elastic=True)

"""Desired vs observed: one pure function, `plan`, from a job and its Pods to what to do.

The controller (`controller.py`) gathers a `JobView`, the job's stored status and the Pods
from its index, calls `plan`, writes ``Plan.status`` with one conditional merge patch, and
only then carries out ``Plan.actions`` and posts ``Plan.events``. Because the counters and
the bookkeeping (``status.trackedPods``) are written before any Pod is deleted or created,
an operator that dies at any moment restarts from the API server's state and neither loses
nor double-counts a restart; because every child has a deterministic name and an owner
reference, it never creates a duplicate or leaves an orphan.

Per Pod, ``trackedPods[name]`` holds the UID of the incarnation last seen, the container
restarts of it already counted, whether its end (exit, deletion, loss) was counted, and
whether its task succeeded (sticky: a succeeded task is never re-created).

`plan` composes step functions over one typed accumulator, `planstate.PlanState`:
`housekeeping` (stale and stuck Pods and changed children, first; the status completed,
last), then one of `finishing` (a finished, invalid or rejected job), `suspension`
(suspended, or queued by an admission integration) or `running.active`, which uses
`accounting` (what happened to the Pods, counted once), `elastic` (resizes) and
`finishing` (the job's end). Each step
reads and writes only the state's declared fields; none calls the API server.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from kerasjob.api import Reason, wire
from kerasjob.planner import accounting, elastic, finishing, housekeeping, running, suspension
from kerasjob.planner import status as st
from kerasjob.planner.planning import (
    JobView,
    Plan,
)
from kerasjob.planner.planstate import PlanState
from kerasjob.planner.podview import PodView
from kerasjob.planner.rejection import Rejection

__all__ = ["decide", "plan"]


def plan(
    job: JobView,
    old_status: Mapping[str, Any],
    pods: Iterable[PodView],
    now: datetime,
    *,
    force_delete_after: float = 30.0,
    rejection: Rejection | None = None,
) -> Plan:
    """Decide, from the job, its stored status and its observed Pods, what to do now.

    ``force_delete_after``: seconds past a Pod's deletionTimestamp (which already includes
    its grace period) after which it is deleted again with grace period 0.
    ``rejection``: the API server's last refusal to create a child of this job (see
    `rejection`): a permanent one fails the job, a forbidden one is shown while waiting.
    """
    if job.deleting or job.managed_by is not None:
        # Going away; or run by another controller (spec.managedBy): its status is that
        # controller's to write (e.g. copied from the cluster that runs it).
        return Plan(status=cast(wire.Status, copy.deepcopy(dict(old_status))))
    s = PlanState.start(job, old_status, pods, now, force_delete_after, rejection)
    elastic.init_size(s)  # an elastic job's tasks are those of its current size
    housekeeping.housekeeping(s)
    housekeeping.restore_children(s)
    if s.job.generation is not None:
        s.status["observedGeneration"] = s.job.generation
    decide(s)
    housekeeping.chief_exit_progress(s)
    housekeeping.complete_status(s)
    return Plan(
        status=s.status,
        actions=s.actions,
        events=s.events,
        requeue_after=min(s.requeues) if s.requeues else None,
        pod_group=s.pod_group,
        grow_to=s.grow_to,
    )


def decide(s: PlanState) -> None:
    """The one step that fits the job: finished, invalid, rejected for good, suspended,
    queued by an admission integration, or active. What happened before a hold or a
    rejection still counts (and may end the job)."""
    if s.prev_phase in st.TERMINAL_PHASES:
        finishing.finished(s)
    elif s.job.invalid:
        message = "; ".join(s.job.invalid)
        finishing.finish(s, st.FAILED, Reason.INVALID_SPEC.value, f"invalid spec: {message}")
        finishing.finished(s)
    elif s.rejection is not None and s.rejection.permanent:
        accounting.count_outcomes(s)
        finishing.finish(s, st.FAILED, s.rejection.reason, s.rejection.describe())
        finishing.finished(s)
    elif s.job.suspend:
        accounting.count_outcomes(s)
        if not finishing.concluded(s):
            suspension.suspended(s)
    elif s.job.gate is not None and not s.job.gate.admitted:
        accounting.count_outcomes(s)
        if not finishing.concluded(s):
            suspension.suspended(s, st.QUEUED, s.job.gate.reason, s.job.gate.message)
    else:
        running.active(s)

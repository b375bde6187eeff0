"""The planner's step for a held job: suspended by spec.suspend, or queued until an
admission integration (`scheduling.Gate`) admits it (again). A step over
`planstate.PlanState`, composed by `reconcile.plan`."""

from __future__ import annotations

from kerasjob.api import ConditionType, Reason
from kerasjob.planner import conditions
from kerasjob.planner import status as st
from kerasjob.planner.planstate import PlanState


def suspended(
    s: PlanState,
    phase: str = st.SUSPENDED,
    reason: str = Reason.SUSPENDED.value,
    message: str = "spec.suspend is true: Pods deleted, state kept in the checkpoint",
) -> None:
    """The Pods go with their grace period (the trainer saves on SIGTERM); no restart
    counts: their disappearance is on purpose."""
    for pod in s.owned.values():
        s.delete(pod)
    for name, rec in s.tracked.items():
        current = s.owned.get(name)
        if current is not None:
            rec["uid"] = current.uid
        rec["counted"] = True
    s.status["phase"] = phase
    s.status.pop("startTime", None)
    old = conditions.get_condition(s.conditions, ConditionType.SUSPENDED) or {}
    s.cond(ConditionType.SUSPENDED, True, reason, message)
    s.cond(ConditionType.RUNNING, False, reason, message)
    s.cond(ConditionType.RESTARTING, False, reason, message)
    if s.job.gate is not None:
        s.cond(ConditionType.ADMITTED, False, reason, message, add_false=True)
    if s.prev_phase != phase or old.get("reason") != reason:
        s.event("Normal", reason, message)

"""An endless loop of the same disruption with no training progress, and its back-off.

Disruptions never use up ``backoffLimit`` (a preempted job must survive any number of
preemptions). But the same disruption over and over with no step trained in between is not
a run of bad luck: a template ``nodeName`` of a node that does not exist gets every Pod
deleted by the Pod garbage collector, a claim that never binds gets its Pods evicted, and
the job re-created Pods forever, each one a "disruption", with no word of why.

So each restart records, in ``status.lastRestart``, how many restarts in a row had the same
reason with no training progress (``repeated``; progress is ``status.progress.step``, which
the operator scrapes from the chief; a job that was Running, every Pod ready, when the
restart happened made progress too) and the step when that run began (``progressStep``).
Restarts in a row are rounds of the group: Pods lost while an earlier loss of the group is
still being restarted (a node drain that takes several workers; a trainer without the
container's supervisor, whose survivors exit 42/43 after the lost one) are the same round,
and keep its count (before, one deletion of a worker of an 8-worker job whose trainers ran
without the supervisor counted 8 restarts in a row and held re-creation back 160 s).
From `LOOP_THRESHOLD` repeats on the job says so (condition Restarting, reason
`Reason.DISRUPTION_LOOP.value`) and re-creates Pods only after `delay` seconds, doubling up to
`MAX_DELAY_SECONDS`. Progress, or another reason, starts the count afresh. Still never a
failure: the loop may end on its own (a node comes back, a quota frees up).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kerasjob.api import wire
from kerasjob_contract.times import parse_time

#: Restarts in a row, same reason, no progress, before the back-off starts.
LOOP_THRESHOLD = 3
BASE_DELAY_SECONDS = 10.0
MAX_DELAY_SECONDS = 300.0


def progress_step(status: wire.Status) -> int:
    step = (status.get("progress") or {}).get("step")
    return int(step) if isinstance(step, int) else 0


def record(
    previous: wire.LastRestart | None,
    reason: str,
    status: wire.Status,
    *,
    was_running: bool,
    same_round: bool = False,
) -> wire.LastRestart:
    """``repeated`` and ``progressStep`` of a new restart with ``reason``, after
    ``previous`` (the last lastRestart) in a job whose status is ``status``.
    ``was_running``: the job was Running (every Pod ready) when this happened, which counts
    as progress too (a trainer that exports no step is not held back after preemptions).
    ``same_round``: another Pod of the group was lost and counted and is not yet back: this
    restart is part of that round, whose count and step it keeps."""
    step = progress_step(status)
    prev = previous or {}
    if same_round and prev.get("disruption") is not False and "repeated" in prev:
        return {
            "repeated": int(prev.get("repeated") or 1),
            "progressStep": int(prev.get("progressStep", step)),
        }
    same = not was_running and prev.get("reason") == reason and prev.get("disruption") is not False
    start = prev.get("progressStep")
    if same and isinstance(start, int) and start == step:
        return {"repeated": int(prev.get("repeated") or 1) + 1, "progressStep": step}
    return {"repeated": 1, "progressStep": step}


def delay(repeated: int) -> float:
    """Seconds to wait before re-creating Pods after the ``repeated``-th restart in a row."""
    if repeated < LOOP_THRESHOLD:
        return 0.0
    return min(BASE_DELAY_SECONDS * 2.0 ** (repeated - LOOP_THRESHOLD), MAX_DELAY_SECONDS)


def looping(last: wire.LastRestart | None, status: wire.Status) -> bool:
    """The last restart is part of a loop that is still without progress."""
    last = last or {}
    repeated = int(last.get("repeated") or 0)
    return (
        repeated >= LOOP_THRESHOLD
        and bool(last.get("disruption"))
        and last.get("progressStep") == progress_step(status)
    )


def hold_until(last: wire.LastRestart | None, status: wire.Status) -> datetime | None:
    """When Pods may be re-created again, if the job is in a loop; else None."""
    if not looping(last, status):
        return None
    assert last is not None
    when = parse_time(last.get("time"))
    if when is None:
        return None
    return when + timedelta(seconds=delay(int(last["repeated"])))


def message(last: wire.LastRestart) -> str:
    """The Restarting condition's message while in a loop (stable between reconciles)."""
    repeated = int(last.get("repeated") or 0)
    return (
        f"Pod {last.get('pod')}: {last.get('reason')} {repeated} times in a row with no "
        f"training progress (step {last.get('progressStep')}); Pods are re-created "
        f"{delay(repeated):.0f}s after the last restart, the delay doubling up to "
        f"{MAX_DELAY_SECONDS:.0f}s (disruptions do not count against backoffLimit)"
    )

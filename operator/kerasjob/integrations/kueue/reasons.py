"""Reasons Kueue's own API gives on a Workload's conditions (the operator writes them as
Kueue's job reconciler and scheduler would). The job's reasons are `kerasjob.api.Reason`."""

from __future__ import annotations

import enum


class WorkloadReason(str, enum.Enum):
    PENDING = "Pending"
    NO_RESERVATION = "NoReservation"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STARTED = "Started"
    RECOVERED = "Recovered"
    WAIT_FOR_START = "WaitForStart"
    WAIT_FOR_RECOVERY = "WaitForRecovery"
    SLICE_REPLACED = "WorkloadSliceReplaced"
    """The Finished reason Kueue's scheduler gives a replaced slice."""
    PREEMPTED = "Preempted"
    NODE_FAILURES = "NodeFailures"
    EVICTED = "Evicted"

"""KerasJobStatus: what the operator reports (conditions, counters, tracked Pods, progress)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kerasjob.api.base import ConditionStatus, Phase, Timestamp, _StatusModel
from kerasjob.api.elastic import ElasticStatus

# ---------------------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------------------


class Condition(_StatusModel):
    """A metav1.Condition."""

    type: str = Field(
        ...,
        min_length=1,
        max_length=316,
        description="Type of the condition, e.g. Running, Succeeded, Failed, Suspended.",
    )
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    reason: str = Field(
        "",
        max_length=1024,
        description="A CamelCase machine-readable reason for the last transition.",
    )
    message: str = Field(
        "", max_length=32768, description="A human-readable message about the transition."
    )
    last_transition_time: Timestamp | None = Field(
        None, description="When the condition last changed status."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation the condition was set for."
    )


class ReplicaStatus(_StatusModel):
    """Pod counts of one role."""

    active: int = Field(0, ge=0, description="Pods that exist and have not finished.")
    ready: int = Field(0, ge=0, description="Active Pods whose Ready condition is True.")
    succeeded: int = Field(0, ge=0, description="Pods whose trainer exited with 0.")
    failed: int = Field(0, ge=0, description="Pods that finished with a failure.")


class RestartCounts(_StatusModel):
    """How many times the job restarted, by cause."""

    disruptions: int = Field(
        0,
        ge=0,
        description=(
            "Restarts not caused by the program (eviction, preemption, lost node or peer, "
            "signals, exit codes 42/43). Never count against backoffLimit."
        ),
    )
    failures: int = Field(
        0, ge=0, description="Error exits of the program; counted against spec.backoffLimit."
    )


class LastRestart(_StatusModel):
    """The most recent restart."""

    time: Timestamp | None = Field(None, description="When the restart was decided.")
    reason: str = Field(
        "", max_length=1024, description="Why, e.g. Evicted, Preempted, PeerLost, Error."
    )
    pod: str = Field("", max_length=253, description="The Pod whose exit or loss caused it.")
    exit_code: int | None = Field(
        None, description="The trainer container's exit code, when it exited."
    )
    disruption: bool | None = Field(None, description="True for a disruption, false for a failure.")
    repeated: int | None = Field(
        None,
        ge=1,
        description=(
            "How many restarts of the group in a row had this reason with no training "
            "progress in between (see status.progress.step); Pods lost while an earlier "
            "loss is still being restarted are the same restart. From 3 on, Pods are "
            "re-created with a growing delay (condition Restarting, reason DisruptionLoop)."
        ),
    )
    progress_step: int | None = Field(
        None, ge=0, description="status.progress.step when that run of restarts began."
    )
    restarted_in_place: list[Annotated[str, Field(max_length=253)]] | None = Field(
        None,
        max_length=1024,
        description=(
            "The job's other training Pods, which kept their Pod (UID, node, IP, claims): "
            "their trainers restarted inside it (the container's supervisor) and are not "
            "counted again. The Pod in `pod` is the one re-created."
        ),
    )
    stand_in: bool | None = Field(
        None,
        description=(
            "True when `pod`'s trainer left because its group broke (exit 42 or 43) before "
            "the loss that broke it was seen: that loss, once seen in the same round, takes "
            "this count over instead of adding one."
        ),
    )


class Goodput(_StatusModel):
    """What disruptions cost the job so far, as the chief accounted it (each disruption:
    from the last productive step to the first resumed step)."""

    disruptions: int | None = Field(None, ge=0, description="Disruptions accounted.")
    lost_seconds: float | None = Field(
        None,
        ge=0,
        description="Seconds from the last productive step to the first resumed "
        "one, over all disruptions (restart, TensorFlow start-up, restore, redone steps).",
    )
    steps_redone: int | None = Field(
        None, ge=0, description="Steps trained again after resuming from an older backup."
    )
    productive_seconds: float | None = Field(
        None, ge=0, description="Seconds spent on steps that were kept."
    )
    goodput: float | None = Field(
        None, ge=0, le=1, description="productiveSeconds / (productiveSeconds + lostSeconds)."
    )


class Progress(_StatusModel):
    """Training progress reported by the chief."""

    epoch: int | None = Field(None, ge=0, description="Current epoch (0-based).")
    step: int | None = Field(None, ge=0, description="Global steps completed.")
    total_steps: int | None = Field(None, ge=0, description="epochs * stepsPerEpoch.")
    loss: float | None = Field(None, description="Most recent training loss.")
    metrics: dict[str, float] | None = Field(
        None, description="Most recent training metrics by name, e.g. accuracy."
    )
    samples_per_second: float | None = Field(None, ge=0, description="Global training throughput.")
    updated_at: Timestamp | None = Field(None, description="When this was last observed.")
    goodput: Goodput | None = Field(
        None, description="What disruptions cost so far (set once the first one is accounted)."
    )


class TrackedPod(_StatusModel):
    """What the operator already counted for one Pod (bookkeeping, see status.trackedPods)."""

    uid: str = Field("", max_length=64, description="UID of the incarnation last seen.")
    restart_count: int = Field(
        0, ge=0, description="Container restarts of that incarnation already counted."
    )
    counted: bool = Field(
        False, description="Its exit or loss has been counted (or it was deleted on purpose)."
    )
    succeeded: bool = Field(
        False, description="This task exited 0: it is never re-created. Survives re-creation."
    )
    stopped: bool = Field(
        False,
        description=(
            "The operator stopped this incarnation because the job had finished "
            "(cleanPodPolicy): its exit is not a failure."
        ),
    )


class KerasJobStatus(_StatusModel):
    """The observed state of a KerasJob, written by the operator."""

    phase: Phase | None = Field(
        None,
        description="Pending, Running, Restarting, Succeeded, Failed, Suspended or Queued "
        "(held by Kueue).",
    )
    conditions: list[Condition] | None = Field(
        None,
        description="Standard conditions, one per type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    replica_statuses: dict[str, ReplicaStatus] | None = Field(
        None, description="Pod counts by role (worker, chief, evaluator)."
    )
    restarts: RestartCounts | None = Field(
        None, description="Restarts so far, split into disruptions and failures."
    )
    last_restart: LastRestart | None = Field(None, description="The most recent restart.")
    progress: Progress | None = Field(None, description="Training progress from the chief.")
    elastic: ElasticStatus | None = Field(
        None, description="An elastic job's current size and its resizes."
    )
    start_time: Timestamp | None = Field(
        None, description="When the operator first created the job's Pods."
    )
    completion_time: Timestamp | None = Field(None, description="When the job succeeded or failed.")
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation this status reflects."
    )
    tracked_pods: dict[str, TrackedPod] | None = Field(
        None,
        description=(
            "Operator bookkeeping, keyed by Pod name: which incarnation (UID) of each Pod was "
            "seen and what of it was already counted, so every restart is counted exactly "
            "once across Pod re-creations and operator restarts."
        ),
    )

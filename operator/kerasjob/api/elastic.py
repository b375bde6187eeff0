"""spec.elastic and status.elastic: a job that trains on the workers there is room for.

`spec.workers` stays the preferred (and largest) size; `spec.elastic.minWorkers` the smallest
the job may shrink to. The operator shrinks when a worker's Pod has been unschedulable for
`shrinkAfterSeconds`, and grows back when probe Pods (the worker's scheduling constraints, a
sleeping container) are scheduled, no sooner than `resizeCooldownSeconds` after the last
resize. Every resize restarts all of the job's Pods with a TF_CONFIG of the new size from the
last backup; it is neither a failure nor a disruption.
"""

from __future__ import annotations

import enum

from pydantic import Field

from kerasjob.api.base import Timestamp, _Model, _StatusModel


class BatchPolicy(str, enum.Enum):
    """How the batch follows a resize (the trainer's list: kerasjob_contract's
    BATCH_POLICIES)."""

    KEEP_GLOBAL_BATCH = "KeepGlobalBatch"


class ElasticSpec(_Model):
    """Elastic training between minWorkers and spec.workers (the preferred size)."""

    min_workers: int = Field(
        ...,
        ge=1,
        le=1000,
        description=(
            "The fewest workers the job trains on. When a worker's Pod cannot be scheduled "
            "(its capacity is gone), the job shrinks, down to this many, instead of waiting; "
            "spec.workers is the preferred size it grows back to. At most spec.workers."
        ),
    )
    shrink_after_seconds: int = Field(
        60,
        ge=0,
        le=86400,
        description=(
            "How long a worker's Pod must have been unschedulable before the job shrinks "
            "without it. Default: 60."
        ),
    )
    resize_cooldown_seconds: int = Field(
        120,
        ge=0,
        le=86400,
        description=(
            "The least time between a resize and growing again, so capacity that comes and "
            "goes does not restart the job again and again. Shrinking is never delayed by "
            "it (the capacity is already gone). Default: 120."
        ),
    )
    batch_policy: BatchPolicy = Field(
        BatchPolicy.KEEP_GLOBAL_BATCH,
        description=(
            "KeepGlobalBatch (the default and only policy): the global batch stays "
            "batchSizePerReplica x the replicas at the preferred size; with fewer workers "
            "each replica takes a larger share. Steps, examples, the data position and the "
            "learning rate stay those of an undisturbed run: a resize changes the speed, "
            "not the result. batchSizePerReplica x (workers + chief) must divide evenly by "
            "every size from minWorkers (+ chief) up."
        ),
    )


class Resize(_StatusModel):
    """One resize of an elastic job."""

    time: Timestamp | None = Field(None, description="When it was decided.")
    from_workers: int = Field(0, ge=0, description="Workers before.")
    to_workers: int = Field(0, ge=0, description="Workers after.")
    reason: str = Field("", max_length=128, description="CapacityLost or CapacityReturned.")
    message: str = Field("", max_length=1024, description="Why, in words.")


class ElasticStatus(_StatusModel):
    """Where an elastic job stands."""

    workers: int | None = Field(
        None, ge=0, description="The workers the job runs with now (its TF_CONFIG's size)."
    )
    resizes: int | None = Field(None, ge=0, description="Resizes so far.")
    history: list[Resize] | None = Field(
        None, description="The most recent resizes, oldest first (at most 10)."
    )
    growth: str | None = Field(
        None,
        max_length=2048,
        description=(
            "While the job runs below its preferred size: where a grow back stands, in "
            "words (a probe Pod waiting for a place and the scheduler's reason, a probe "
            "settling, the cool-down, another job waiting for a place, Kueue's admission)."
        ),
    )

"""The job's status in its wire format: TypedDicts with the camelCase keys the operator
writes (``status.phase``, ``status.trackedPods[name].restartCount`` ...), generated from the
pydantic models (`kerasjob.api.status`, the status's one definition, which the CRD's schema
is generated from too) by `kerasjob.tools.wiregen` (`make crds`). Do not edit: change the
model and regenerate (``tests/unit/test_status_wire.py`` fails on drift).

All are ``total=False``: a stored status may lack any key (a job never run, an older
operator's status), and the planner reads each with ``.get``.
"""

from __future__ import annotations

from typing import TypedDict


class Condition(TypedDict, total=False):
    """A metav1.Condition (`kerasjob.api.status.Condition`)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


class ReplicaStatus(TypedDict, total=False):
    """Pod counts of one role (`kerasjob.api.status.ReplicaStatus`)."""

    active: int
    ready: int
    succeeded: int
    failed: int


class RestartCounts(TypedDict, total=False):
    """How many times the job restarted, by cause (`kerasjob.api.status.RestartCounts`)."""

    disruptions: int
    failures: int


class LastRestart(TypedDict, total=False):
    """The most recent restart (`kerasjob.api.status.LastRestart`)."""

    time: str
    reason: str
    pod: str
    exitCode: int
    disruption: bool
    repeated: int
    progressStep: int
    restartedInPlace: list[str]
    standIn: bool


class Goodput(TypedDict, total=False):
    """What disruptions cost the job so far, as the chief accounted it (each disruption: from the
    last productive step to the first resumed step) (`kerasjob.api.status.Goodput`)."""

    disruptions: int
    lostSeconds: float
    stepsRedone: int
    productiveSeconds: float
    goodput: float


class Progress(TypedDict, total=False):
    """Training progress reported by the chief (`kerasjob.api.status.Progress`)."""

    epoch: int
    step: int
    totalSteps: int
    loss: float
    metrics: dict[str, float]
    samplesPerSecond: float
    updatedAt: str
    goodput: Goodput


class Resize(TypedDict, total=False):
    """One resize of an elastic job (`kerasjob.api.elastic.Resize`)."""

    time: str
    fromWorkers: int
    toWorkers: int
    reason: str
    message: str


class ElasticStatus(TypedDict, total=False):
    """Where an elastic job stands (`kerasjob.api.elastic.ElasticStatus`)."""

    workers: int
    resizes: int
    history: list[Resize]
    growth: str


class TrackedPod(TypedDict, total=False):
    """What the operator already counted for one Pod (bookkeeping, see status.trackedPods)
    (`kerasjob.api.status.TrackedPod`)."""

    uid: str
    restartCount: int
    counted: bool
    succeeded: bool
    stopped: bool


class Status(TypedDict, total=False):
    """The observed state of a KerasJob, written by the operator
    (`kerasjob.api.status.KerasJobStatus`)."""

    phase: str
    conditions: list[Condition]
    replicaStatuses: dict[str, ReplicaStatus]
    restarts: RestartCounts
    lastRestart: LastRestart
    progress: Progress
    elastic: ElasticStatus
    startTime: str
    completionTime: str
    observedGeneration: int
    trackedPods: dict[str, TrackedPod]

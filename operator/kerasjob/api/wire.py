"""The job's status in its wire format: TypedDicts with the camelCase keys the operator
writes (``status.phase``, ``status.trackedPods[name].restartCount`` ...).

The pydantic models in `kerasjob.api.status` describe the same object for the CRD's schema
and for readers; the planner builds the status as plain dictionaries (diffed against the
stored one with `status.merge_patch`), typed by these. ``tests/unit/test_status_wire.py``
checks that every TypedDict here has exactly the keys of its model's aliases, nested types
included, so the two cannot drift: a field is added in both places or the test fails.

All are ``total=False``: a stored status may lack any key (a job never run, an older
operator's status), and the planner reads each with ``.get``.
"""

from __future__ import annotations

from typing import TypedDict


class Condition(TypedDict, total=False):
    """A metav1.Condition (`status.Condition`)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


class ReplicaStatus(TypedDict, total=False):
    """Pod counts of one role (`status.ReplicaStatus`)."""

    active: int
    ready: int
    succeeded: int
    failed: int


class RestartCounts(TypedDict, total=False):
    """Restarts by cause (`status.RestartCounts`)."""

    disruptions: int
    failures: int


class LastRestart(TypedDict, total=False):
    """The most recent restart (`status.LastRestart`)."""

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
    """What disruptions cost so far (`status.Goodput`)."""

    disruptions: int
    lostSeconds: float
    stepsRedone: int
    productiveSeconds: float
    goodput: float


class Progress(TypedDict, total=False):
    """Training progress from the chief (`status.Progress`)."""

    epoch: int
    step: int
    totalSteps: int
    loss: float
    metrics: dict[str, float]
    samplesPerSecond: float
    updatedAt: str
    goodput: Goodput


class TrackedPod(TypedDict, total=False):
    """What was already counted of one Pod (`status.TrackedPod`)."""

    uid: str
    restartCount: int
    counted: bool
    succeeded: bool
    stopped: bool


class Resize(TypedDict, total=False):
    """One resize of an elastic job (`elastic.Resize`)."""

    time: str
    fromWorkers: int
    toWorkers: int
    reason: str
    message: str


class ElasticStatus(TypedDict, total=False):
    """An elastic job's size and resizes (`elastic.ElasticStatus`)."""

    workers: int
    resizes: int
    history: list[Resize]
    growth: str


class Status(TypedDict, total=False):
    """The whole status of a KerasJob (`status.KerasJobStatus`)."""

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

"""The planner's vocabulary: what it is given (`JobView`, `Task`), what it decides (`Plan`:
the new status, `Action`s, `Event`s) and `newest_incarnations` of a Pod name. Pure data, no
Kubernetes calls; the decisions themselves are in `reconcile`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kerasjob.api import wire
from kerasjob.planner.podview import PodView
from kerasjob.planner.scheduling import Gate, Placement, PodGroup


@dataclass(frozen=True)
class Task:
    """One Pod the job wants: <job>-<role>-<index>."""

    name: str
    role: str
    index: int


@dataclass(frozen=True)
class GroupPolicy:
    """What a lost Pod takes with it, as data (one value per kind of training group).

    ``members``: the roles whose trainers leave (and restart in place, from the last
    backup) when the group breaks; the evaluator is in no group. ``breaks_group``: the
    roles whose loss breaks it. A member whose role does not break the group is lost alone:
    it is re-created and rejoins while the others train on (a parameter-server job's
    worker: the chief's ClusterCoordinator retries its work on the other workers)."""

    members: frozenset[str]
    breaks_group: frozenset[str]

    def stopped_with(self, role: str) -> frozenset[str]:
        """The roles whose trainers leave when a Pod of ``role`` is lost."""
        return self.members if role in self.breaks_group else frozenset()


#: MultiWorkerMirroredStrategy (and Keras 3's all-reduce): every collective needs every
#: worker, so any member's loss restarts the whole group.
ALL_REDUCE = GroupPolicy(
    members=frozenset({"chief", "worker"}), breaks_group=frozenset({"chief", "worker"})
)
#: ParameterServerStrategy: the variables live on the ps, the chief coordinates; a worker
#: holds no state, so only a ps or the chief breaks the group.
PARAMETER_SERVER = GroupPolicy(
    members=frozenset({"chief", "worker", "ps"}), breaks_group=frozenset({"chief", "ps"})
)


@dataclass(frozen=True)
class ElasticPolicy:
    """spec.elastic, for the planner: sizes between ``min_workers`` and ``preferred``."""

    min_workers: int
    preferred: int
    shrink_after_seconds: float = 60.0
    resize_cooldown_seconds: float = 120.0


@dataclass(frozen=True)
class ChildDrift:
    """The job's Service or NetworkPolicy (``kind``) whose spec ``fields`` (those the
    operator sets) differ from what it renders for the job."""

    kind: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class JobView:
    """The parts of a KerasJob that decisions depend on."""

    name: str
    namespace: str
    uid: str
    generation: int | None
    tasks: tuple[Task, ...]
    chief: str
    """Pod name of the task whose success completes the job."""
    restart_policy: str = "OnFailure"
    backoff_limit: int = 6
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: str = "Running"
    suspend: bool = False
    deleting: bool = False
    invalid: tuple[str, ...] = ()
    """Validation messages; non-empty fails the job with reason InvalidSpec."""
    gate: Gate | None = None
    """With an admission integration (a queue): whether the job may run now."""
    elastic: ElasticPolicy | None = None
    """spec.elastic; ``tasks`` then lists the preferred size's workers (`elastic`)."""
    others_waiting: tuple[PodView, ...] = ()
    """Other jobs' Pods no node fits now (`elastic.waiting_jobs`): an elastic job does not
    grow while one could use the place growth would take (`contention.competes`)."""
    total_steps: int | None = None
    """epochs x stepsPerEpoch of spec.trainer (status.progress.totalSteps), when known."""
    managed_by: str | None = None
    """spec.managedBy when it names another controller: the job is not ours to run."""
    placement: Placement | None = None
    """With an integration that places the job's Pods all at once: the group they are made
    in and why they wait (`scheduling.Placement`)."""
    missing_children: tuple[str, ...] = ()
    """Kinds of the job's children other than Pods ("Service", "NetworkPolicy") that the
    operator watches and that do not exist (nor were just made): `CreateService` makes
    them again while the job runs."""
    drifted_children: tuple[ChildDrift, ...] = ()
    """The job's Service or NetworkPolicy whose spec differs from what the operator renders
    for the job (someone changed it): `RestoreChild` gives it back."""
    group: GroupPolicy = ALL_REDUCE
    """Which Pods a lost one takes with it (`PARAMETER_SERVER` for a job with spec.ps)."""

    @property
    def roles(self) -> list[str]:
        return list(dict.fromkeys(t.role for t in self.tasks))


@dataclass(frozen=True)
class CreateService:
    pass


@dataclass(frozen=True)
class RestoreChild:
    """Patch the job's ``kind`` ("Service", "NetworkPolicy") back to the spec the operator
    renders for the job (`manifests.drift.restore_patch`); ``fields``: those that differed.
    Once patched, a Warning says so (`housekeeping.child_restored`)."""

    kind: str
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class CreatePod:
    task: Task
    workers: int | None = None
    """An elastic job's current size (its TF_CONFIG's workers); None: spec.workers."""


@dataclass(frozen=True)
class CreateProbe:
    """A probe Pod of an elastic job below its preferred size: the worker's scheduling
    constraints and a sleeping container, <job>-probe-<index>; scheduled = capacity."""

    name: str
    index: int


@dataclass(frozen=True)
class DeletePod:
    name: str
    uid: str
    force: bool = False
    """Grace period 0: for Pods stuck terminating."""
    grace_seconds: int | None = None
    """Another grace period than the Pod's own (None: its own)."""


@dataclass(frozen=True)
class DeleteJob:
    pass


Action = CreateService | RestoreChild | CreatePod | CreateProbe | DeletePod | DeleteJob


@dataclass(frozen=True)
class Event:
    type: str
    """Normal or Warning."""
    reason: str
    message: str


@dataclass
class Plan:
    status: wire.Status
    """The complete new status (diff it against the old one with `status.merge_patch`)."""
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    """Seconds until the job must be looked at again even if nothing changes."""
    pod_group: PodGroup | None = None
    """With a `Placement`, for an active job: the group its Pods are created in (made first
    if missing); the job's other groups go."""
    grow_to: int | None = None
    """An elastic job under an admission `Gate` that would grow but is not admitted that many
    workers yet: the size to ask the admitting integration for."""

    @property
    def restart_attempt(self) -> int:
        restarts = self.status.get("restarts") or {}
        return int(restarts.get("disruptions", 0)) + int(restarts.get("failures", 0))


def newest_incarnations(pods: Iterable[PodView]) -> list[PodView]:
    """One PodView per name: the newest incarnation.

    kopf processes each object's events in its own queue, so right after a Pod was
    re-created its index can briefly hold both the old (terminating, or already deleted)
    and the new incarnation of the name. The newer one has the larger resourceVersion: the
    name was only free again once the old one was gone.
    """
    newest: dict[str, PodView] = {}
    for pod in pods:
        seen = newest.get(pod.name)
        if seen is None or pod.resource_version > seen.resource_version:
            newest[pod.name] = pod
    return list(newest.values())

"""Kueue integration, the I/O part: `KueueSync` is the controller's `Integration` for jobs of
a Kueue LocalQueue, `KueueJob` its part of one snapshot of a job. The decisions are pure
(`kueue.decisions.decide` returns `WorkloadAction`s); this module reads what they need and
carries them out (`WorkloadWriter`).

Status writes to a Workload are merge patches conditional on the resourceVersion read
(Kueue writes the same conditions; a conflict just requeues). When Pods are created,
`KueueJob.before_pods` reads the assigned flavors and returns what the admission adds to
each Pod.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from kerasjob.api import KerasJob, Reason
from kerasjob.config import OperatorConfig
from kerasjob.integrations import kueue
from kerasjob.integrations.integration import JobIntegration, PodUpdate
from kerasjob.integrations.kueue.decisions import (
    CreateWorkload,
    DeleteWorkload,
    JobFacts,
    PatchWorkloadStatus,
    WorkloadAction,
    decide,
)
from kerasjob.k8s.kube import ApiError, KubeApi
from kerasjob.k8s.paths import resource_flavor_path, workload_path, workload_priority_class_path
from kerasjob.k8s.workqueue import Key
from kerasjob.manifests import children
from kerasjob.manifests.runtimes import default_images
from kerasjob.planner.conditions import get_condition
from kerasjob.planner.planning import Action, CreatePod, CreateProbe, Event, JobView, Plan
from kerasjob.planner.scheduling import Gate
from kerasjob_contract.times import utcnow

log = logging.getLogger("kerasjob.integrations.kueue")

Workload = Mapping[str, Any]


class _MissingPriorityClass(Exception):
    pass


class KueueSync:
    """The Kueue `Integration`: the job's gate from the indexed Workloads."""

    def __init__(
        self,
        api: KubeApi,
        jobs: Mapping[Key, Iterable[Mapping[str, Any]]],
        workloads: Mapping[Key, Iterable[Mapping[str, Any]]],
        config: OperatorConfig,
    ) -> None:
        self.jobs = jobs
        self.workloads = workloads
        self.writer = WorkloadWriter(api, config)

    def view(
        self, key: Key, body: Mapping[str, Any], model: KerasJob | None, job: JobView
    ) -> tuple[JobView, JobIntegration | None]:
        """For a job of a LocalQueue: the view with Kueue's gate, and its `KueueJob`."""
        queue = kueue.queue_name((body.get("metadata") or {}).get("labels"))
        if queue is None:
            return job, None

        def name_of(uid: str) -> str | None:
            return self._job_name(key[0], uid)

        found: kueue.Slices | None = None
        if job.elastic is not None:
            found = kueue.slices(self.workloads.get(key, ()), job.uid)
            workload = found.current
            gate = kueue.gate_of(queue, found, utcnow(), name_of)
        else:
            workload = self.workload(key, job.uid)
            gate = kueue.gate(queue, workload, name_of)
        part = KueueJob(self.writer, body, model, queue, gate, workload, found)
        return dataclasses.replace(job, gate=gate), part

    def _job_name(self, namespace: str, uid: str) -> str | None:
        """The name of the KerasJob with this UID in ``namespace`` (from the index)."""
        for (ns, name), bodies in list(self.jobs.items()):
            if ns == namespace and any((b.get("metadata") or {}).get("uid") == uid for b in bodies):
                return str(name)
        return None

    def workload(self, key: Key, job_uid: str) -> Workload | None:
        """The job's Workload from the index (the one owned by this incarnation)."""
        return next((w for w in self.workloads.get(key, ()) if kueue.owned_by(w, job_uid)), None)


@dataclasses.dataclass
class KueueJob:
    """Kueue's part of one snapshot of a job of a LocalQueue (the Workload writes are
    decided on the same snapshot as the plan)."""

    writer: WorkloadWriter
    body: Mapping[str, Any]
    model: KerasJob | None
    """The job parsed and valid; None: it is not."""
    queue: str
    gate: Gate
    workload: Workload | None
    """The job's Workload (an elastic job's current slice), when it exists."""
    slices: kueue.Slices | None = None
    """An elastic job's Workload slices."""

    def facts(self, plan: Plan, pods_left: int) -> JobFacts:
        model = self.model
        meta = self.body.get("metadata") or {}
        status = plan.status
        phase = status.get("phase")
        size: int | None = None
        if model is not None and model.spec.elastic is not None:
            recorded = (status.get("elastic") or {}).get("workers")
            size = recorded if isinstance(recorded, int) else int(model.spec.workers)
        ended = get_condition(status.get("conditions") or [], str(phase)) or {}
        counts = {r.value: n for r, n in model.spec.replicas(size).items()} if model else None
        return JobFacts(
            name=str(meta.get("name")),
            uid=str(meta.get("uid")),
            queue=self.queue,
            phase=phase,
            message=str(ended.get("message") or "") if ended.get("status") == "True" else "",
            counts=counts,
            size=size,
            grow_to=plan.grow_to,
            pods_left=pods_left,
        )

    async def after_plan(self, plan: Plan, pods_left: int, now: datetime) -> list[Event]:
        actions = decide(self.facts(plan, pods_left), self.workload, self.slices, now)
        return await self.writer.run(self.body, self.model, actions)

    async def managed_elsewhere(self, plan: Plan, now: datetime) -> list[Event]:
        """MultiKueue dispatches the Workload of a job it manages: made here when missing."""
        if self.workload is not None:
            return []
        return await self.after_plan(plan, 0, now)

    async def before_pods(self, plan: Plan, actions: Sequence[Action]) -> PodUpdate | None:
        """What the admission adds to the Pods ``actions`` create (flavors read from the
        API); None unless the job is admitted by Kueue and Pods are to be created."""
        workload = self.workload
        if workload is None or not self.gate.admitted:
            return None
        if not any(isinstance(a, CreatePod | CreateProbe) for a in actions):
            return None
        updates = kueue.pod_set_updates(workload, await self.writer.flavors(workload))

        def update(pod: dict[str, Any], role: str, *, probe: bool) -> None:
            kueue.apply_update(pod, updates.get(role))

        return update


class WorkloadWriter:
    """Carries out `WorkloadAction`s: the Kueue integration's I/O, in one place."""

    def __init__(self, api: KubeApi, config: OperatorConfig) -> None:
        self.api = api
        self.default_images = default_images(config)

    async def run(
        self, body: Mapping[str, Any], model: KerasJob | None, actions: Iterable[WorkloadAction]
    ) -> list[Event]:
        """Carry out the actions in order; the Events of those that went through."""
        events: list[Event] = []
        for action in actions:
            events += await self._one(body, model, action)
        return events

    async def _one(
        self, body: Mapping[str, Any], model: KerasJob | None, action: WorkloadAction
    ) -> list[Event]:
        if isinstance(action, CreateWorkload):
            return await self._create(body, model, action)
        if isinstance(action, DeleteWorkload):
            await self._delete(action.workload)
            return [action.event] if action.event else []
        if isinstance(action, PatchWorkloadStatus):
            if await self._status(action.workload, action.patch):
                return [action.event] if action.event else []
            meta = action.workload["metadata"]
            log.debug(
                "%s/%s: Workload status write: conflict or gone",
                meta.get("namespace"),
                meta.get("name"),
            )
            return []
        outcome = await self._resize(action.workload, action.workers, action.have)
        if outcome == "done":
            return [action.event]
        if outcome == "refused":
            return await self.run(body, model, action.refused)
        return []

    async def _create(
        self, body: Mapping[str, Any], model: KerasJob | None, action: CreateWorkload
    ) -> list[Event]:
        assert model is not None
        meta = body.get("metadata") or {}
        try:
            priority = await self._priority(meta)
        except _MissingPriorityClass as e:
            if action.need_priority:
                msg = f"WorkloadPriorityClass {e} not found: no Workload created yet"
                return [Event("Warning", Reason.PRIORITY_CLASS_NOT_FOUND.value, msg)]
            priority = None
        pods_by_role = {
            role.value: (
                count,
                children.build_pod(
                    model, role, 0, default_image=self.default_images, workers=action.size
                ),
            )
            for role, count in model.spec.replicas(action.size).items()
        }
        wl = kueue.build_workload(
            body,
            pods_by_role,
            priority=priority,
            elastic=action.size is not None,
            replaces=action.replaces,
        )
        created = await self.api.create(workload_path(str(meta.get("namespace"))), wl, "workloads")
        return [action.event] if created else []

    async def _resize(
        self, workload: Workload, workers: int, have: int
    ) -> Literal["done", "conflict", "refused"]:
        """Set the Workload's worker count: done; a conflict (or the Workload gone: the
        next reconcile looks again); or refused by Kueue's webhook."""
        meta = workload["metadata"]
        request = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "spec": {"podSets": kueue.shrunk_pod_sets(workload, workers)},
        }
        try:
            await self.api.merge_patch(
                workload_path(str(meta["namespace"]), str(meta["name"])), request, "workloads"
            )
        except ApiError as e:
            if e.status in (404, 409):
                return "conflict"
            if e.status in (400, 403, 422):
                log.info(
                    "%s/%s: Kueue refused %d -> %d workers: %s",
                    meta["namespace"],
                    meta["name"],
                    have,
                    workers,
                    e,
                )
                return "refused"
            raise
        return "done"

    async def _status(self, workload: Workload, patch: Mapping[str, Any]) -> bool:
        """A conditional merge patch of a Workload's status; False on a conflict."""
        meta = workload["metadata"]
        request = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch}
        try:
            await self.api.merge_patch(
                workload_path(str(meta["namespace"]), str(meta["name"]), "status"),
                request,
                "workloads/status",
            )
        except ApiError as e:
            if e.status not in (404, 409):
                raise
            return False
        return True

    async def _delete(self, workload: Workload) -> None:
        meta = workload["metadata"]
        await self.api.delete(
            workload_path(str(meta["namespace"]), str(meta["name"])),
            "workloads",
            uid=meta.get("uid"),
        )

    async def _priority(self, meta: Mapping[str, Any]) -> tuple[str, int] | None:
        """The job's WorkloadPriorityClass (name, value); None: none named."""
        cls = (meta.get("labels") or {}).get(kueue.PRIORITY_LABEL)
        if not cls:
            return None
        try:
            wpc = await self.api.request(
                "GET", workload_priority_class_path(cls), count_as="get workloadpriorityclasses"
            )
        except ApiError as e:
            if e.status == 404:
                raise _MissingPriorityClass(cls) from None
            raise
        return cls, int((wpc or {}).get("value", 0))

    async def flavors(self, workload: Workload) -> dict[str, Mapping[str, Any]]:
        """The ResourceFlavors assigned to the Workload, by name (read from the API)."""
        out: dict[str, Mapping[str, Any]] = {}
        for names in kueue.assigned_flavors(workload).values():
            for flavor in names:
                if flavor not in out:
                    out[flavor] = await self.api.request(
                        "GET", resource_flavor_path(flavor), count_as="get resourceflavors"
                    )
        return out

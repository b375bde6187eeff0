"""Kueue integration, the I/O part: the controller's calls for a job of a Kueue LocalQueue
(the decisions are in `kueue`).

Per reconcile, after the job's status is written: create its Workload if there is none,
give the quota back after an eviction once the job's Pods are gone, mark the Workload
Finished when the job ended. Status writes to the Workload are merge patches conditional
on the resourceVersion read (Kueue writes the same conditions; a conflict just requeues).
When Pods are created, `pod_updates` says what the admission adds to them.

An elastic job's Workload slices (`kueue.slices`): the current one follows a shrink (its
worker count lowered in place, or, when Kueue refuses that, the workers given back through
reclaimablePods); a grow the planner cannot make yet (``Plan.grow_to``) gets a slice of
that size replacing the current one, withdrawn when the grow is no longer wanted; an older
slice still holding quota once a newer one is admitted is finished.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from kerasjob import children, kueue
from kerasjob.config import OperatorConfig
from kerasjob.kube import ApiError, KubeApi
from kerasjob.observed import Observed
from kerasjob.paths import resource_flavor_path, workload_path, workload_priority_class_path
from kerasjob.reconcile import Action, CreatePod, JobView, Plan
from kerasjob.runtimes import default_images
from kerasjob.status import RUNNING, SUCCEEDED, TERMINAL_PHASES
from kerasjob.workqueue import Key
from kerasjob_contract.times import utcnow

log = logging.getLogger("kerasjob.kueue")


class _MissingPriorityClass(Exception):
    pass


class KueueSync:
    def __init__(
        self,
        api: KubeApi,
        jobs: Mapping[Key, Iterable[Mapping[str, Any]]],
        workloads: Mapping[Key, Iterable[Mapping[str, Any]]],
        config: OperatorConfig,
    ) -> None:
        self.api = api
        self.jobs = jobs
        self.workloads = workloads
        self.default_images = default_images(config)

    def view(
        self, key: Key, body: Mapping[str, Any], job: JobView
    ) -> tuple[JobView, Mapping[str, Any] | None, kueue.Slices | None]:
        """For a job of a LocalQueue: the view with Kueue's gate, its Workload, and (an
        elastic job's) its Workload slices."""
        queue = kueue.queue_name((body.get("metadata") or {}).get("labels"))
        if queue is None:
            return job, None, None

        def name_of(uid: str) -> str | None:
            return self._job_name(key[0], uid)

        if job.elastic is not None:
            found = kueue.slices(self.workloads.get(key, ()), job.uid)
            gate = kueue.gate_of(queue, found, utcnow(), name_of)
            return dataclasses.replace(job, kueue=gate), found.current, found
        workload = self.workload(key, job.uid)
        gate = kueue.gate(queue, workload, name_of)
        return dataclasses.replace(job, kueue=gate), workload, None

    def _job_name(self, namespace: str, uid: str) -> str | None:
        """The name of the KerasJob with this UID in ``namespace`` (from the index)."""
        for (ns, name), bodies in list(self.jobs.items()):
            if ns == namespace and any((b.get("metadata") or {}).get("uid") == uid for b in bodies):
                return str(name)
        return None

    def workload(self, key: Key, job_uid: str) -> Mapping[str, Any] | None:
        """The job's Workload from the index (the one owned by this incarnation)."""
        for wl in self.workloads.get(key, ()):
            if kueue.owned_by(wl, job_uid):
                return wl
        return None

    async def sync(
        self,
        body: Mapping[str, Any],
        model: Any,
        workload: Mapping[str, Any] | None,
        plan: Plan,
        pods_left: int,
        now: datetime,
        *,
        slices: kueue.Slices | None = None,
    ) -> list[tuple[str, str, str]]:
        """The Workload writes due for this job; returns Events to post (type, reason, msg).
        ``slices``: an elastic job's, from the snapshot the plan was made on (else read from
        the index now)."""
        meta = body.get("metadata") or {}
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        phase = plan.status.get("phase")
        events: list[tuple[str, str, str]] = []
        elastic = model is not None and model.spec.elastic is not None
        size: int | None = None
        if elastic:
            recorded = (plan.status.get("elastic") or {}).get("workers")
            size = recorded if isinstance(recorded, int) else int(model.spec.workers)
            found = slices or kueue.slices(self.workloads.get((ns, name), ()), str(meta.get("uid")))
            workload = found.current
            if found.replacing is not None and kueue.gate_of("", found, now).recheck_after:
                return events  # Kueue is admitting the current slice: its next write wakes us
        if workload is None:
            if phase in TERMINAL_PHASES or model is None:
                return events
            try:
                priority = await self._priority(meta)
            except _MissingPriorityClass as e:
                msg = f"WorkloadPriorityClass {e} not found: no Workload created yet"
                events.append(("Warning", "PriorityClassNotFound", msg))
                return events
            wl = self._build(body, model, size, priority)
            if await self.api.create(workload_path(ns), wl, "workloads"):
                queue = kueue.queue_name(meta.get("labels"))
                events.append(
                    (
                        "Normal",
                        "WorkloadCreated",
                        f"Kueue Workload {wl['metadata']['name']} created in LocalQueue {queue}",
                    )
                )
            return events
        wl_name = str(workload["metadata"]["name"])
        patch: dict[str, Any] | None = None
        if elastic:
            assert size is not None
            slice_events, written = await self._slices(body, model, found, plan, size, now)
            events += slice_events
            if written:  # the current slice changed: its next version wakes the job
                return events
        if phase in TERMINAL_PHASES:
            message = next(
                (
                    c.get("message", "")
                    for c in plan.status.get("conditions") or []
                    if c.get("type") == phase and c.get("status") == "True"
                ),
                "",
            )
            patch = kueue.finished_status(workload, phase == SUCCEEDED, message or phase, now)
        else:
            counts = {r.value: n for r, n in model.spec.replicas(size).items()} if model else None
            if counts is not None and not (
                kueue.same_shape(workload, counts) if elastic else kueue.matches(workload, counts)
            ):
                # Its podSets are immutable: a new one is made on the next reconcile.
                await self._delete(workload)
                msg = f"the job's roles or replicas changed: Workload {wl_name} replaced"
                return [("Normal", "WorkloadReplaced", msg)]
            if pods_left == 0:
                patch = kueue.release_status(workload, now)
                if patch is not None:
                    events.append(
                        (
                            "Normal",
                            "QuotaReleased",
                            f"Pods stopped after the eviction; Workload {wl_name} gives its quota "
                            "back",
                        )
                    )
            if patch is None:
                patch = kueue.pods_ready_status(workload, phase == RUNNING, now)
        if patch is not None and not await self._status(workload, patch):
            log.debug("%s/%s: Workload status write: conflict or gone", ns, name)
            return []
        return events

    def _build(
        self,
        body: Mapping[str, Any],
        model: Any,
        size: int | None,
        priority: tuple[str, int] | None,
        replaces: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The job's Workload (an elastic job's: a slice at ``size`` workers)."""
        pods_by_role = {
            role.value: (
                count,
                children.build_pod(model, role, 0, default_image=self.default_images, workers=size),
            )
            for role, count in model.spec.replicas(size).items()
        }
        return kueue.build_workload(
            body, pods_by_role, priority=priority, elastic=size is not None, replaces=replaces
        )

    async def _slices(
        self,
        body: Mapping[str, Any],
        model: Any,
        found: kueue.Slices,
        plan: Plan,
        size: int,
        now: datetime,
    ) -> tuple[list[tuple[str, str, str]], bool]:
        """An elastic job's slices follow its size (see the module's doc): the Events, and
        whether the current slice was written (its next version wakes the job)."""
        meta = body.get("metadata") or {}
        ns = str(meta.get("namespace"))
        current = found.current
        assert current is not None
        cur_name = str(current["metadata"]["name"])
        events: list[tuple[str, str, str]] = []
        for old in found.replaced:  # the scheduler did not finish it (the gate off)
            patch = kueue.replaced_status(old, current, now)
            if patch is not None and await self._status(old, patch):
                events.append(
                    (
                        "Normal",
                        "WorkloadSliceReplaced",
                        f"Workload slice {old['metadata']['name']} finished: replaced "
                        f"by {cur_name}, admitted by Kueue",
                    )
                )
        terminal = plan.status.get("phase") in TERMINAL_PHASES
        want = None if terminal else plan.grow_to
        for extra in found.extra:
            await self._delete(extra)
        pending = found.pending
        if pending is not None and (
            want is None or kueue.pod_set_counts(pending).get(kueue.WORKER) != want
        ):
            await self._delete(pending)
            pending_name = pending["metadata"]["name"]
            why = "the grow is no longer wanted" if want is None else f"{want} workers wanted"
            events.append(
                (
                    "Normal",
                    "WorkloadSliceWithdrawn",
                    f"Workload slice {pending_name} withdrawn before Kueue admitted it: {why}",
                )
            )
        elif (
            pending is None
            and want is not None
            and kueue.reserved(current)
            and want > kueue.admitted_workers(current)
        ):
            try:
                priority = await self._priority(meta)
            except _MissingPriorityClass:
                priority = None
            wl = self._build(body, model, want, priority, replaces=current)
            if await self.api.create(workload_path(ns), wl, "workloads"):
                events.append(
                    (
                        "Normal",
                        "GrowWaitingForKueue",
                        f"Growing to {want} workers waits for Kueue to admit "
                        f"Workload slice {wl['metadata']['name']} (replacing "
                        f"{cur_name}, {kueue.admitted_workers(current)} workers)",
                    )
                )
        if terminal or model is None:
            return events, False
        have = kueue.pod_set_counts(current).get(kueue.WORKER, 0)
        if kueue.reserved(current):
            admitted = kueue.admitted_workers(current)
            if admitted <= size or want is not None:
                return events, False
            if not kueue.reclaimable(current):
                outcome = await self._resize(current, size, admitted)
                if outcome == "done":
                    events.append(
                        (
                            "Normal",
                            "WorkloadResized",
                            f"Workload {cur_name} follows the shrink: {admitted} -> "
                            f"{size} workers, Kueue charges the smaller size",
                        )
                    )
                if outcome != "refused":
                    return events, True
            # Kueue refuses an admitted Workload's smaller count (its gate
            # ElasticJobsViaWorkloadSlices off): give the workers back as reclaimable.
            patch = kueue.reclaimable_status(current, size)
            if patch is not None and await self._status(current, patch):
                events.append(
                    (
                        "Warning",
                        "WorkloadShrinkRefused",
                        f"Kueue refused to lower Workload {cur_name}'s worker count "
                        f"(feature gate ElasticJobsViaWorkloadSlices off?): "
                        f"{have - size} workers' quota given back through "
                        "status.reclaimablePods; a grow needs a new admission of the "
                        "bigger size",
                    )
                )
            return events, True
        if have != size and not kueue.finished(current):
            outcome = await self._resize(current, size, have)
            if outcome == "conflict":
                return events, True
            if outcome == "refused":
                # Not expected unadmitted: a new one is made on the next reconcile.
                await self._delete(current)
                events.append(
                    (
                        "Normal",
                        "WorkloadReplaced",
                        f"Kueue refused to change Workload {cur_name}'s worker count: "
                        f"replaced by one of {size} workers",
                    )
                )
            else:
                events.append(
                    (
                        "Normal",
                        "WorkloadResized",
                        f"Workload {cur_name} (not admitted) follows the job's size: "
                        f"{have} -> {size} workers",
                    )
                )
            return events, True
        return events, False

    async def _resize(
        self, workload: Mapping[str, Any], workers: int, have: int
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

    async def _status(self, workload: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
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

    async def _delete(self, workload: Mapping[str, Any]) -> None:
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

    async def pod_updates(
        self, seen: Observed, actions: Iterable[Action]
    ) -> dict[str, kueue.PodSetUpdate]:
        """Role -> what the admission adds to the Pods ``actions`` create (flavors read from
        the API); empty unless the job is admitted by Kueue and Pods are to be created."""
        workload, gate = seen.workload, seen.job.kueue
        if workload is None or gate is None or not gate.admitted:
            return {}
        if not any(isinstance(a, CreatePod) for a in actions):
            return {}
        flavors: dict[str, Mapping[str, Any]] = {}
        for names in kueue.assigned_flavors(workload).values():
            for flavor in names:
                if flavor not in flavors:
                    flavors[flavor] = await self.api.request(
                        "GET", resource_flavor_path(flavor), count_as="get resourceflavors"
                    )
        return kueue.pod_set_updates(workload, flavors)

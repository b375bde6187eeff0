"""Kueue integration, the I/O part: the controller's calls for a job of a Kueue LocalQueue
(the decisions are in `kueue`).

Per reconcile, after the job's status is written: create its Workload if there is none,
give the quota back after an eviction once the job's Pods are gone, mark the Workload
Finished when the job ended. Status writes to the Workload are merge patches conditional
on the resourceVersion read (Kueue writes the same conditions; a conflict just requeues).
When Pods are created, `pod_updates` says what the admission adds to them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kerasjob import children, kueue
from kerasjob.config import OperatorConfig
from kerasjob.kube import ApiError, KubeApi
from kerasjob.observed import Observed
from kerasjob.paths import resource_flavor_path, workload_path, workload_priority_class_path
from kerasjob.reconcile import Action, CreatePod, JobView, Plan
from kerasjob.status import RUNNING, SUCCEEDED, TERMINAL_PHASES
from kerasjob.workqueue import Key

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
        self.default_image = config.default_image

    def view(
        self, key: Key, body: Mapping[str, Any], job: JobView
    ) -> tuple[JobView, Mapping[str, Any] | None]:
        """For a job of a LocalQueue: the view with Kueue's gate, and its Workload."""
        queue = kueue.queue_name((body.get("metadata") or {}).get("labels"))
        if queue is None:
            return job, None
        workload = self.workload(key, job.uid)
        gate = kueue.gate(queue, workload, lambda uid: self._job_name(key[0], uid))
        return dataclasses.replace(job, kueue=gate), workload

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
    ) -> list[tuple[str, str, str]]:
        """The Workload writes due for this job; returns Events to post (type, reason, msg)."""
        meta = body.get("metadata") or {}
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        phase = plan.status.get("phase")
        events: list[tuple[str, str, str]] = []
        if workload is None:
            if phase in TERMINAL_PHASES or model is None:
                return events
            try:
                priority = await self._priority(meta)
            except _MissingPriorityClass as e:
                msg = f"WorkloadPriorityClass {e} not found: no Workload created yet"
                events.append(("Warning", "PriorityClassNotFound", msg))
                return events
            pods_by_role = {
                role.value: (
                    count,
                    children.build_pod(model, role, 0, default_image=self.default_image),
                )
                for role, count in model.spec.replicas().items()
            }
            wl = kueue.build_workload(body, pods_by_role, priority=priority)
            if await self.api.create(workload_path(ns), wl, "workloads"):
                queue = kueue.queue_name(meta.get("labels"))
                events.append(
                    ("Normal", "WorkloadCreated",
                     f"Kueue Workload {wl['metadata']['name']} created in LocalQueue {queue}")
                )
            return events
        wl_name = str(workload["metadata"]["name"])
        patch: dict[str, Any] | None = None
        if phase in TERMINAL_PHASES:
            message = next(
                (c.get("message", "") for c in plan.status.get("conditions") or []
                 if c.get("type") == phase and c.get("status") == "True"),
                "",
            )
            patch = kueue.finished_status(workload, phase == SUCCEEDED, message or phase, now)
        else:
            counts = {r.value: n for r, n in model.spec.replicas().items()} if model else None
            if counts is not None and not kueue.matches(workload, counts):
                # Its podSets are immutable: a new one is made on the next reconcile.
                await self.api.delete(
                    workload_path(ns, wl_name), "workloads",
                    uid=workload["metadata"].get("uid"),
                )
                msg = f"the job's roles or replicas changed: Workload {wl_name} replaced"
                return [("Normal", "WorkloadReplaced", msg)]
            if pods_left == 0:
                patch = kueue.release_status(workload, now)
                if patch is not None:
                    events.append(
                        ("Normal", "QuotaReleased",
                         f"Pods stopped after the eviction; Workload {wl_name} gives its quota "
                         "back")
                    )
            if patch is None:
                patch = kueue.pods_ready_status(workload, phase == RUNNING, now)
        if patch is not None:
            request = {
                "metadata": {"resourceVersion": workload["metadata"]["resourceVersion"]},
                "status": patch,
            }
            try:
                await self.api.merge_patch(
                    workload_path(ns, wl_name, "status"), request, "workloads/status"
                )
            except ApiError as e:
                if e.status not in (404, 409):
                    raise
                log.debug("%s/%s: Workload status write: %s", ns, name, e.status)
                return []
        return events

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

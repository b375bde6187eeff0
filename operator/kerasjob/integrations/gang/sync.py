"""Native gang scheduling, the I/O part: `GangSync` is the controller's `Integration` for it,
`GangJob` its part of one snapshot of a job (the decisions are in `gang`, this package).

`view` puts the job's indexed PodGroups and Workloads into its `JobView`; `before_pods`
creates the plan's Workload and PodGroup before its Pods (409: already there;
deterministic names, so a restarted operator never makes a second pair) and puts each Pod
(not the probes) in the gang; `after_plan` deletes the job's other pairs (an elastic job's
earlier sizes). `check_api` is the start-up check that the cluster serves the API at all.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from kerasjob.api import KerasJob, Reason
from kerasjob.integrations import gang
from kerasjob.integrations.integration import JobIntegration, PodUpdate
from kerasjob.k8s.kube import ApiError, KubeApi
from kerasjob.k8s.paths import pod_group_path, scheduling_workload_path
from kerasjob.k8s.workqueue import Key
from kerasjob.planner.planning import Action, CreatePod, Event, JobView, Plan

log = logging.getLogger("kerasjob.integrations.gang")


class GangSync:
    """The gang scheduling `Integration`: the job's PodGroups and Workloads as indexed."""

    def __init__(
        self,
        api: KubeApi,
        pod_groups: Mapping[Key, Iterable[Mapping[str, Any]]],
        workloads: Mapping[Key, Iterable[Mapping[str, Any]]],
    ) -> None:
        self.api = api
        self.pod_groups = pod_groups
        self.workloads = workloads

    def view(
        self, key: Key, body: Mapping[str, Any], model: KerasJob | None, job: JobView
    ) -> tuple[JobView, JobIntegration | None]:
        found = gang.view(
            self.pod_groups.get(key, ()), self.workloads.get(key, ()), job.name, job.uid
        )
        part = GangJob(self.api, body, job.namespace, found)
        return dataclasses.replace(job, placement=found), part


@dataclasses.dataclass
class GangJob:
    """Gang scheduling's part of one snapshot of a job."""

    api: KubeApi
    body: Mapping[str, Any]
    namespace: str
    view: gang.GangView

    async def before_pods(self, plan: Plan, actions: Sequence[Action]) -> PodUpdate | None:
        """The plan's Workload and PodGroup before any of its Pods; each Pod in the gang."""
        wanted = plan.pod_group
        if wanted is None or not any(isinstance(a, CreatePod) for a in actions):
            return None
        ns = self.namespace
        for obj in gang.missing(self.body, self.view, wanted):
            if obj["kind"] == "PodGroup":
                if await self.api.create(pod_group_path(ns), obj, "podgroups"):
                    log.info(
                        "%s: PodGroup %s (gang of %d Pods) created",
                        ns,
                        wanted.name,
                        wanted.min_count,
                    )
            else:
                await self.api.create(scheduling_workload_path(ns), obj, "workloads")

        def update(pod: dict[str, Any], role: str, *, probe: bool) -> None:
            if not probe:  # a probe asks for one worker's place on its own
                gang.apply(pod, wanted)

        return update

    async def after_plan(self, plan: Plan, pods_left: int, now: datetime) -> list[Event]:
        """Delete the job's PodGroups and Workloads other than the plan's."""
        if plan.pod_group is None:
            return []
        groups, workloads = gang.stale(self.view, plan.pod_group)
        for name in groups:
            await self.api.delete(pod_group_path(self.namespace, name), "podgroups")
        for name in workloads:
            await self.api.delete(scheduling_workload_path(self.namespace, name), "workloads")
        if not groups:
            return []
        return [
            Event(
                "Normal", Reason.GANG_REPLACED.value, gang.replaced_message(groups, plan.pod_group)
            )
        ]


async def check_api(api: KubeApi) -> str | None:
    """None when the cluster serves Workloads and PodGroups of scheduling.k8s.io/v1alpha2;
    else why not, in one line."""
    path = f"/apis/{gang.GROUP}/{gang.VERSION}"
    try:
        found = await api.request("GET", path, count_as="get discovery")
    except ApiError as e:
        if e.status == 404:
            return (
                f"the cluster does not serve {gang.GROUP}/{gang.VERSION} (Kubernetes 1.36 "
                "with --runtime-config=scheduling.k8s.io/v1alpha2=true and the "
                "GenericWorkload and GangScheduling feature gates)"
            )
        return f"cannot read {path}: {e}"
    names = {r.get("name") for r in (found or {}).get("resources") or []}
    missing = {gang.WORKLOADS, gang.PODGROUPS} - names
    if missing:
        return f"{path} serves no {', '.join(sorted(missing))}"
    return None

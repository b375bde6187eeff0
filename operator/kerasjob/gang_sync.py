"""Native gang scheduling, the I/O part: the controller's calls for a job's Workload and
PodGroup (the decisions are in `gang`).

`view` puts the job's indexed PodGroups and Workloads into its `JobView`; `ensure` creates
the plan's Workload and PodGroup before its Pods (409: already there; deterministic names,
so a restarted operator never makes a second pair); `sync`, after the status write, deletes
the job's other pairs (an elastic job's earlier sizes). `check_api` is the start-up check
that the cluster serves the API at all.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kerasjob import gang
from kerasjob.api import Reason
from kerasjob.kube import KubeApi
from kerasjob.paths import pod_group_path, scheduling_workload_path
from kerasjob.planning import JobView, Plan
from kerasjob.workqueue import Key

log = logging.getLogger("kerasjob.gang")


class GangSync:
    def __init__(
        self,
        api: KubeApi,
        pod_groups: Mapping[Key, Iterable[Mapping[str, Any]]],
        workloads: Mapping[Key, Iterable[Mapping[str, Any]]],
    ) -> None:
        self.api = api
        self.pod_groups = pod_groups
        self.workloads = workloads

    def view(self, key: Key, job: JobView) -> JobView:
        found = gang.view(self.pod_groups.get(key, ()), self.workloads.get(key, ()), job.uid)
        return dataclasses.replace(job, gang=found)

    async def ensure(self, body: Mapping[str, Any], job: JobView, wanted: gang.Gang) -> None:
        """The Workload, then the PodGroup of ``wanted`` (the PodGroup admission refuses a
        PodGroup whose Workload does not exist yet)."""
        ns = job.namespace
        have = job.gang or gang.GangView()
        if wanted.name not in have.workloads:
            workload = gang.build_workload(body, wanted)
            await self.api.create(scheduling_workload_path(ns), workload, "workloads")
        if have.pod_group(wanted.name) is None:
            group = gang.build_pod_group(body, wanted)
            if await self.api.create(pod_group_path(ns), group, "podgroups"):
                log.info(
                    "%s/%s: PodGroup %s (gang of %d Pods) created",
                    ns,
                    job.name,
                    wanted.name,
                    wanted.min_count,
                )

    async def sync(self, job: JobView, plan: Plan) -> list[tuple[str, str, str]]:
        """Delete the job's PodGroups and Workloads other than the plan's; Events to post."""
        if plan.gang is None or job.gang is None:
            return []
        groups, workloads = gang.stale(job.gang, plan.gang)
        ns = job.namespace
        for name in groups:
            await self.api.delete(pod_group_path(ns, name), "podgroups")
        for name in workloads:
            await self.api.delete(scheduling_workload_path(ns, name), "workloads")
        if groups:
            return [
                (
                    "Normal",
                    Reason.GANG_REPLACED.value,
                    f"PodGroup {', '.join(groups)} replaced by {plan.gang.name} "
                    f"(a gang of {plan.gang.min_count} Pods)",
                )
            ]
        return []


async def check_api(api: KubeApi) -> str | None:
    """None when the cluster serves Workloads and PodGroups of scheduling.k8s.io/v1alpha2;
    else why not, in one line."""
    from kerasjob.kube import ApiError

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

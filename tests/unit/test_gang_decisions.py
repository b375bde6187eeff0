"""Native gang scheduling, the pure part (`kerasjob.integrations.gang`) and the planner's use
of it: the Workload and PodGroup of a job (field names as in k8s.io/api scheduling/v1alpha2 of
Kubernetes 1.36.3), minCount = every Pod of the current size, a new pair per elastic size,
and the job's status when the gang cannot be placed."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

from kerasjob.api import labels
from kerasjob.integrations import gang
from kerasjob.integrations.gang.sync import GangSync, check_api
from kerasjob.k8s.kube import ApiError
from kerasjob.planner import planning, scheduling
from kerasjob.planner import reconcile as rc
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import (
    JOB_UID,
    NOW,
    POLICY,
    UNSCHEDULABLE,
    creates,
    job,
    pod,
    stuck,
)

KEY = ("ns", "j")
BODY = {
    "apiVersion": "kerasjob.dev/v1alpha1",
    "kind": "KerasJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": JOB_UID},
}


def pod_group(
    name: str,
    min_count: int,
    *,
    uid: str = JOB_UID,
    scheduled: str | None = None,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    body = gang.build_pod_group(
        {"metadata": {**BODY["metadata"], "uid": uid}}, scheduling.PodGroup(name, min_count)
    )
    body["metadata"]["uid"] = f"pg-{name}"
    if scheduled is not None:
        body["status"] = {
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": scheduled,
                    "reason": reason,
                    "message": message,
                }
            ]
        }
    return body


def workload(name: str, uid: str = JOB_UID) -> dict[str, Any]:
    return gang.build_workload(
        {"metadata": {**BODY["metadata"], "uid": uid}}, scheduling.PodGroup(name, 1)
    )


def gjob(
    workers: int = 3,
    groups: tuple[dict[str, Any], ...] = (),
    workloads: tuple[dict[str, Any], ...] = (),
    **kw: Any,
) -> planning.JobView:
    return job(workers, placement=gang.view(groups, workloads, "j", JOB_UID), **kw)


def test_the_workload_and_pod_group_use_the_v1alpha2_fields() -> None:
    g = gang.gang_for("j", JOB_UID, 4)
    assert g == scheduling.PodGroup(f"j-gang-{JOB_UID[:8]}", 4)
    wl = gang.build_workload(BODY, g)
    assert wl["apiVersion"] == "scheduling.k8s.io/v1alpha2" and wl["kind"] == "Workload"
    assert wl["spec"] == {
        "controllerRef": {"apiGroup": "kerasjob.dev", "kind": "KerasJob", "name": "j"},
        "podGroupTemplates": [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 4}}}],
    }
    pg = gang.build_pod_group(BODY, g)
    assert pg["kind"] == "PodGroup" and pg["metadata"]["name"] == g.name
    assert pg["spec"] == {
        "podGroupTemplateRef": {
            "workload": {"workloadName": g.name, "podGroupTemplateName": "gang"}
        },
        "schedulingPolicy": {"gang": {"minCount": 4}},
    }
    for obj in (wl, pg):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == JOB_UID and ref["controller"] and ref["kind"] == "KerasJob"
        assert obj["metadata"]["labels"][labels.JOB_NAME] == "j"
        assert obj["metadata"]["namespace"] == "ns"
    manifest: dict[str, Any] = {"spec": {"containers": []}}
    assert gang.apply(manifest, g)["spec"]["schedulingGroup"] == {"podGroupName": g.name}
    assert gang.apply({"spec": {}}, None) == {"spec": {}}
    # A size after resizes is another pair: the spec is immutable and the old PodGroup may
    # still be held by its finalizer.
    assert gang.gang_for("j", JOB_UID, 2, epoch=3).name == f"j-gang-{JOB_UID[:8]}-3"
    assert len(gang.gang_for("x" * 253, JOB_UID, 2, epoch=12).name) <= 253


def test_the_view_keeps_only_this_incarnations_objects_and_reads_the_verdict() -> None:
    mine = pod_group("a", 3, scheduled="False", reason="Unschedulable", message="no room")
    other = pod_group("b", 3, uid="another-job-uid")
    v = gang.view([mine, other], [workload("a"), workload("b", uid="x")], "j", JOB_UID)
    assert [p.name for p in v.pod_groups] == ["a"] and v.workloads == ("a",)
    state = v.pod_group("a")
    assert state is not None
    assert (state.min_count, state.scheduled, state.reason, state.message) == (
        3,
        False,
        "Unschedulable",
        "no room",
    )
    assert gang.view([pod_group("c", 2)], [], "j", JOB_UID).pod_groups[0].scheduled is None


def test_an_active_job_plans_one_gang_of_all_its_pods_and_none_without_the_option() -> None:
    p = rc.plan(gjob(3), {}, [], NOW)
    assert p.pod_group == scheduling.PodGroup(f"j-gang-{JOB_UID[:8]}", 3)
    assert creates(p) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    # Every role counts: a chief and an evaluator are Pods of the job too.
    tasks = (
        planning.Task("j-chief-0", "chief", 0),
        planning.Task("j-worker-0", "worker", 0),
        planning.Task("j-worker-1", "worker", 1),
        planning.Task("j-evaluator-0", "evaluator", 0),
    )
    assert rc.plan(gjob(tasks=tasks, chief="j-chief-0"), {}, [], NOW).pod_group.min_count == 4
    assert rc.plan(job(3), {}, [], NOW).pod_group is None
    assert rc.plan(gjob(3, suspend=True), {}, [], NOW).pod_group is None


def test_a_gang_that_cannot_be_placed_says_so_in_the_running_condition_once() -> None:
    name = gang.gang_for("j", JOB_UID, 3).name
    group = pod_group(
        name, 3, scheduled="False", reason="Unschedulable", message="pod group is unschedulable"
    )
    j = gjob(3, groups=(group,))
    # The scheduler says what is short on one Pod; the others wait for the gang.
    gang_wait = (
        "Unschedulable: pod group is unschedulable, waiting for minCount pods from a "
        "gang to be scheduled"
    )
    pending = [
        pod(
            i,
            phase="Pending",
            ready=False,
            unschedulable_since=NOW,
            waiting=UNSCHEDULABLE if i == 2 else gang_wait,
        )
        for i in range(3)
    ]
    p = rc.plan(j, {}, pending, NOW)
    running = next(c for c in p.status["conditions"] if c["type"] == "Running")
    assert running["status"] == "False" and running["reason"] == "GangUnschedulable"
    assert running["message"] == (
        f"the gang of 3 Pods cannot be placed together (PodGroup {name}: Unschedulable: pod "
        "group is unschedulable); no Pod is bound until all fit: 0/4 nodes are available: "
        "4 Insufficient example.com/slot."
    )
    assert [e.reason for e in p.events if e.type == "Warning"] == ["GangUnschedulable"]
    again = rc.plan(j, p.status, pending, NOW + timedelta(seconds=5))
    assert not [e for e in again.events if e.type == "Warning"]
    # Placed: the PodGroup says Scheduled, the Pods run, the job is Running.
    placed = pod_group(name, 3, scheduled="True", reason="Scheduled")
    ok = rc.plan(gjob(3, groups=(placed,)), again.status, [pod(i) for i in range(3)], NOW)
    assert ok.status["phase"] == "Running"
    # Without the PodGroup's verdict the Pod's own reason is shown, as without gangs.
    plain = rc.plan(gjob(3), {}, pending, NOW)
    running = next(c for c in plain.status["conditions"] if c["type"] == "Running")
    assert running["reason"] == "Unschedulable"


def test_an_elastic_resize_makes_a_new_gang_of_the_new_size_and_drops_the_old() -> None:
    first = gang.gang_for("j", JOB_UID, 3)
    j = gjob(
        3, elastic=POLICY, groups=(pod_group(first.name, 3),), workloads=(workload(first.name),)
    )
    running = [pod(0), pod(1)]
    s = rc.plan(j, {}, [*running, stuck(2, timedelta(seconds=0))], NOW).status
    p = rc.plan(j, s, [*running, stuck(2, timedelta(seconds=61))], NOW)
    assert p.status["elastic"]["workers"] == 2
    assert p.pod_group == gang.gang_for("j", JOB_UID, 2, epoch=1) and p.pod_group.min_count == 2
    assert gang.stale(j.placement, p.pod_group) == ([first.name], [first.name])  # type: ignore[arg-type]
    assert gang.stale(j.placement, first) == ([], [])  # type: ignore[arg-type]
    # The Pods come back at 2 workers, in the new gang (their TF_CONFIG and minCount agree).
    fresh = rc.plan(j, p.status, [], NOW + timedelta(seconds=6))
    assert creates(fresh) == ["j-worker-0", "j-worker-1"] and fresh.pod_group == p.pod_group


class RecordingApi:
    def __init__(self, existing: set[str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.existing = existing or set()

    async def create(self, path: str, obj: Any, resource: str, **_: Any) -> bool:
        self.calls.append(("create", f"{obj['kind']}/{obj['metadata']['name']}"))
        return path not in self.existing

    async def delete(self, path: str, resource: str, **_: Any) -> bool:
        self.calls.append(("delete", path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1]))
        return True


def test_the_workload_is_created_before_its_pod_group_and_only_what_is_missing() -> None:
    g = gang.gang_for("j", JOB_UID, 3)
    api = RecordingApi()
    plan = planning.Plan(
        status={},
        actions=[planning.CreatePod(planning.Task("j-worker-0", "worker", 0))],
        pod_group=g,
    )

    def part(groups: tuple[Any, ...] = (), workloads: tuple[Any, ...] = ()) -> Any:
        sync = GangSync(api, {KEY: list(groups)}, {KEY: list(workloads)})  # type: ignore[arg-type]
        j, found = sync.view(KEY, BODY, None, job(3))
        assert found is not None and j.placement == gang.view(groups, workloads, "j", JOB_UID)
        return found

    update = asyncio.run(part().before_pods(plan, plan.actions))
    assert api.calls == [("create", f"Workload/{g.name}"), ("create", f"PodGroup/{g.name}")]
    pod_: dict[str, Any] = {}
    update(pod_, "worker", probe=True)
    assert pod_ == {}  # a probe asks for one worker's place on its own
    update(pod_, "worker", probe=False)
    assert pod_["spec"]["schedulingGroup"] == {"podGroupName": g.name}
    api.calls.clear()
    have = part((pod_group(g.name, 3),), (workload(g.name),))
    asyncio.run(have.before_pods(plan, plan.actions))
    assert api.calls == []
    # After a resize the old pair goes (the plan's own stays).
    new = gang.gang_for("j", JOB_UID, 2, epoch=1)
    both = part(
        (pod_group(g.name, 3), pod_group(new.name, 2)), (workload(g.name), workload(new.name))
    )
    events = asyncio.run(both.after_plan(planning.Plan(status={}, pod_group=new), 0, NOW))
    assert api.calls == [("delete", f"podgroups/{g.name}"), ("delete", f"workloads/{g.name}")]
    assert [e.reason for e in events] == ["GangReplaced"]


def test_an_elastic_gang_that_does_not_fit_shrinks_one_worker_at_a_time() -> None:
    """In a gang every Pod waits when one does not fit: the number of waiting Pods says
    nothing of how many are missing, so the job shrinks by one and tries again."""
    policy = dataclasses.replace(POLICY, min_workers=1, preferred=4)
    j = gjob(4, elastic=policy)
    waiting = [stuck(i, timedelta(seconds=61)) for i in range(4)]
    p = rc.plan(j, {}, waiting, NOW)
    assert p.status["elastic"]["workers"] == 3
    assert rc.plan(job(4, elastic=policy), {}, waiting, NOW).status["elastic"]["workers"] == 1


class DiscoveryApi:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def request(self, method: str, path: str, **_: Any) -> Any:
        assert (method, path) == ("GET", "/apis/scheduling.k8s.io/v1alpha2")
        if isinstance(self.answer, ApiError):
            raise self.answer
        return self.answer


def test_the_start_up_check_says_in_one_line_what_the_cluster_lacks() -> None:
    served = {
        "resources": [{"name": "workloads"}, {"name": "podgroups"}, {"name": "podgroups/status"}]
    }
    assert asyncio.run(check_api(DiscoveryApi(served))) is None  # type: ignore[arg-type]
    missing = asyncio.run(check_api(DiscoveryApi(ApiError(404, "GET", "/apis/x", {}))))  # type: ignore[arg-type]
    assert missing is not None and "does not serve scheduling.k8s.io/v1alpha2" in missing
    assert "GangScheduling" in missing and "\n" not in missing
    partial = asyncio.run(check_api(DiscoveryApi({"resources": [{"name": "workloads"}]})))  # type: ignore[arg-type]
    assert partial is not None and "podgroups" in partial


def test_once_a_task_has_finished_for_good_further_pods_are_made_outside_the_gang() -> None:
    """A gang's minCount counts every Pod; a finished evaluator never comes back, so a Pod
    re-created after that would wait for it forever: it is made without the gang."""
    tasks = (
        planning.Task("j-worker-0", "worker", 0),
        planning.Task("j-worker-1", "worker", 1),
        planning.Task("j-evaluator-0", "evaluator", 0),
    )
    j = gjob(tasks=tasks)
    settled = rc.plan(
        j, {}, [pod(0), pod(1), pod(0, "e", name="j-evaluator-0", role="evaluator")], NOW
    )
    assert settled.pod_group is not None and settled.pod_group.min_count == 3
    done = pod(
        0,
        "e",
        name="j-evaluator-0",
        role="evaluator",
        phase="Succeeded",
        ready=False,
        termination=Termination(0),
    )
    p = rc.plan(j, settled.status, [pod(0), done], NOW)  # worker 1 was lost
    assert creates(p) == ["j-worker-1"] and p.pod_group is None

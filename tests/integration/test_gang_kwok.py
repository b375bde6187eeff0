"""Native gang scheduling (``kerasjob run --gang-scheduling``) against the real API server,
kube-scheduler (GangScheduling plugin, Kubernetes 1.36 alpha) and KWOK nodes.

Each worker asks for one ``kerasjob.dev/gang-slot``, an extended resource patched into the
KWOK nodes' status for the test (and removed after it), so the capacity is exactly what a
test sets. A job's Pods finish as a kubelet would write it (every worker exits 0).

- A job larger than the free capacity binds no Pod (without gangs, 8 of its 9 would hold
  their places), its status says why (`GangUnschedulable`, the PodGroup's verdict and the
  scheduler's message); more capacity, and all its Pods are bound together.
- Two jobs that fit only one at a time never hold part of the capacity each: one runs (all
  its Pods bound, none of the other's), finishes, then the other runs; the operator is
  restarted in between and makes no second PodGroup.
- A fitting job runs normally, in its own PodGroup/Workload (owned by the job).
- 50 jobs of 8 workers on capacity for 3 at a time: all finish, no job ever has part of its
  Pods bound. Printed: create -> all bound (median, max), the spread of one gang's binds,
  the total.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kerasjob.integrations import gang
from kerasjob_dev.cluster import Cluster, create_namespace, delete_namespace, wait_for
from kerasjob_dev.gangs import (
    NoPartialGang,
    bound,
    finish,
    gang_job,
    kwok_nodes,
    run_competing,
    set_slots,
)
from kerasjob_dev.harness import (
    OperatorProcess,
    condition,
    create_job,
    custom,
    delete_job,
    events_for,
    install_crds,
    job_manifest,
    job_status,
    own_namespace,
    pods,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


@pytest.fixture
def namespace(kube: Any, kwok_placement: dict[str, Any]) -> Iterator[str]:
    yield from own_namespace(kube, "gang")


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> Iterator[OperatorProcess]:
    install_crds(cluster)
    op = OperatorProcess(cluster, (namespace,), name="gang", extra_args=("--gang-scheduling",))
    op.start()
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture
def slots(kube: Any) -> Iterator[Callable[[int], None]]:
    """``slots(n)``: every KWOK node offers ``n`` gang slots; removed afterwards."""
    nodes = kwok_nodes(kube)
    try:
        yield lambda n: set_slots(kube, nodes, n)
    finally:
        set_slots(kube, nodes, None)


def pod_groups(kube: Any, ns: str) -> list[dict[str, Any]]:
    return custom(kube).list_namespaced_custom_object(gang.GROUP, gang.VERSION, ns, gang.PODGROUPS)[
        "items"
    ]


def workloads(kube: Any, ns: str) -> list[dict[str, Any]]:
    return custom(kube).list_namespaced_custom_object(gang.GROUP, gang.VERSION, ns, gang.WORKLOADS)[
        "items"
    ]


def test_a_job_larger_than_the_free_capacity_binds_no_pod_and_says_why(
    kube: Any, operator: OperatorProcess, namespace: str, slots: Any
) -> None:
    ns = namespace
    slots(2)  # 8 places on 4 nodes; the job needs 9
    create_job(kube, ns, gang_job("big", 9))

    def says_why() -> dict[str, Any] | None:
        # The PodGroup's verdict, and what is short (the scheduler says it on the Pods that
        # did not fit; the others only wait for the rest of their gang).
        s = job_status(kube, ns, "big")
        running = condition(s, "Running") or {}
        why = running.get("reason") == gang.REASON and "Insufficient" in running["message"]
        return s if why else None

    s = wait_for(says_why, timeout=90, what="the job's status saying the gang cannot be placed")
    message = condition(s, "Running")["message"]
    assert "the gang of 9 Pods cannot be placed together" in message, message
    assert "Insufficient kerasjob.dev/gang-slot" in message, message
    assert s["phase"] == "Pending"
    (group,) = pod_groups(kube, ns)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 9}}
    scheduled = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    everyone = pods(kube, ns, "big")
    assert len(everyone) == 9
    assert {p.spec.scheduling_group.pod_group_name for p in everyone.values()} == {
        group["metadata"]["name"]
    }
    # Nothing bound, and it stays so (8 of the 9 would fit one by one).
    for _ in range(10):
        assert bound(kube, ns) == {"big": 0}
        time.sleep(0.3)
    assert any(e.reason == gang.REASON for e in events_for(kube, ns, "big"))

    # Room for all 9: they are bound together, the job runs.
    slots(3)
    wait_phase(kube, ns, "big", "Running", timeout=120)
    assert bound(kube, ns) == {"big": 9}
    running = condition(job_status(kube, ns, "big"), "Running")
    assert running["status"] == "True"
    finish(kube, ns, "big")
    wait_phase(kube, ns, "big", "Succeeded", timeout=60)


def test_two_jobs_competing_for_capacity_run_one_after_the_other(
    kube: Any, operator: OperatorProcess, namespace: str, slots: Any
) -> None:
    ns = namespace
    slots(2)  # 8 places; each job needs 6: without gangs each could hold 4 and wait forever
    for name in ("a", "b"):
        create_job(kube, ns, gang_job(name, 6))
    # The operator dies and comes back while the jobs start: one PodGroup per job, still.
    time.sleep(1)
    operator.kill()
    operator.start()
    done: list[str] = []
    deadline = time.monotonic() + 240
    check = NoPartialGang(lambda _: 6)
    while len(done) < 2:
        assert time.monotonic() < deadline, f"not both done: {done}, bound {bound(kube, ns)}"
        counts = bound(kube, ns)
        check.look(counts, done)
        for name in ("a", "b"):
            if name in done:
                continue
            s = job_status(kube, ns, name)
            if s.get("phase") == "Running":
                other = "b" if name == "a" else "a"
                if other not in done:
                    # The other one has no place at all while this one runs.
                    assert bound(kube, ns, other).get(other, 0) == 0, counts
                    waiting = condition(job_status(kube, ns, other), "Running") or {}
                    # The other one waits, and says why (once the scheduler has tried it).
                    assert waiting.get("status") != "True"
                finish(kube, ns, name)
                wait_phase(kube, ns, name, "Succeeded", timeout=60)
                done.append(name)
        time.sleep(0.3)
    names = sorted(g["metadata"]["name"] for g in pod_groups(kube, ns))
    assert len(names) == 2, names
    assert len(workloads(kube, ns)) == 2


def test_a_fitting_job_runs_normally_in_its_own_gang(
    kube: Any, operator: OperatorProcess, namespace: str, slots: Any
) -> None:
    ns = namespace
    slots(2)
    job = create_job(kube, ns, gang_job("fit", 4))
    wait_phase(kube, ns, "fit", "Running", timeout=60)
    (group,) = pod_groups(kube, ns)
    (workload,) = workloads(kube, ns)
    uid = job["metadata"]["uid"]
    for obj in (group, workload):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("KerasJob", uid, True)
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert (
        group["spec"]["podGroupTemplateRef"]["workload"]["workloadName"]
        == (workload["metadata"]["name"])
    )
    scheduled = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupScheduled")
    assert scheduled["status"] == "True"
    s = job_status(kube, ns, "fit")
    assert s["replicaStatuses"]["worker"]["ready"] == 4
    assert s["restarts"] == {"disruptions": 0, "failures": 0}
    finish(kube, ns, "fit")
    wait_phase(kube, ns, "fit", "Succeeded", timeout=60)
    # Deleted with the job (owner references; the PodGroup's protection finalizer lets it
    # go once its Pods are gone): nothing is left behind.
    delete_job(kube, ns, "fit")
    wait_for(
        lambda: not pod_groups(kube, ns) and not workloads(kube, ns) and not pods(kube, ns),
        timeout=60,
        what="the PodGroup, Workload and Pods garbage-collected with the job",
    )


JOBS, WORKERS, SLOTS_PER_NODE = 50, 8, 6  # 4 nodes x 6 = 24 places: 3 jobs at a time


def test_fifty_competing_eight_worker_jobs_all_finish(
    kube: Any, operator: OperatorProcess, namespace: str, slots: Any
) -> None:
    slots(SLOTS_PER_NODE)
    got = run_competing(kube, namespace, JOBS, WORKERS, timeout=600)
    assert got["succeeded"] == JOBS, got
    assert len(got["bound_seconds"]) == JOBS  # every job's 8 Pods were bound
    assert len(pod_groups(kube, namespace)) == JOBS
    print(
        f"\n{JOBS} jobs x {WORKERS} workers, places for {SLOTS_PER_NODE * 4 // WORKERS} "
        f"at a time: all Succeeded in {got['total_seconds']:.1f} s; created -> all Pods "
        f"bound: median {got['bound_median_seconds']:.1f} s, max "
        f"{got['bound_max_seconds']:.1f} s; places freed -> next gang bound: median "
        f"{got['freed_to_next_bound_median_seconds']} s; one gang's binds spread over max "
        f"{got['bind_spread_max_seconds']:.0f} s (1 s resolution); at most "
        f"{got['most_pods_bound']} Pods bound at once"
    )


def test_an_elastic_gang_shrinks_to_what_fits_and_grows_back_in_new_pod_groups(
    kube: Any, operator: OperatorProcess, namespace: str
) -> None:
    """Room for 2 of 3 workers: the gang of 3 binds nothing, the job shrinks to 2 (a new
    PodGroup, minCount 2) and runs; room for the third: the probe (outside the gang) is
    bound, the job grows back to 3 (another PodGroup) and runs. The earlier PodGroups go."""
    ns = namespace
    nodes = kwok_nodes(kube)
    body = gang_job("el", 3)
    body["spec"]["elastic"] = {"minWorkers": 1, "shrinkAfterSeconds": 1, "resizeCooldownSeconds": 4}
    try:
        set_slots(kube, nodes[:2], 1)
        create_job(kube, ns, body)

        def at(size: int) -> dict[str, Any] | None:
            s = job_status(kube, ns, "el")
            ok = (
                s.get("phase") == "Running"
                and (s.get("elastic") or {}).get("workers") == size
                and s.get("replicaStatuses", {}).get("worker", {}).get("ready") == size
            )
            return s if ok else None

        s = wait_for(lambda: at(2), timeout=120, what="the job running at 2 workers")
        assert s["elastic"]["history"][0]["reason"] == "CapacityLost"
        groups = {g["metadata"]["name"]: g for g in pod_groups(kube, ns)}
        live = [g for g in groups.values() if not g["metadata"].get("deletionTimestamp")]
        assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in live] == [2], groups
        bound_to = {
            p.spec.scheduling_group.pod_group_name
            for p in pods(kube, ns, "el").values()
            if p.spec.node_name
        }
        assert bound_to == {live[0]["metadata"]["name"]}

        set_slots(kube, nodes[2:3], 1)  # room for the third worker
        wait_for(lambda: at(3), timeout=120, what="the job grown back to 3 workers")
        wait_for(
            lambda: (
                [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in pod_groups(kube, ns)]
                == [3]
            ),
            timeout=60,
            what="only the PodGroup of 3 left",
        )
        assert len(workloads(kube, ns)) == 1
        names = {
            p.spec.scheduling_group.pod_group_name
            for p in pods(kube, ns, "el").values()
            if p.metadata.labels.get("kerasjob.dev/replica-type") == "worker"
        }
        assert names == {pod_groups(kube, ns)[0]["metadata"]["name"]}
        finish(kube, ns, "el")
        wait_phase(kube, ns, "el", "Succeeded", timeout=60)
    finally:
        set_slots(kube, nodes, None)


def test_the_charts_rbac_is_all_gang_scheduling_needs(
    cluster: Cluster, kube: Any, kwok_placement: dict[str, Any], tmp_path: Path
) -> None:
    """The operator as the chart runs it (gangScheduling.enabled, one jobs namespace), with
    only its ServiceAccount's token: a job runs in its gang, every request it made is granted
    by the chart, and its log shows nothing forbidden."""
    from kerasjob_dev.testing.chart_operator import (
        NEVER_SCHEDULE,
        api_requests,
        forbidden,
        granted,
        helm_install,
        operator_process,
        token_kubeconfig,
    )

    install_crds(cluster)
    op_ns = create_namespace(kube, "op")
    ns = create_namespace(kube, "gangrbac")
    name = f"kj-{uuid.uuid4().hex[:6]}"
    nodes = kwok_nodes(kube)
    try:
        set_slots(kube, nodes, 1)
        rel = helm_install(
            cluster,
            name,
            op_ns,
            {
                "watchNamespaces": [ns],
                "gangScheduling.enabled": True,
                "image.tag": "dev",
                "trainerImage.tag": "dev",
                "nodeSelector": NEVER_SCHEDULE,
            },
        )
        sa = token_kubeconfig(cluster, op_ns, rel.service_account, tmp_path / "kubeconfig")
        log_path = tmp_path / "operator.log"
        with operator_process(rel, sa, log_path) as run:
            create_job(kube, ns, gang_job("rbac", 3))
            wait_phase(kube, ns, "rbac", "Running", timeout=90)
            (group,) = pod_groups(kube, ns)
            assert {
                p.spec.scheduling_group.pod_group_name for p in pods(kube, ns, "rbac").values()
            } == {group["metadata"]["name"]}
            finish(kube, ns, "rbac")
            wait_phase(kube, ns, "rbac", "Succeeded", timeout=60)
            requests = api_requests(run)
        for call in ("create workloads", "create podgroups"):
            assert requests.get(call), (call, requests)
        allowed = granted(rel, ns)
        for call in requests:
            verb, resource = call.split(" ", 1)
            resource = resource.removesuffix(" (dry run)")
            assert verb in allowed.get(resource, set()), f"{call!r} not granted by the chart"
        refused = forbidden(log_path)
        assert not refused, "\n".join(refused)
    finally:
        set_slots(kube, nodes, None)
        cluster.helm("uninstall", name, "--namespace", op_ns, check=False)
        delete_namespace(kube, ns)
        delete_namespace(kube, op_ns)


def test_with_kueue_a_queued_job_has_no_gang_until_admitted_then_runs_in_one(
    cluster: Cluster, kube: Any, kwok_placement: dict[str, Any]
) -> None:
    """Both on (``--kueue --gang-scheduling``): Kueue decides when, the gang how. A job
    waiting for quota has neither Pods nor a PodGroup; admitted, its Pods are made in one."""
    from kerasjob_dev.kueue import QUEUE_LABEL, cluster_queue, ensure_kueue, wait_admitted

    install_crds(cluster)
    ensure_kueue(cluster)
    ns = create_namespace(kube, "kqgang")
    op = OperatorProcess(cluster, (ns,), name="kqgang", extra_args=("--kueue", "--gang-scheduling"))
    try:
        op.start()
        with cluster_queue(kube, ns, cpu="3", node_labels={"type": "kwok"}) as queue:
            for name in ("first", "second"):  # quota in cpu (Kueue's ClusterQueue covers it)
                body = job_manifest(name, workers=3)
                body["spec"]["template"]["spec"]["containers"] = [
                    {"name": "trainer", "resources": {"requests": {"cpu": "1"}}}
                ]
                body["metadata"]["labels"] = {QUEUE_LABEL: queue}
                create_job(kube, ns, body)
                if name == "first":  # admitted first (created together, either could be)
                    wait_admitted(cluster, kube, ns, "first", timeout=90, operator=op)
            wait_phase(kube, ns, "first", "Running", timeout=90)
            wait_phase(kube, ns, "second", "Queued", timeout=30)
            assert not pods(kube, ns, "second")
            (group,) = pod_groups(kube, ns)
            assert group["metadata"]["labels"]["kerasjob.dev/job-name"] == "first"
            finish(kube, ns, "first")
            wait_phase(kube, ns, "first", "Succeeded", timeout=60)
            wait_admitted(cluster, kube, ns, "second", timeout=90, operator=op)
            wait_phase(kube, ns, "second", "Running", timeout=90)
            second = [
                g
                for g in pod_groups(kube, ns)
                if g["metadata"]["labels"]["kerasjob.dev/job-name"] == "second"
            ]
            assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in second] == [3]
            assert {
                p.spec.scheduling_group.pod_group_name for p in pods(kube, ns, "second").values()
            } == {second[0]["metadata"]["name"]}
            finish(kube, ns, "second")
            wait_phase(kube, ns, "second", "Succeeded", timeout=60)
    finally:
        op.stop()
        delete_namespace(kube, ns)

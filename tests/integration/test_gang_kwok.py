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

import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest

from kerasjob import gang
from kerasjob_contract.times import parse_time
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    condition,
    core,
    create_job,
    custom,
    events_for,
    exit_pod,
    install_crds,
    job_manifest,
    job_status,
    own_namespace,
    pods,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

SLOT = "kerasjob.dev/gang-slot"


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
    nodes = sorted(n.metadata.name
                   for n in core(kube).list_node(label_selector="type=kwok").items)

    def set_slots(n: int | None) -> None:
        value = None if n is None else str(n)
        for name in nodes:
            core(kube).patch_node_status(
                name, {"status": {"capacity": {SLOT: value}, "allocatable": {SLOT: value}}})

    set_slots.nodes = nodes  # type: ignore[attr-defined]
    try:
        yield set_slots
    finally:
        set_slots(None)


def gang_job(name: str, workers: int) -> dict[str, Any]:
    body = job_manifest(name, workers=workers)
    body["spec"]["template"]["spec"]["containers"] = [{
        "name": "trainer", "resources": {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}}}]
    return body


def bound(kube: Any, ns: str, job: str | None = None) -> dict[str, int]:
    """Per job: how many of its (not finished) Pods are bound to a node."""
    out: dict[str, int] = {}
    for p in pods(kube, ns, job).values():
        j = p.metadata.labels["kerasjob.dev/job-name"]
        out.setdefault(j, 0)
        if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
            out[j] += 1
    return out


#: A gang's Pods are bound one API call after another once all have a place: a look may
#: catch some bound and the rest a moment later. Part of a gang bound for longer is a failure.
PARTIAL_SECONDS = 10.0


class NoPartialGang:
    """Checks, look after look, that no job keeps only part of its Pods bound."""

    def __init__(self, size: Callable[[str], int]) -> None:
        self.size = size
        self.since: dict[str, float] = {}

    def look(self, counts: dict[str, int], done: set[str] | list[str]) -> None:
        now = time.monotonic()
        partial = {j for j, n in counts.items() if 0 < n < self.size(j) and j not in done}
        self.since = {j: self.since.get(j, now) for j in partial}
        stuck = {j: counts[j] for j, t in self.since.items() if now - t > PARTIAL_SECONDS}
        assert not stuck, f"part of a gang bound for over {PARTIAL_SECONDS:g} s: {stuck}"


def finish(kube: Any, ns: str, job: str) -> None:
    """Every Pod of the job exits 0 (the workers end with the chief)."""
    for name, p in pods(kube, ns, job).items():
        if p.status.phase == "Running":
            exit_pod(kube, ns, name)


def pod_groups(kube: Any, ns: str) -> list[dict[str, Any]]:
    return custom(kube).list_namespaced_custom_object(
        gang.GROUP, gang.VERSION, ns, gang.PODGROUPS)["items"]


def workloads(kube: Any, ns: str) -> list[dict[str, Any]]:
    return custom(kube).list_namespaced_custom_object(
        gang.GROUP, gang.VERSION, ns, gang.WORKLOADS)["items"]


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
    scheduled = next(c for c in group["status"]["conditions"]
                     if c["type"] == "PodGroupScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    everyone = pods(kube, ns, "big")
    assert len(everyone) == 9
    assert {p.spec.scheduling_group.pod_group_name for p in everyone.values()} == {
        group["metadata"]["name"]}
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
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {
        "gang": {"minCount": 4}}
    assert group["spec"]["podGroupTemplateRef"]["workload"]["workloadName"] == (
        workload["metadata"]["name"])
    scheduled = next(c for c in group["status"]["conditions"]
                     if c["type"] == "PodGroupScheduled")
    assert scheduled["status"] == "True"
    s = job_status(kube, ns, "fit")
    assert s["replicaStatuses"]["worker"]["ready"] == 4
    assert s["restarts"] == {"disruptions": 0, "failures": 0}
    finish(kube, ns, "fit")
    wait_phase(kube, ns, "fit", "Succeeded", timeout=60)


JOBS, WORKERS, SLOTS_PER_NODE = 50, 8, 6  # 4 nodes x 6 = 24 places: 3 jobs at a time


def _bind_times(kube: Any, ns: str) -> dict[str, list[datetime]]:
    """Per job: when each of its Pods was bound (PodScheduled True)."""
    out: dict[str, list[datetime]] = {}
    for p in pods(kube, ns).values():
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "True":
                out.setdefault(p.metadata.labels["kerasjob.dev/job-name"], []).append(
                    c.last_transition_time)
    return out


def test_fifty_competing_eight_worker_jobs_all_finish(
    kube: Any, operator: OperatorProcess, namespace: str, slots: Any
) -> None:
    ns = namespace
    slots(SLOTS_PER_NODE)
    names = [f"g{i:02d}" for i in range(JOBS)]
    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        created = dict(zip(names, pool.map(
            lambda n: create_job(kube, ns, gang_job(n, WORKERS)), names), strict=True))
    done: set[str] = set()
    check = NoPartialGang(lambda _: WORKERS)
    most_bound = 0
    deadline = start + 600
    while len(done) < JOBS:
        assert time.monotonic() < deadline, (
            f"{len(done)}/{JOBS} finished; bound now {bound(kube, ns)}")
        counts = bound(kube, ns)
        check.look(counts, done)
        jobs = custom(kube).list_namespaced_custom_object(
            "kerasjob.dev", "v1alpha1", ns, "kerasjobs")["items"]
        phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in jobs}
        running = [n for n, ph in phases.items() if ph == "Running" and n not in done]
        most_bound = max(most_bound, sum(counts.values()))
        for n in running:
            finish(kube, ns, n)
        done |= {n for n, ph in phases.items() if ph == "Succeeded"}
        time.sleep(0.5)
    total = time.monotonic() - start
    binds = _bind_times(kube, ns)
    waits, spreads = [], []
    for n in names:
        times = binds[n]
        assert len(times) == WORKERS, (n, len(times))
        made = parse_time(created[n]["metadata"]["creationTimestamp"])
        assert made is not None
        waits.append((max(times) - made).total_seconds())
        spreads.append((max(times) - min(times)).total_seconds())
    assert len(pod_groups(kube, ns)) == JOBS
    print(f"\n{JOBS} jobs x {WORKERS} workers, places for {SLOTS_PER_NODE * 4 // WORKERS} "
          f"at a time: all Succeeded in {total:.1f} s; created -> all Pods bound: median "
          f"{statistics.median(waits):.1f} s, max {max(waits):.1f} s; one gang's binds "
          f"spread over max {max(spreads):.0f} s (1 s resolution); at most {most_bound} Pods "
          "bound at once")

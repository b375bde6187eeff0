"""An elastic KerasJob under the real Kueue manager (its gate ElasticJobsViaWorkloadSlices
on, as `hack/cluster/kueue.sh` starts it): Kueue sees the job's current size.

Quota is counted in cpu (every Pod requests 1); node capacity in kerasjob.dev/kwok-slot, an
extended resource patched into the KWOK nodes (as test_elastic_kwok does): the elastic job's
workers need a slot, the other job's Pod does not. A node losing its slot makes the elastic
job shrink 3 -> 2; its Workload then counts 2 workers, and a job waiting for exactly that
quota is admitted. With the slot back the job asks Kueue for a 3-worker slice and grows only
once Kueue admitted it (here: once the other job finished). Printed: the times (-s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    core,
    create_job,
    custom,
    delete_job,
    events_for,
    job_manifest,
    job_status,
    pods,
    set_container_exit,
    wait_phase,
)
from kerasjob_dev.kueue import (
    GROUP,
    QUEUE_LABEL,
    VERSION,
    cluster_queue,
    ensure_kueue,
    kueue_namespace,
    kueue_operator,
    wl_condition,
    wl_true,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

POLL = 0.05
SLOT = "kerasjob.dev/kwok-slot"
COOLDOWN = 4


@pytest.fixture
def operator(cluster: Cluster, kwok_placement: dict[str, Any]) -> OperatorProcess:
    return kueue_operator(cluster)


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    yield from kueue_namespace(kube)


def _set_slots(kube: Any, slots: dict[str, int | None]) -> None:
    for name, n in slots.items():
        value = None if n is None else str(n)
        core(kube).patch_node_status(
            name, {"status": {"capacity": {SLOT: value}, "allocatable": {SLOT: value}}}
        )


def _workloads(kube: Any, ns: str, job: str) -> list[dict[str, Any]]:
    items = custom(kube).list_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads", label_selector=f"kerasjob.dev/job-name={job}"
    )["items"]
    return sorted(items, key=lambda w: w["metadata"]["name"])


def _delete_jobs_leaving_no_workload(kube: Any, ns: str, *jobs: str) -> None:
    """No leak: the jobs' Workloads (every slice) go with them."""
    for job in jobs:
        delete_job(kube, ns, job)
    wait_for(
        lambda: not any(_workloads(kube, ns, job) for job in jobs),
        timeout=60,
        interval=POLL,
        what="the Workloads gone with their jobs",
    )


def _live(kube: Any, ns: str, job: str) -> list[dict[str, Any]]:
    return [w for w in _workloads(kube, ns, job) if not wl_true(w, "Finished")]


def _workers(w: dict[str, Any]) -> int:
    return next(p["count"] for p in w["spec"]["podSets"] if p["name"] == "worker")


def _size(kube: Any, ns: str, job: str) -> int | None:
    return (job_status(kube, ns, job).get("elastic") or {}).get("workers")


def _running_at(kube: Any, ns: str, job: str, n: int) -> bool:
    s = job_status(kube, ns, job)
    return (
        s.get("phase") == "Running"
        and (s.get("elastic") or {}).get("workers") == n
        and s.get("replicaStatuses", {}).get("worker", {}).get("ready") == n
    )


def _describe(kube: Any, ns: str) -> str:
    lines = []
    for job in ("el", "other"):
        try:
            s = job_status(kube, ns, job)
        except Exception as e:  # not there
            lines.append(f"{job}: {e.__class__.__name__}")
            continue
        lines.append(
            f"{job}: {s.get('phase')} {s.get('elastic')} "
            f"{s.get('replicaStatuses')} {s.get('conditions')}"
        )
        for w in _workloads(kube, ns, job):
            conds = [
                (c["type"], c["status"], c.get("reason"), c.get("message", "")[:120])
                for c in (w.get("status") or {}).get("conditions") or []
            ]
            lines.append(f"  wl {w['metadata']['name']} workers {_workers(w)} {conds}")
        lines += [f"  event {e.reason}: {e.message}" for e in events_for(kube, ns, job)]
    for name, p in sorted(pods(kube, ns).items()):
        lines.append(
            f"  pod {name}: {p.status.phase} {p.spec.node_name} "
            f"{'deleting' if p.metadata.deletion_timestamp else ''}"
        )
    return "\n".join(lines)


def _start_both(kube: Any, ns: str, queue: str) -> str:
    """The elastic job running at 3 workers (its Workload's name), the other one queued
    for 1 worker's quota."""
    body = job_manifest(
        "el",
        workers=3,
        elastic={"minWorkers": 2, "shrinkAfterSeconds": 1, "resizeCooldownSeconds": COOLDOWN},
    )
    body["spec"]["template"]["spec"]["containers"] = [
        {
            "name": "trainer",
            "resources": {"requests": {"cpu": "1", SLOT: "1"}, "limits": {SLOT: "1"}},
        }
    ]
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    create_job(kube, ns, body)
    wait_for(
        lambda: _running_at(kube, ns, "el", 3),
        timeout=90,
        interval=POLL,
        what="el running at 3 workers",
    )
    (first,) = _live(kube, ns, "el")
    first_name = first["metadata"]["name"]
    assert wl_true(first, "Admitted") and _workers(first) == 3
    assert first["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true"

    other = job_manifest("other", workers=1)
    other["spec"]["template"]["spec"]["containers"] = [
        {"name": "trainer", "resources": {"requests": {"cpu": "1"}}}
    ]
    other["metadata"]["labels"] = {QUEUE_LABEL: queue}
    create_job(kube, ns, other)
    wait_for(
        lambda: job_status(kube, ns, "other").get("phase") == "Queued" and _live(kube, ns, "other"),
        timeout=30,
        interval=POLL,
        what="other queued for quota",
    )
    time.sleep(2)
    assert not wl_true(_live(kube, ns, "other")[0], "QuotaReserved")
    return str(first_name)


def _lose_capacity(kube: Any, ns: str, node: str) -> None:
    """The node's slot and the elastic job's worker on it are gone."""
    _set_slots(kube, {node: 0})
    for name, pod in pods(kube, ns, "el").items():
        if pod.spec.node_name == node:
            core(kube).delete_namespaced_pod(name, ns)


def _start_both_and_shrink(kube: Any, ns: str, queue: str, node: str) -> tuple[str, float]:
    """`_start_both`, then ``node``'s capacity lost: the elastic job shrunk to 2 workers.
    Its first Workload's name, and when the capacity went (time.monotonic())."""
    first_name = _start_both(kube, ns, queue)
    lost_at = time.monotonic()
    _lose_capacity(kube, ns, node)
    wait_for(lambda: _size(kube, ns, "el") == 2, timeout=60, interval=POLL, what="el shrunk to 2")
    return first_name, lost_at


@pytest.fixture
def slot_nodes(kube: Any) -> Iterator[tuple[str, str]]:
    """Two KWOK nodes with 2 and 1 slots (the others none); every slot removed after."""
    nodes = sorted(n.metadata.name for n in core(kube).list_node(label_selector="type=kwok").items)
    if len(nodes) < 2:
        pytest.skip("needs 2 KWOK nodes")
    _set_slots(kube, {**dict.fromkeys(nodes, 0), nodes[0]: 2, nodes[1]: 1})
    try:
        yield nodes[0], nodes[1]
    finally:
        _set_slots(kube, dict.fromkeys(nodes, None))


def test_kueue_charges_the_current_size_and_admits_the_grow(
    operator: OperatorProcess,
    cluster: Cluster,
    kube: Any,
    namespace: str,
    slot_nodes: tuple[str, str],
) -> None:
    ns, small = namespace, slot_nodes[1]
    try:
        with cluster_queue(
            kube, ns, cpu="3", node_labels={"type": "kwok"}, extra_quota={SLOT: "100"}
        ) as queue:
            first_name, t0 = _start_both_and_shrink(kube, ns, queue, small)
            t_shrunk = time.monotonic() - t0
            wait_for(
                lambda: [_workers(w) for w in _live(kube, ns, "el")] == [2],
                timeout=30,
                interval=POLL,
                what="el's Workload counts 2 workers",
            )
            t_counted = time.monotonic() - t0
            wait_for(
                lambda: wl_true(_live(kube, ns, "other")[0], "Admitted"),
                timeout=30,
                interval=POLL,
                what="other admitted with the freed quota",
            )
            t_other = time.monotonic() - t0
            wait_phase(kube, ns, "other", "Running")
            wait_for(
                lambda: _running_at(kube, ns, "el", 2),
                timeout=60,
                interval=POLL,
                what="el running at 2 workers",
            )
            (shrunk,) = _live(kube, ns, "el")
            # The same Workload, changed in place, still admitted: no re-admission.
            assert shrunk["metadata"]["name"] == first_name
            assert wl_true(shrunk, "Admitted") and not wl_true(shrunk, "Evicted")
            reasons = [e.reason for e in events_for(kube, ns, "el")]
            assert "WorkloadResized" in reasons, reasons

            # Capacity back while the other job holds the quota: a 3-worker slice is asked
            # for, and the job stays at 2 until Kueue admits it.
            t1 = time.monotonic()
            _set_slots(kube, {small: 1})
            pending = wait_for(
                lambda: [w for w in _live(kube, ns, "el") if w["metadata"]["name"] != first_name],
                timeout=60,
                interval=POLL,
                what="a 3-worker slice asked of Kueue",
            )
            t_asked = time.monotonic() - t1
            (grow,) = pending
            assert _workers(grow) == 3
            assert (
                grow["metadata"]["annotations"]["kueue.x-k8s.io/workload-slice-replacement-for"]
                == f"{ns}/{first_name}"
            )
            time.sleep(COOLDOWN + 2)
            assert _running_at(kube, ns, "el", 2)
            assert not wl_true(_live(kube, ns, "el")[-1], "QuotaReserved")
            reasons = [e.reason for e in events_for(kube, ns, "el")]
            assert reasons.count("GrowWaitingForKueue") == 1, reasons
            # A restarted operator finds the same slice (its name is deterministic), makes
            # no second one and keeps waiting.
            operator.restart()
            time.sleep(3)
            assert [w["metadata"]["name"] for w in _live(kube, ns, "el")] == [
                first_name,
                grow["metadata"]["name"],
            ]
            assert _running_at(kube, ns, "el", 2)
            assert [e.reason for e in events_for(kube, ns, "el")].count("GrowWaitingForKueue") == 1

            t2 = time.monotonic()
            set_container_exit(cluster, ns, "other-worker-0", 0, in_place=False)
            wait_phase(kube, ns, "other", "Succeeded")
            wait_for(
                lambda: wl_true(_workloads(kube, ns, "el")[-1], "Admitted"),
                timeout=30,
                interval=POLL,
                what="the 3-worker slice admitted",
            )
            t_admitted = time.monotonic() - t2
            wait_for(
                lambda: _running_at(kube, ns, "el", 3),
                timeout=60,
                interval=POLL,
                what="el grown back to 3",
            )
            t_grown = time.monotonic() - t2
            workloads = _workloads(kube, ns, "el")
            live = [w for w in workloads if not wl_true(w, "Finished")]
            assert [(w["metadata"]["name"], _workers(w)) for w in live] == [
                (grow["metadata"]["name"], 3)
            ]
            old = next(w for w in workloads if w["metadata"]["name"] == first_name)
            assert (wl_condition(old, "Finished") or {}).get("reason") == "WorkloadSliceReplaced"
            # The grow came after Kueue's admission of the slice, never before.
            admitted_at = wl_condition(live[0], "Admitted")["lastTransitionTime"]
            status = job_status(kube, ns, "el")
            grown_at = status["elastic"]["history"][-1]["time"]
            assert status["elastic"]["history"][-1]["reason"] == "CapacityReturned"
            assert grown_at >= admitted_at, (grown_at, admitted_at)
            assert status["restarts"]["failures"] == 0
            print(
                f"\nKUEUE-ELASTIC capacity lost -> shrunk {t_shrunk:.2f}s, -> Workload "
                f"counts 2 {t_counted:.2f}s, -> other job admitted {t_other:.2f}s; capacity "
                f"back -> 3-worker slice asked {t_asked:.2f}s; other finished -> slice "
                f"admitted {t_admitted:.2f}s, -> running at 3 {t_grown:.2f}s"
            )

            # No leak: the job's Workloads go with it.
            _delete_jobs_leaving_no_workload(kube, ns, "el", "other")
    except BaseException:
        print(_describe(kube, ns), operator.log_tail(), sep="\n")
        raise


def test_without_kueues_gate_a_shrink_gives_the_quota_back_as_reclaimable_pods(
    operator: OperatorProcess,
    cluster: Cluster,
    kube: Any,
    namespace: str,
    slot_nodes: tuple[str, str],
) -> None:
    """Kueue with ElasticJobsViaWorkloadSlices off refuses a smaller count on an admitted
    Workload: the operator says so once and gives the workers' quota back through
    status.reclaimablePods (the other job is admitted); with no slice replacement, the grow
    waits for an admission of the whole bigger size, which this quota never allows."""
    if not cluster.local:
        pytest.skip("restarts Kueue with another feature gate: the local cluster only")
    ns, small = namespace, slot_nodes[1]
    ensure_kueue(cluster, feature_gates="VisibilityOnDemand=false")
    try:
        with cluster_queue(
            kube, ns, cpu="3", node_labels={"type": "kwok"}, extra_quota={SLOT: "100"}
        ) as queue:
            first_name, t0 = _start_both_and_shrink(kube, ns, queue, small)
            wait_for(
                lambda: wl_true(_live(kube, ns, "other")[0], "Admitted"),
                timeout=30,
                interval=POLL,
                what="other admitted with the reclaimed quota",
            )
            t_other = time.monotonic() - t0
            (wl,) = _live(kube, ns, "el")
            assert wl["metadata"]["name"] == first_name and _workers(wl) == 3
            assert wl["status"]["reclaimablePods"] == [{"name": "worker", "count": 1}]
            assert wl_true(wl, "Admitted")
            wait_for(
                lambda: _running_at(kube, ns, "el", 2),
                timeout=60,
                interval=POLL,
                what="el running at 2 workers",
            )

            # Capacity back: the 3-worker slice waits (3 more cpu than the queue has).
            _set_slots(kube, {small: 1})
            wait_for(
                lambda: len(_live(kube, ns, "el")) == 2,
                timeout=60,
                interval=POLL,
                what="a 3-worker slice asked of Kueue",
            )
            set_container_exit(cluster, ns, "other-worker-0", 0, in_place=False)
            wait_phase(kube, ns, "other", "Succeeded")
            time.sleep(COOLDOWN + 2)
            assert _running_at(kube, ns, "el", 2)
            old, grow = _live(kube, ns, "el")
            assert old["metadata"]["name"] == first_name and wl_true(old, "Admitted")
            assert not wl_true(grow, "QuotaReserved") and _workers(grow) == 3
            reasons = [e.reason for e in events_for(kube, ns, "el")]
            # Said once, never retried in a loop; nothing claims the Workload followed.
            assert reasons.count("WorkloadShrinkRefused") == 1, reasons
            assert "WorkloadResized" not in reasons, reasons
            print(
                f"\nKUEUE-ELASTIC gate off: capacity lost -> other job admitted "
                f"{t_other:.2f}s (reclaimablePods)"
            )
            _delete_jobs_leaving_no_workload(kube, ns, "el", "other")
    except BaseException:
        print(_describe(kube, ns), operator.log_tail(), sep="\n")
        raise
    finally:
        ensure_kueue(cluster)  # the gate on again, for the other tests

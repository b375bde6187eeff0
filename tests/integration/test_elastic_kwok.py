"""20 elastic KerasJobs on KWOK nodes whose capacity goes down and up three times.

Each worker asks for one kerasjob.dev/kwok-slot, an extended resource patched into the KWOK
nodes' status. 60 slots: every job runs its preferred 3 workers. Then half the nodes lose
their slots and their Pods (spot capacity reclaimed, 30 slots left): replacements cannot be
scheduled, the jobs hit shrink (minWorkers 1) and the cluster converges: every job runs or
waits at its minimum for a place, all 30 slots are in use, and nothing resizes any more. Then
60 slots: the probes are scheduled and every job grows back to 3, no sooner than the
cool-down.
At the end every job succeeds (the chief's exit is written as a kubelet would) and no Pod,
probe or counter is left over. Printed: capacity lost -> converged, capacity back ->
all at full size (median and max per cycle).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kerasjob.cli import app as cli
from kerasjob_contract.times import parse_time
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    core,
    create_job,
    delete_job,
    job_manifest,
    job_status,
    own_namespace,
    own_operator,
    pods,
    set_container_exit,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

JOBS, PREFERRED, SLOTS = 20, 3, 60
SLOT = "kerasjob.dev/kwok-slot"
COOLDOWN = 4


@pytest.fixture
def namespace(kube: Any, kwok_placement: dict[str, Any]) -> Iterator[str]:
    yield from own_namespace(kube, "elastic")


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> Iterator[OperatorProcess]:
    """An operator of this test's own, on its one namespace: no namespace scanning to wait
    for (the session operator, started just after the control-plane fault tests, once saw
    none of the 20 jobs within 120 s), and its metrics are this test's alone."""
    yield from own_operator(cluster, namespace, "elastic")


def _kwok_nodes(kube: Any) -> list[str]:
    return sorted(n.metadata.name for n in core(kube).list_node(label_selector="type=kwok").items)


def _set_slots(kube: Any, slots: dict[str, int | None]) -> None:
    """Each node's slots (None: remove the resource)."""
    for name, n in slots.items():
        value = None if n is None else str(n)
        core(kube).patch_node_status(
            name, {"status": {"capacity": {SLOT: value}, "allocatable": {SLOT: value}}}
        )


def _elastic_job(name: str) -> dict[str, Any]:
    body = job_manifest(
        name,
        workers=PREFERRED,
        elastic={"minWorkers": 1, "shrinkAfterSeconds": 1, "resizeCooldownSeconds": COOLDOWN},
    )
    body["spec"]["template"]["spec"]["containers"] = [
        {"name": "trainer", "resources": {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}}}
    ]
    return body


def _statuses(kube: Any, ns: str) -> dict[str, dict[str, Any]]:
    return {f"e{i}": job_status(kube, ns, f"e{i}") for i in range(JOBS)}


def _settled(kube: Any, ns: str, size: int | None = None) -> dict[str, dict[str, Any]] | None:
    """Every job Running with all its Pods ready (at ``size`` workers, if given)."""
    statuses = _statuses(kube, ns)
    for s in statuses.values():
        workers = (s.get("elastic") or {}).get("workers")
        if s.get("phase") != "Running" or (size is not None and workers != size):
            return None
        if s.get("replicaStatuses", {}).get("worker", {}).get("ready") != workers:
            return None
    return statuses


def _converged(kube: Any, ns: str, slots: int) -> dict[str, dict[str, Any]] | None:
    """Every job Running, or waiting at minWorkers (1) for a place; every slot in use by a
    ready worker. (Which jobs wait is the scheduler's luck: a job's shrink frees places
    that another job's pending workers may take; kerasjob does not arbitrate between jobs,
    Kueue's quotas and fair sharing do.)"""
    statuses = _statuses(kube, ns)
    ready = 0
    for s in statuses.values():
        workers = (s.get("elastic") or {}).get("workers")
        worker = s.get("replicaStatuses", {}).get("worker", {})
        if s.get("phase") == "Running" and worker.get("ready") == workers:
            ready += workers
        elif not (s.get("phase") == "Restarting" and workers == 1):
            return None
    return statuses if ready == slots else None


def _describe(kube: Any, ns: str) -> str:
    """Each job's phase, size, resizes and why; each Pod's phase and node (on failure)."""
    lines = []
    for name, s in _statuses(kube, ns).items():
        running = next((c for c in s.get("conditions") or [] if c["type"] == "Running"), {})
        lines.append(
            f"{name}: {s.get('phase')} {s.get('elastic')} ready "
            f"{s.get('replicaStatuses', {}).get('worker')} restarts "
            f"{s.get('restarts')} | {running.get('reason')}: "
            f"{running.get('message', '')[:100]}"
        )
    for name, p in sorted(pods(kube, ns).items()):
        lines.append(
            f"  {name}: {p.status.phase} {p.spec.node_name} "
            f"{'deleting' if p.metadata.deletion_timestamp else ''}"
        )
    return "\n".join(lines)


def test_twenty_elastic_jobs_follow_the_capacity(
    kube: Any,
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns = namespace
    nodes = _kwok_nodes(kube)
    if len(nodes) < 2 or len(nodes) % 2:
        pytest.skip("needs an even number of KWOK nodes (hack/cluster/up.sh makes 4)")
    per_node = SLOTS // len(nodes)
    reclaimed = nodes[len(nodes) // 2 :]
    full = dict.fromkeys(nodes, per_node)
    _set_slots(kube, full)
    lost_s: list[float] = []
    back_s: list[float] = []
    described = False
    try:
        for i in range(JOBS):
            create_job(kube, ns, _elastic_job(f"e{i}"))
        wait_for(
            lambda: _settled(kube, ns, PREFERRED),
            timeout=300,
            interval=0.5,
            what="20 jobs running at 3 workers",
        )
        for cycle in range(3):
            # Spot capacity reclaimed: half the nodes lose their slots and their Pods.
            _set_slots(kube, dict.fromkeys(reclaimed, 0))
            start = time.monotonic()
            for name, pod in pods(kube, ns).items():
                if pod.spec.node_name in reclaimed:
                    core(kube).delete_namespaced_pod(name, ns)
            shrunk = wait_for(
                lambda: _converged(kube, ns, SLOTS // 2),
                timeout=180,
                interval=0.5,
                what=f"cycle {cycle}: converged on 30 slots",
            )
            lost_s.append(time.monotonic() - start)
            sizes = sorted(st["elastic"]["workers"] for st in shrunk.values())
            # Stable: no resize for two cool-downs, all 30 slots still in use.
            resizes = {n: st["elastic"]["resizes"] for n, st in shrunk.items()}
            time.sleep(2 * COOLDOWN)
            still = _converged(kube, ns, SLOTS // 2)
            assert still and {n: st["elastic"]["resizes"] for n, st in still.items()} == (
                resizes
            ), "resizes went on without a change of capacity"
            # Each running job below its preferred size says where its grow stands (a probe
            # waiting for a place, or another job waiting for one); one waiting for a place
            # itself at minWorkers is not running, and its Running condition says why.
            growth = {
                n: st["elastic"].get("growth")
                for n, st in still.items()
                if st["elastic"]["workers"] < PREFERRED and st["phase"] == "Running"
            }
            assert all(growth.values()), growth
            if growth and not described:  # and `kerasjob describe` shows it
                name = min(growth)
                assert (
                    cli.main(["--kubeconfig", str(cluster.kubeconfig), "describe", name, "-n", ns])
                    == 0
                )
                # (the scheduler's words in it may have changed since)
                shown = [
                    line
                    for line in capsys.readouterr().out.splitlines()
                    if line.startswith("  growing: ")
                ]
                assert len(shown) == 1 and shown[0].split()[1] == growth[name].split()[0], (
                    shown,
                    growth[name],
                )
                described = True

            _set_slots(kube, full)
            start = time.monotonic()
            wait_for(
                lambda: _settled(kube, ns, PREFERRED),
                timeout=180,
                interval=0.5,
                what=f"cycle {cycle}: all grown back to 3",
            )
            back_s.append(time.monotonic() - start)
            print(
                f"cycle {cycle}: sizes on 30 slots {sizes}; lost -> converged "
                f"{lost_s[-1]:.1f}s, back -> full size {back_s[-1]:.1f}s"
            )

        assert described, "no cycle had a running job below its preferred size"
        # No job flapped: a grow never came sooner than the cool-down after a resize.
        for name, s in _statuses(kube, ns).items():
            history = s["elastic"].get("history") or []
            for before, after in itertools.pairwise(history):
                if after["reason"] == "CapacityReturned":
                    gap = (parse_time(after["time"]) - parse_time(before["time"])).total_seconds()
                    assert gap >= COOLDOWN - 1, (name, before, after)  # (1 s timestamps)
            assert s["restarts"]["failures"] == 0, (name, s["restarts"])
            # The operator's metrics show each job's size and resizes, from its status.
            labels = f'namespace="{ns}",name="{name}"'
            scraped = operator.metrics()
            assert scraped[f"kerasjob_operator_elastic_workers{{{labels}}}"] == PREFERRED
            assert (
                scraped[f"kerasjob_operator_elastic_resizes_total{{{labels}}}"]
                == s["elastic"]["resizes"]
            )

        # Finish: every chief exits 0; the jobs succeed, no probe or running Pod is left.
        for i in range(JOBS):
            set_container_exit(cluster, ns, f"e{i}-worker-0", 0, in_place=False)
        wait_for(
            lambda: all(s.get("phase") == "Succeeded" for s in _statuses(kube, ns).values()),
            timeout=120,
            interval=0.5,
            what="every job Succeeded",
        )
        wait_for(
            lambda: (
                not [
                    p
                    for p in pods(kube, ns).values()
                    if p.status.phase not in ("Succeeded", "Failed")
                ]
            ),
            timeout=120,
            interval=0.5,
            what="no running Pod or probe left",
        )
        assert not [n for n in pods(kube, ns) if "-probe-" in n]
    except BaseException:
        print(_describe(kube, ns), operator.log_tail(), sep="\n")
        raise
    finally:
        for i in range(JOBS):
            delete_job(kube, ns, f"e{i}")
        _set_slots(kube, dict.fromkeys(nodes, None))
    wait_for(lambda: not pods(kube, ns), timeout=120, interval=0.5, what="every Pod gone")
    print(
        f"elastic x{JOBS}: capacity lost -> converged: median "
        f"{statistics.median(lost_s):.1f}s, max {max(lost_s):.1f}s; capacity back -> all at "
        f"3 workers: median {statistics.median(back_s):.1f}s, max {max(back_s):.1f}s"
    )


def _impossible_jobs() -> dict[str, dict[str, Any]]:
    """Jobs whose Pods no node will ever take, for their own reasons (issue 36): a
    checkpoint claim that does not exist, a node selector no node has."""
    no_claim = job_manifest(
        "no-claim",
        workers=1,
        checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "does-not-exist"}}},
    )
    nowhere = job_manifest("nowhere", workers=1)
    nowhere["spec"]["template"]["spec"]["nodeSelector"] = {"type": "kwok", "pool": "none"}
    for body in (no_claim, nowhere):  # they would take a slot, were there a node for them
        body["spec"]["template"]["spec"]["containers"] = [
            {"name": "trainer", "resources": {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}}}
        ]
    return {"no-claim": no_claim, "nowhere": nowhere}


def _unschedulable(kube: Any, ns: str, pod: str) -> str | None:
    """The scheduler's message for a Pod it could not place (None while it has none)."""
    found = pods(kube, ns).get(pod)
    for c in (found.status.conditions or []) if found is not None else []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return str(c.message)
    return None


def test_an_impossible_job_does_not_hold_an_elastic_jobs_growth_back(
    kube: Any, cluster: Cluster, operator: OperatorProcess, namespace: str
) -> None:
    """An elastic job shrinks to the 2 slots there are; two jobs that can never start wait
    beside it; a third slot comes back and the elastic job grows into it at once (before
    issue 36 it never grew: any waiting Pod held every elastic job's growth back)."""
    ns = namespace
    nodes = _kwok_nodes(kube)
    if len(nodes) < 3:
        pytest.skip("needs 3 KWOK nodes (hack/cluster/up.sh makes 4)")
    _set_slots(kube, {nodes[0]: 1, nodes[1]: 1, **dict.fromkeys(nodes[2:], 0)})
    impossible = _impossible_jobs()
    try:
        create_job(kube, ns, _elastic_job("grows"))
        wait_for(
            lambda: (
                (s := job_status(kube, ns, "grows")).get("phase") == "Running"
                and s["elastic"]["workers"] == 2
            ),
            timeout=120,
            interval=0.5,
            what="the elastic job shrunk to 2 workers, running",
        )
        for body in impossible.values():
            create_job(kube, ns, body)
        why = {
            name: wait_for(
                lambda name=name: _unschedulable(kube, ns, f"{name}-worker-0"),
                timeout=60,
                interval=0.5,
                what=f"{name}'s Pod unschedulable",
            )
            for name in impossible
        }
        print("the scheduler's words:", why)
        _set_slots(kube, {nodes[2]: 1})
        start = time.monotonic()
        wait_for(
            lambda: (
                (s := job_status(kube, ns, "grows")).get("phase") == "Running"
                and s["elastic"]["workers"] == PREFERRED
                and s.get("replicaStatuses", {}).get("worker", {}).get("ready") == PREFERRED
            ),
            timeout=90,
            interval=0.5,
            what="the elastic job grown back to 3 beside the impossible jobs",
        )
        print(f"slot back -> grown to 3 beside 2 impossible jobs: {time.monotonic() - start:.1f}s")
        # They still wait, for their own reasons: nothing was taken from them.
        assert all(_unschedulable(kube, ns, f"{n}-worker-0") for n in impossible)
    except BaseException:
        print(_describe_one(kube, ns), operator.log_tail(), sep="\n")
        raise
    finally:
        for name in ("grows", *impossible):
            delete_job(kube, ns, name)
        _set_slots(kube, dict.fromkeys(nodes, None))
    wait_for(lambda: not pods(kube, ns), timeout=120, interval=0.5, what="every Pod gone")


def _describe_one(kube: Any, ns: str) -> str:
    lines = [f"grows: {job_status(kube, ns, 'grows').get('elastic')}"]
    for name, p in sorted(pods(kube, ns).items()):
        lines.append(f"  {name}: {p.status.phase} {p.spec.node_name}")
    return "\n".join(lines)

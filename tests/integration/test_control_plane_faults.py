"""Faults of the control plane while jobs run: the API server or etcd killed and restarted,
the operator's own API access revoked and restored. Each time the jobs converge, every
restart is counted exactly once (none for the fault itself), no child is duplicated or
orphaned, and the operator does not hot-loop while the fault lasts. The recovery times are
printed (pytest -s shows them).

These need the local cluster's processes (hack/cluster/restart.sh kills and restarts one);
on a cluster of KUBECONFIG (`KERASJOB_TEST_CLUSTER=current`) they are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    as_a_kubelet_finishes,
    core,
    create_job,
    install_crds,
    isolated_namespace,
    job_manifest,
    job_status,
    pods,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(420)]

WORKERS = 3
#: API requests the operator may make per second of a fault, at most (a hot loop makes
#: hundreds: each failed reconcile is retried with back-off, watches reconnect with back-off).
MAX_REQUESTS_PER_FAULT_SECOND = 20


@pytest.fixture
def local(cluster: Cluster, kwok_placement: dict[str, Any]) -> Cluster:
    if not cluster.local:
        pytest.skip("restarts the local cluster's own processes (hack/cluster/restart.sh)")
    return cluster


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    yield from isolated_namespace(kube)


@pytest.fixture
def operator(local: Cluster, namespace: str) -> Iterator[OperatorProcess]:
    """An operator of this test's own: the fault must not stop it, and its counters are
    this test's alone."""
    install_crds(local)
    op = OperatorProcess(local, (namespace,), name="faults")
    op.start()
    try:
        yield op
    finally:
        op.stop()


def running_jobs(kube: Any, ns: str, names: list[str]) -> None:
    for name in names:
        create_job(kube, ns, job_manifest(name, workers=WORKERS, backoffLimit=100))
    wait_for(
        lambda: all(job_status(kube, ns, n).get("phase") == "Running" for n in names),
        timeout=60,
        what="jobs Running",
    )


def converged(kube: Any, ns: str, expected: dict[str, dict[str, int]]) -> bool:
    """True when every job runs with its Pods and ``expected`` restarts; else it raises
    what is not there yet (`wait_for` names the last one when it times out)."""
    for name, restarts in expected.items():
        status = job_status(kube, ns, name)
        children = pods(kube, ns, name)
        if (
            status.get("phase") != "Running"
            or status.get("restarts") != restarts
            or len(children) != WORKERS
        ):
            running = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "Running"), {}
            )
            raise AssertionError(
                f"{name}: {status.get('phase')}, restarts {status.get('restarts')} (want "
                f"{restarts}), Running condition {running.get('reason')}: "
                f"{running.get('message')}; Pods "
                + ", ".join(
                    f"{n} {p.status.phase} on {p.spec.node_name}"
                    for n, p in sorted(children.items())
                )
            )
    return True


def no_duplicates_or_orphans(kube: Any, ns: str, jobs: list[str]) -> None:
    all_pods = core(kube).list_namespaced_pod(ns).items
    names = [p.metadata.name for p in all_pods]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(f"{j}-worker-{i}" for j in jobs for i in range(WORKERS))
    owners = {j: job_status(kube, ns, j) for j in jobs}
    for pod in all_pods:
        (ref,) = pod.metadata.owner_references
        assert ref.name in owners
    services = sorted(s.metadata.name for s in core(kube).list_namespaced_service(ns).items)
    assert services == sorted(jobs)


def control_plane_settled(kube: Any, ns: str, placement: dict[str, Any]) -> float:
    """Seconds until a probe Pod is scheduled and Running again after a restart.

    The other components reconnect their watches with back-off; a Pod deleted before
    kube-scheduler's informers are back was once seen to leave its cache inconsistent
    ("Pod updated on a different node than previously added to. Scheduler cache is
    corrupted") and the replacement unscheduled for good -- the scheduler's problem, not the
    operator's (it had counted the disruption and created the replacement), so the tests
    disrupt only once the scheduler and KWOK are serving again."""
    start = time.monotonic()
    name = f"probe-{int(start * 1000) % 100000}"
    core(kube).create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name},
            "spec": {**placement, "containers": [{"name": "c", "image": "probe"}]},
        },
    )
    wait_for(
        lambda: core(kube).read_namespaced_pod(name, ns).status.phase == "Running",
        timeout=60,
        what="a probe Pod scheduled and Running after the restart",
    )
    core(kube).delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_for(
        lambda: name not in {p.metadata.name for p in core(kube).list_namespaced_pod(ns).items},
        timeout=30,
        what="the probe Pod gone",
    )
    return time.monotonic() - start


def total_requests(op: OperatorProcess) -> float:
    return sum(op.api_requests().values())


def delete_a_pod(kube: Any, ns: str, name: str) -> None:
    pod = core(kube).read_namespaced_pod(name, ns)
    core(kube).delete_namespaced_pod(name, ns, body=as_a_kubelet_finishes(pod))


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restart_mid_training(
    local: Cluster,
    kube: Any,
    namespace: str,
    operator: OperatorProcess,
    kwok_placement: dict[str, Any],
    component: str,
) -> None:
    jobs = ["a", "b"]
    running_jobs(kube, namespace, jobs)
    before = total_requests(operator)
    down = local.restart_component(component, down=3)
    back = time.monotonic()
    # Running jobs stay Running with no restart counted for the outage; the operator lived.
    wait_for(
        lambda: converged(kube, namespace, {j: {"disruptions": 0, "failures": 0} for j in jobs}),
        timeout=60,
        what="jobs Running, nothing counted",
    )
    assert operator.alive() and operator.starts == 1
    settled = control_plane_settled(kube, namespace, kwok_placement)
    # Its watches are back: a disruption after the outage is seen and counted once.
    delete_a_pod(kube, namespace, "a-worker-1")
    wait_for(
        lambda: converged(
            kube,
            namespace,
            {"a": {"disruptions": 1, "failures": 0}, "b": {"disruptions": 0, "failures": 0}},
        ),
        timeout=60,
        what="the disruption after the outage counted once",
    )
    recovered = time.monotonic() - back
    no_duplicates_or_orphans(kube, namespace, jobs)
    requests = total_requests(operator) - before
    print(
        f"\n{component} down {down:.1f} s; scheduler and KWOK serving {settled:.1f} s after; "
        f"the disruption then handled {recovered:.1f} s after the restart; "
        f"{requests:.0f} API requests by the operator"
    )
    assert requests <= MAX_REQUESTS_PER_FAULT_SECOND * (down + recovered), requests


def test_api_server_restart_mid_reconcile(
    local: Cluster, kube: Any, namespace: str, operator: OperatorProcess
) -> None:
    """The API server dies while the operator is creating children for many new jobs."""
    jobs = [f"j{i}" for i in range(8)]
    for name in jobs:
        create_job(kube, namespace, job_manifest(name, workers=WORKERS, backoffLimit=100))
    down = local.restart_component("kube-apiserver", down=2)
    back = time.monotonic()
    # The operator's part: every job's Pods exist (it waited for the API server, then acted).
    wait_for(
        lambda: len(pods(kube, namespace)) == WORKERS * len(jobs),
        timeout=30,
        what="every job's Pods created",
    )
    created = time.monotonic() - back
    # Running also needs kube-scheduler and KWOK, whose watches reconnect with back-off of
    # their own (measured 5 to 60 s here after a restart). Meanwhile the scheduler retries
    # binding Pods its stale cache shows unbound, every ~11 s ("pod ... is already assigned
    # to node"), until its informer catches up. A CI run once did not converge within 120 s;
    # what was missing was not recorded then (`converged` now says it on a timeout).
    wait_for(
        lambda: converged(kube, namespace, {j: {"disruptions": 0, "failures": 0} for j in jobs}),
        timeout=240,
        what="every job Running with its Pods, nothing counted",
    )
    print(
        f"\nkube-apiserver down {down:.1f} s mid-creation; all {len(jobs)} jobs' Pods created "
        f"{created:.1f} s and Running {time.monotonic() - back:.1f} s after it came back"
    )
    no_duplicates_or_orphans(kube, namespace, jobs)
    assert operator.alive() and operator.starts == 1

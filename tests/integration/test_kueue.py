"""KerasJobs as Kueue workloads, against the real Kueue manager (built from its Go module by
hack/cluster/kueue.sh, with its webhooks) and a real API server; Pods on fake KWOK nodes.

Quota is counted in cpu: every Pod requests 1 cpu, a 3-worker job needs 3.
The figures the tests print (seconds, polled every 50 ms) are in the test output (-s).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev.cluster import Cluster, create_namespace, delete_namespace, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    condition,
    create_job,
    events_for,
    install_crds,
    job_manifest,
    job_status,
    pods,
    set_container_exit,
    wait_phase,
)
from kerasjob_dev.kueue import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    cluster_queue,
    ensure_kueue,
    kueue_namespace,
    kueue_operator,
    wait_admitted,
    wl_condition,
    wl_true,
    workload_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

POLL = 0.05


@pytest.fixture
def operator(cluster: Cluster, kwok_placement: dict[str, Any]) -> OperatorProcess:
    return kueue_operator(cluster)


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    yield from kueue_namespace(kube)


def queued_job(name: str, queue: str, *, priority: str | None = None) -> dict[str, Any]:
    body = job_manifest(name, workers=3)
    body["spec"]["template"]["spec"]["containers"] = [
        {"name": "trainer", "resources": {"requests": {"cpu": "1"}}}
    ]
    labels = {QUEUE_LABEL: queue}
    if priority:
        labels[PRIORITY_LABEL] = priority
    body["metadata"]["labels"] = labels
    return body


def all_pods(kube: Any, ns: str, job: str, n: int = 3) -> dict[str, Any] | None:
    got = pods(kube, ns, job)
    live = {k: p for k, p in got.items() if p.metadata.deletion_timestamp is None}
    return live if len(live) == n else None


def no_pods(kube: Any, ns: str, job: str) -> bool:
    return not pods(kube, ns, job)


def timed(predicate: Any, what: str, timeout: float = 60) -> float:
    t0 = time.monotonic()
    wait_for(predicate, timeout=timeout, interval=POLL, what=what)
    return time.monotonic() - t0


def finish(cluster: Cluster, ns: str, job: str) -> None:
    """The chief (worker 0) exits 0: the job succeeds."""
    set_container_exit(cluster, ns, f"{job}-worker-0", 0, in_place=False)


def test_second_job_waits_for_quota_and_starts_when_the_first_finishes(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    with cluster_queue(kube, namespace, cpu="3", node_labels={"type": "kwok"}) as queue:
        t0 = time.monotonic()
        create_job(kube, namespace, queued_job("first", queue))
        wait_admitted(
            cluster, kube, namespace, "first", timeout=60, interval=POLL, operator=operator
        )
        t_admitted = time.monotonic()
        wait_for(
            lambda: all_pods(kube, namespace, "first"),
            timeout=60,
            interval=POLL,
            what="first's 3 Pods",
        )
        t_pods = time.monotonic()
        wl = workload_of(kube, namespace, "first")
        assert wl is not None
        (owner,) = wl["metadata"]["ownerReferences"]
        assert owner["kind"] == "KerasJob" and owner["name"] == "first"
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("worker", 3)]
        # The flavor's node labels are on the Pods.
        pod = next(iter(pods(kube, namespace, "first").values()))
        assert pod.spec.node_selector.get("type") == "kwok"
        wait_phase(kube, namespace, "first", "Running")
        # Kueue's waitForPodsReady reads the Workload's PodsReady, which the operator keeps.
        wait_for(
            lambda: wl_true(workload_of(kube, namespace, "first"), "PodsReady"),
            timeout=30,
            interval=POLL,
            what="first's Workload PodsReady",
        )

        create_job(kube, namespace, queued_job("second", queue))
        # First it waits for its Workload, then for Kueue's verdict on it.
        status = wait_for(
            lambda: (
                (s := job_status(kube, namespace, "second")).get("phase") == "Queued"
                and (condition(s, "Admitted") or {}).get("message", "").startswith("queued in")
                and s
            ),
            timeout=30,
            interval=POLL,
            what="second Queued with Kueue's reason",
        )
        admitted = condition(status, "Admitted")
        assert admitted is not None and admitted["status"] == "False"
        assert admitted["message"].startswith(f"queued in LocalQueue {queue}: ")
        assert "quota" in admitted["message"], admitted["message"]
        # It stays queued, with no Pods, while the first runs.
        time.sleep(3)
        assert no_pods(kube, namespace, "second")
        assert job_status(kube, namespace, "second")["phase"] == "Queued"
        assert not wl_true(workload_of(kube, namespace, "second"), "QuotaReserved")
        reasons = [e.reason for e in events_for(kube, namespace, "second")]
        assert "Queued" in reasons and "WorkloadCreated" in reasons
        # What a user sees: `kubectl get kj` and `kerasjob status` say why it waits.
        table = cluster.kubectl("get", "kj", "-n", namespace).stdout
        row = next(line for line in table.splitlines() if line.startswith("second "))
        assert "Queued" in row and f"queued in LocalQueue {queue}: " in row, table
        cli = subprocess.run(
            [sys.executable, "-m", "kerasjob", "status", "second", "-n", namespace],
            env=cluster.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "Queued" in cli and f"waiting: queued in LocalQueue {queue}: " in cli, cli
        print(f"\n{table}{cli}")

        t1 = time.monotonic()
        finish(cluster, namespace, "first")
        wait_phase(kube, namespace, "first", "Succeeded")
        wait_for(
            lambda: wl_true(workload_of(kube, namespace, "first"), "Finished"),
            timeout=30,
            interval=POLL,
            what="first's Workload Finished",
        )
        wait_for(
            lambda: all_pods(kube, namespace, "second"),
            timeout=60,
            interval=POLL,
            what="second's 3 Pods",
        )
        t2 = time.monotonic()
        status = wait_phase(kube, namespace, "second", "Running")
        assert condition(status, "Admitted")["status"] == "True"
        assert status["restarts"] == {"disruptions": 0, "failures": 0}
        print(
            f"\nKUEUE create->admitted {t_admitted - t0:.2f}s, admitted->all Pods "
            f"{t_pods - t_admitted:.2f}s; first finished->second's Pods {t2 - t1:.2f}s"
        )


def test_a_job_handed_to_multikueue_gets_its_workload_but_no_pod_and_no_status(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    """spec.managedBy: kueue.x-k8s.io/multikueue, as on a MultiKueue manager cluster: the
    operator still plays Kueue's job framework (the Workload MultiKueue dispatches to a
    worker cluster), but runs nothing and writes no status here, even once admitted."""
    with cluster_queue(kube, namespace, cpu="3", node_labels={"type": "kwok"}) as queue:
        body = queued_job("remote", queue)
        body["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        create_job(kube, namespace, body)
        wait_admitted(
            cluster, kube, namespace, "remote", timeout=60, interval=POLL, operator=operator
        )
        wl = workload_of(kube, namespace, "remote")
        assert wl is not None
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("worker", 3)]
        time.sleep(3)
        assert no_pods(kube, namespace, "remote")
        assert job_status(kube, namespace, "remote") == {}
        # The Workload is left to Kueue (MultiKueue copies the worker's): no PodsReady here.
        assert wl_condition(workload_of(kube, namespace, "remote"), "PodsReady") is None


def test_high_priority_job_preempts_and_the_victim_resumes_untouched(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    prio = {f"low-{namespace}": 100, f"high-{namespace}": 1000}
    with cluster_queue(
        kube, namespace, cpu="3", node_labels={"type": "kwok"}, priorities=prio
    ) as queue:
        create_job(kube, namespace, queued_job("low", queue, priority=f"low-{namespace}"))
        wait_for(
            lambda: all_pods(kube, namespace, "low"), timeout=60, interval=POLL, what="low's Pods"
        )
        wait_phase(kube, namespace, "low", "Running")
        low_wl = workload_of(kube, namespace, "low")
        assert low_wl is not None and low_wl["spec"]["priority"] == 100
        before = {n: p.metadata.uid for n, p in pods(kube, namespace, "low").items()}

        t0 = time.monotonic()
        create_job(kube, namespace, queued_job("high", queue, priority=f"high-{namespace}"))
        wait_for(
            lambda: wl_true(workload_of(kube, namespace, "low"), "Evicted"),
            timeout=60,
            interval=POLL,
            what="low evicted",
        )
        t_evicted = time.monotonic()
        wait_for(
            lambda: no_pods(kube, namespace, "low"),
            timeout=60,
            interval=POLL,
            what="low's Pods gone",
        )
        t_stopped = time.monotonic()
        wait_for(
            lambda: all_pods(kube, namespace, "high"), timeout=60, interval=POLL, what="high's Pods"
        )
        t_high = time.monotonic()
        status = job_status(kube, namespace, "low")
        assert status["phase"] == "Queued"
        adm = condition(status, "Admitted")
        assert adm is not None and adm["reason"] == "Evicted"
        assert "evicted by Kueue (Preempted: by KerasJob high: " in adm["message"], adm["message"]
        assert status["restarts"] == {"disruptions": 0, "failures": 0}
        evicted = wl_condition(workload_of(kube, namespace, "low"), "Evicted")
        assert evicted is not None and evicted["reason"] == "Preempted"
        reasons = [e.reason for e in events_for(kube, namespace, "low")]
        assert "Evicted" in reasons and "QuotaReleased" in reasons

        # The high job finishes: the low one is admitted again and resumes, counters untouched.
        t1 = time.monotonic()
        finish(cluster, namespace, "high")
        got = wait_for(
            lambda: all_pods(kube, namespace, "low"),
            timeout=60,
            interval=POLL,
            what="low's Pods back",
        )
        t_back = time.monotonic()
        assert set(got) == set(before) and all(
            p.metadata.uid not in before.values() for p in got.values()
        )
        status = wait_phase(kube, namespace, "low", "Running")
        assert status["restarts"] == {"disruptions": 0, "failures": 0}
        assert condition(status, "Admitted")["status"] == "True"
        for p in got.values():
            assert p.metadata.annotations["kerasjob.dev/restart-attempt"] == "0"
        print(
            f"\nKUEUE preemption: high created->low evicted {t_evicted - t0:.2f}s, "
            f"->low's Pods gone {t_stopped - t0:.2f}s, ->high's Pods {t_high - t0:.2f}s; "
            f"high finished->low's Pods back {t_back - t1:.2f}s"
        )


def test_pods_not_ready_in_time_are_evicted_by_kueue_and_nothing_is_counted(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    """Kueue's waitForPodsReady (PODS_READY_TIMEOUT on the local cluster): the flavor sends
    the Pods to nodes that do not exist, so they never become ready; Kueue evicts the
    Workload and the job is held again, its Pods gone, no restart counted."""
    nowhere = {"kerasjob.dev/test-no-such-node": namespace}
    with cluster_queue(kube, namespace, cpu="3", node_labels=nowhere) as q:
        t0 = time.monotonic()
        create_job(kube, namespace, queued_job("stuck", q))
        wait_for(
            lambda: pods(kube, namespace, "stuck"),
            timeout=30,
            interval=POLL,
            what="stuck's Pods (Pending)",
        )
        assert not wl_true(workload_of(kube, namespace, "stuck"), "PodsReady")
        wait_for(
            lambda: wl_true(workload_of(kube, namespace, "stuck"), "Evicted"),
            timeout=90,
            interval=POLL,
            what="evicted by the PodsReady timeout",
        )
        t_evicted = time.monotonic()
        evicted = wl_condition(workload_of(kube, namespace, "stuck"), "Evicted")
        assert evicted is not None and evicted["reason"] == "PodsReadyTimeout", evicted
        status = wait_for(
            lambda: (
                (s := job_status(kube, namespace, "stuck")).get("phase") == "Queued"
                and no_pods(kube, namespace, "stuck")
                and s
            ),
            timeout=30,
            interval=POLL,
            what="stuck held with no Pods",
        )
        adm = condition(status, "Admitted")
        assert adm is not None and adm["reason"] == "Evicted"
        assert "evicted by Kueue (PodsReadyTimeout: " in adm["message"], adm["message"]
        assert status["restarts"] == {"disruptions": 0, "failures": 0}
        print(f"\nKUEUE PodsReady timeout: created->evicted {t_evicted - t0:.1f}s")


def test_the_charts_rbac_is_all_the_kueue_integration_needs(
    cluster: Cluster, kube: Any, kwok_placement: dict[str, Any], tmp_path: Path
) -> None:
    """The operator as the chart runs it (kueue.enabled, one jobs namespace), with only its
    ServiceAccount's token, through admission, preemption and re-admission: every request it
    made is granted by the chart, and its log shows nothing forbidden."""
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
    ensure_kueue(cluster)
    op_ns = create_namespace(kube, "op")
    ns = create_namespace(kube, "kqrbac")  # not a namespace of the session's Kueue operator
    name = f"kj-{uuid.uuid4().hex[:6]}"
    try:
        rel = helm_install(
            cluster,
            name,
            op_ns,
            {
                "watchNamespaces": [ns],
                "kueue.enabled": True,
                "image.tag": "dev",
                "trainerImage.tag": "dev",
                "nodeSelector": NEVER_SCHEDULE,
            },
        )
        sa = token_kubeconfig(cluster, op_ns, rel.service_account, tmp_path / "kubeconfig")
        log_path = tmp_path / "operator.log"
        prio = {f"low-{ns}": 100, f"high-{ns}": 1000}
        with (
            cluster_queue(kube, ns, cpu="3", node_labels={"type": "kwok"}, priorities=prio) as q,
            operator_process(rel, sa, log_path) as run,
        ):
            create_job(kube, ns, queued_job("low", q, priority=f"low-{ns}"))
            wait_for(lambda: all_pods(kube, ns, "low"), timeout=90, interval=0.2, what="low's Pods")
            wait_phase(kube, ns, "low", "Running")
            create_job(kube, ns, queued_job("high", q, priority=f"high-{ns}"))
            wait_for(
                lambda: all_pods(kube, ns, "high"), timeout=60, interval=0.2, what="high's Pods"
            )
            finish(cluster, ns, "high")
            wait_for(
                lambda: all_pods(kube, ns, "low"), timeout=60, interval=0.2, what="low's Pods back"
            )
            status = wait_phase(kube, ns, "low", "Running")
            assert status["restarts"] == {"disruptions": 0, "failures": 0}
            requests = api_requests(run)
        for call in (
            "create workloads",
            "patch workloads/status",
            "get resourceflavors",
            "get workloadpriorityclasses",
        ):
            assert requests.get(call), (call, requests)
        allowed = granted(rel, ns)
        for call in requests:
            verb, resource = call.split(" ", 1)
            resource = resource.removesuffix(" (dry run)")  # the namespace probe's Event
            assert verb in allowed.get(resource, set()), f"{call!r} not granted by the chart"
        refused = forbidden(log_path)
        assert not refused, "\n".join(refused)
    finally:
        cluster.helm("uninstall", name, "--namespace", op_ns, check=False)
        delete_namespace(kube, ns)
        delete_namespace(kube, op_ns)

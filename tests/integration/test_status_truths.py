"""Status that tells the truth, against a real API server (Pods on KWOK nodes):

* workers that exit 0 a moment after the chief count as succeeded in replicaStatuses;
* a checkpoint claim that does not exist shows in the job's own status and events;
* the same disruption again and again with no progress (a template ``nodeName`` of a node
  that does not exist: the Pod GC deletes every Pod) is said in status and backed off,
  never counted against backoffLimit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kerasjob.planner import restart_loop
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    condition,
    core,
    create_job,
    events_for,
    isolated_namespace,
    job_manifest,
    job_status,
    pods,
    set_container_exit,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(150)]


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    yield from isolated_namespace(kube)


def test_workers_exiting_just_after_the_chief_count_as_succeeded(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    create_job(kube, namespace, job_manifest("mnist", workers=3))
    wait_phase(kube, namespace, "mnist", "Running")
    set_container_exit(cluster, namespace, "mnist-worker-0", 0, in_place=False)
    wait_phase(kube, namespace, "mnist", "Succeeded")
    # The other two exit 0 after the job is already Succeeded (inside the cleanup grace).
    set_container_exit(cluster, namespace, "mnist-worker-1", 0, in_place=False)
    set_container_exit(cluster, namespace, "mnist-worker-2", 0, in_place=False)
    status = wait_for(
        lambda: (
            (s := job_status(kube, namespace, "mnist"))["replicaStatuses"]["worker"]["succeeded"]
            == 3
            and s
        ),
        timeout=15,
        what="3 workers succeeded",
    )
    assert status["replicaStatuses"]["worker"]["failed"] == 0
    assert sorted(pods(kube, namespace, "mnist")) == [f"mnist-worker-{i}" for i in range(3)]


def test_a_missing_checkpoint_claim_shows_in_the_job(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    body = job_manifest("noclaim", workers=2)
    body["spec"]["checkpoint"] = {"volume": {"persistentVolumeClaim": {"claimName": "nope"}}}
    create_job(kube, namespace, body)

    def shown() -> dict[str, Any] | None:
        running = condition(job_status(kube, namespace, "noclaim"), "Running")
        return running if running and running["reason"] == "Unschedulable" else None

    running = wait_for(shown, timeout=30, what="condition Running False, Unschedulable")
    assert running["status"] == "False"
    assert 'persistentvolumeclaim "nope" not found' in running["message"], running
    assert job_status(kube, namespace, "noclaim")["phase"] == "Pending"
    wait_for(
        lambda: any(
            e.type == "Warning" and e.reason == "PodUnschedulable" and "nope" in e.message
            for e in events_for(kube, namespace, "noclaim")
        ),
        timeout=10,
        what="a Warning event PodUnschedulable on the KerasJob",
    )


def test_the_same_disruption_forever_backs_off_and_says_so(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    body = job_manifest("lost", workers=1, backoffLimit=0)
    body["spec"]["checkpoint"] = {"volume": {"emptyDir": {}}}
    body["spec"]["template"]["spec"]["nodeName"] = "no-such-node"
    create_job(kube, namespace, body)
    # The Pod GC deletes Pods bound to a node that does not exist (after 40 s of quarantine);
    # this test deletes them as it would, at once, with a UID precondition.
    uids: list[str] = []
    created_after: list[float] = []
    deleted_at = 0.0
    status: dict[str, Any] = {}
    for n in range(1, restart_loop.LOOP_THRESHOLD + 2):
        pod = wait_for(
            lambda: next(
                (
                    p
                    for p in pods(kube, namespace, "lost").values()
                    if p.metadata.uid not in uids and not p.metadata.deletion_timestamp
                ),
                None,
            ),
            timeout=60,
            what=f"incarnation {n} of the Pod",
        )
        if uids:
            created_after.append(time.monotonic() - deleted_at)
        uids.append(pod.metadata.uid)
        core(kube).delete_namespaced_pod(
            pod.metadata.name,
            namespace,
            body={"gracePeriodSeconds": 0, "preconditions": {"uid": pod.metadata.uid}},
        )
        deleted_at = time.monotonic()
        status = wait_for(
            lambda n=n: (
                (s := job_status(kube, namespace, "lost")).get("restarts", {}).get("disruptions")
                == n
                and s
            ),
            timeout=20,
            what=f"disruption {n} counted",
        )
    assert status["phase"] == "Restarting"
    assert status["restarts"]["failures"] == 0  # backoffLimit 0 and still going
    restarting = condition(status, "Restarting")
    assert restarting is not None and restarting["reason"] == "DisruptionLoop", status
    assert "times in a row with no training progress" in restarting["message"]
    wait_for(
        lambda: any(e.reason == "DisruptionLoop" for e in events_for(kube, namespace, "lost")),
        timeout=10,
        what="a Warning event DisruptionLoop",
    )
    # Re-created at once while below the threshold; then 10 s later, then 20 s later.
    assert created_after[0] < 5, created_after
    assert created_after[restart_loop.LOOP_THRESHOLD - 1] >= 9, created_after

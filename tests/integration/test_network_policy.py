"""The per-job NetworkPolicy against a real API server: created with the Service before the
Pods, owned by the job, garbage-collected with it; made again when deleted and patched back
when changed; none when switched off.

(Whether it is enforced is the CNI's business; that needs a real node and an enforcer.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster, create_namespace, delete_namespace, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    create_job,
    delete_job,
    events_for,
    get_job,
    install_crds,
    isolated_namespace,
    job_manifest,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    yield from isolated_namespace(kube)


def policy_of(kube: Any, ns: str, name: str) -> Any | None:
    try:
        return client.NetworkingV1Api(kube).read_namespaced_network_policy(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_each_job_gets_its_own_network_policy(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    create_job(kube, namespace, job_manifest("iso", workers=2, port=2345))
    wait_phase(kube, namespace, "iso", "Running")
    policy = policy_of(kube, namespace, "iso")
    assert policy is not None
    uid = get_job(kube, namespace, "iso")["metadata"]["uid"]
    (owner,) = policy.metadata.owner_references
    assert (owner.kind, owner.uid, owner.controller) == ("KerasJob", uid, True)
    own = {"kerasjob.dev/job-name": "iso"}
    assert policy.spec.pod_selector.match_labels == own
    assert policy.spec.policy_types == ["Ingress"]
    (tf,) = policy.spec.ingress  # the session operator is given no metrics peers
    assert [p.pod_selector.match_labels for p in tf._from] == [own]
    assert [(p.protocol, p.port) for p in tf.ports] == [("TCP", 2345)]
    # The Pods were created after it (creationTimestamp has second precision).
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace).items
    assert all(p.metadata.creation_timestamp >= policy.metadata.creation_timestamp for p in pods)

    delete_job(kube, namespace, "iso")
    wait_for(
        lambda: policy_of(kube, namespace, "iso") is None,
        timeout=30,
        what="the NetworkPolicy garbage-collected with its job",
    )


def service_of(kube: Any, ns: str, name: str) -> Any | None:
    try:
        return client.CoreV1Api(kube).read_namespaced_service(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _pod_uids(kube: Any, ns: str) -> set[str]:
    return {p.metadata.uid for p in client.CoreV1Api(kube).list_namespaced_pod(ns).items}


def _child_events(
    kube: Any, ns: str, job: str, reason: str, count: int
) -> list[tuple[str, str]] | None:
    """The job's events of ``reason`` (type, message), once there are ``count``."""
    found = sorted((e.type, e.message) for e in events_for(kube, ns, job) if e.reason == reason)
    return found if len(found) == count else None


def _recreated(kube: Any, ns: str, job: str, count: int) -> list[tuple[str, str]] | None:
    return _child_events(kube, ns, job, "ChildRecreated", count)


def test_a_deleted_service_and_network_policy_come_back_with_a_warning(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    """Deleted while the job runs (by hand, a clean-up, a GitOps prune): both are made again
    and a Warning ChildRecreated event names each; no Pod is touched (issue 36)."""
    create_job(kube, namespace, job_manifest("kept", workers=2))
    wait_phase(kube, namespace, "kept", "Running")
    old = {
        "Service": service_of(kube, namespace, "kept").metadata.uid,
        "NetworkPolicy": policy_of(kube, namespace, "kept").metadata.uid,
    }
    pods_before = _pod_uids(kube, namespace)
    client.NetworkingV1Api(kube).delete_namespaced_network_policy("kept", namespace)
    client.CoreV1Api(kube).delete_namespaced_service("kept", namespace)
    start = time.monotonic()
    try:
        back = wait_for(
            lambda: (
                (svc := service_of(kube, namespace, "kept")) is not None
                and (pol := policy_of(kube, namespace, "kept")) is not None
                and {"Service": svc.metadata.uid, "NetworkPolicy": pol.metadata.uid}
            ),
            timeout=30,
            interval=0.2,
            what="the Service and the NetworkPolicy made again",
        )
    except TimeoutError as e:
        raise AssertionError(
            f"{e}; the operator's log of {namespace}:\n" + operator.log_lines(namespace)
        ) from e
    took = time.monotonic() - start
    assert not set(back.values()) & set(old.values())  # new objects, not the old ones
    try:
        messages = wait_for(
            lambda: _recreated(kube, namespace, "kept", 2),
            timeout=30,
            interval=0.2,
            what="two ChildRecreated events",
        )
    except TimeoutError as e:
        found = [(x.type, x.reason, x.message) for x in events_for(kube, namespace, "kept")]
        raise AssertionError(
            f"{e}; the job's events: {found}\nthe operator's log of {namespace}:\n"
            + operator.log_lines(namespace)
        ) from e
    assert messages == [
        ("Warning", f"NetworkPolicy {namespace}/kept was missing; re-created"),
        ("Warning", f"Service {namespace}/kept was missing; re-created"),
    ]
    assert _pod_uids(kube, namespace) == pods_before
    assert get_job(kube, namespace, "kept")["status"]["phase"] == "Running"
    print(f"Service and NetworkPolicy deleted -> both back: {took:.2f}s")
    delete_job(kube, namespace, "kept")


def _restored(kube: Any, ns: str, job: str, count: int) -> list[tuple[str, str]] | None:
    return _child_events(kube, ns, job, "ChildRestored", count)


def test_a_loosened_network_policy_and_an_edited_service_are_patched_back(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    """A policy patched to admit everyone and a Service given another selector (issue 48):
    both patched back to the job's spec, with a Warning ChildRestored naming each; the
    same objects (not made again), no Pod touched, and what the API server defaulted is no
    difference (no second patch)."""
    create_job(kube, namespace, job_manifest("held", workers=2))
    wait_phase(kube, namespace, "held", "Running")
    net, core = client.NetworkingV1Api(kube), client.CoreV1Api(kube)
    policy, service = policy_of(kube, namespace, "held"), service_of(kube, namespace, "held")
    want = (
        net.api_client.sanitize_for_serialization(policy.spec),
        core.api_client.sanitize_for_serialization(service.spec),
    )
    pods_before = _pod_uids(kube, namespace)
    net.patch_namespaced_network_policy("held", namespace, {"spec": {"ingress": [{}]}})
    core.patch_namespaced_service("held", namespace, {"spec": {"selector": {"app": "other"}}})
    start = time.monotonic()
    try:
        wait_for(
            lambda: (
                (
                    net.api_client.sanitize_for_serialization(
                        policy_of(kube, namespace, "held").spec
                    ),
                    core.api_client.sanitize_for_serialization(
                        service_of(kube, namespace, "held").spec
                    ),
                )
                == want
            ),
            timeout=30,
            interval=0.1,
            what="the NetworkPolicy's and the Service's spec patched back",
        )
    except TimeoutError as e:
        raise AssertionError(
            f"{e}; the operator's log of {namespace}:\n" + operator.log_lines(namespace)
        ) from e
    took = time.monotonic() - start
    assert policy_of(kube, namespace, "held").metadata.uid == policy.metadata.uid
    assert service_of(kube, namespace, "held").metadata.uid == service.metadata.uid
    messages = wait_for(
        lambda: _restored(kube, namespace, "held", 2),
        timeout=30,
        interval=0.2,
        what="two ChildRestored events",
    )
    assert messages == [
        (
            "Warning",
            f"NetworkPolicy {namespace}/held had been changed (spec.ingress); "
            "restored to the job's",
        ),
        (
            "Warning",
            f"Service {namespace}/held had been changed (spec.selector); restored to the job's",
        ),
    ]
    assert _pod_uids(kube, namespace) == pods_before
    assert get_job(kube, namespace, "held")["status"]["phase"] == "Running"
    # Settled: the restored objects (defaulted by the API server) are no news.
    versions = (
        policy_of(kube, namespace, "held").metadata.resource_version,
        service_of(kube, namespace, "held").metadata.resource_version,
    )
    time.sleep(2)
    assert (
        policy_of(kube, namespace, "held").metadata.resource_version,
        service_of(kube, namespace, "held").metadata.resource_version,
    ) == versions
    assert _restored(kube, namespace, "held", 2) is not None
    print(f"NetworkPolicy loosened, Service selector edited -> both restored: {took:.2f}s")
    delete_job(kube, namespace, "held")


def test_no_network_policy_when_switched_off(cluster: Cluster, kube: Any) -> None:
    install_crds(cluster)
    ns = create_namespace(kube, prefix="nonp")
    op = OperatorProcess(cluster, (ns,), name="nonp", extra_args=("--no-network-policy",))
    try:
        op.start()
        body = job_manifest("open", workers=1)
        body["spec"]["checkpoint"] = {"volume": {"emptyDir": {}}}
        create_job(kube, ns, body)
        wait_phase(kube, ns, "open", "Running")
        assert policy_of(kube, ns, "open") is None
        assert "create networkpolicies" not in op.api_requests()
    finally:
        op.stop()
        delete_namespace(kube, ns)

"""The per-job NetworkPolicy against a real API server: created with the Service before the
Pods, owned by the job, garbage-collected with it; none when switched off.

(Whether it is enforced is the CNI's business; that needs a real node and an enforcer.)
"""

from __future__ import annotations

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

"""The test cluster itself works: CRDs, scheduling onto KWOK nodes, garbage collection,
our kubectl/helm binaries, and (locally) the pinned Kubernetes version."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster, wait_for

pytestmark = pytest.mark.cluster

KUBE_GO_MOD = Path(__file__).resolve().parents[2] / "hack" / "cluster" / "gomod" / "kube" / "go.mod"


def pinned_kube_version() -> str:
    match = re.search(r"^require k8s\.io/kubernetes (v\S+)$", KUBE_GO_MOD.read_text(), re.M)
    assert match, f"no k8s.io/kubernetes pin in {KUBE_GO_MOD}"
    return match.group(1)


def crd_manifest(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def test_crd_and_custom_object_roundtrip(kube: Any, namespace: str) -> None:
    group = f"{namespace}.test.kerasjob.dev"  # unique per test run: no clash with leftovers
    ext = client.ApiextensionsV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    ext.create_custom_resource_definition(crd_manifest(group))
    try:
        wait_for(
            lambda: any(
                c.type == "Established" and c.status == "True"
                for c in (
                    ext.read_custom_resource_definition(f"widgets.{group}").status.conditions or []
                )
            ),
            timeout=30,
            what="the CRD to be Established",
        )
        body = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        }
        # The API server may need a moment after Established before it serves the new type.
        wait_for(
            lambda: custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", body),
            timeout=30,
            what="the custom object to be created",
        )
        got = custom.get_namespaced_custom_object(group, "v1", namespace, "widgets", "w1")
        assert got["spec"] == {"size": 3}
        # The schema is enforced.
        bad = {**body, "metadata": {"name": "w2"}, "spec": {"size": 0}}
        with pytest.raises(ApiException) as err:
            custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", bad)
        assert err.value.status == 422
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_pod_on_kwok_node_runs(kube: Any, namespace: str, kwok_placement: dict[str, Any]) -> None:
    core = client.CoreV1Api(kube)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fake"},
        "spec": {
            "containers": [{"name": "c", "image": "example.invalid/none:1"}],
            **kwok_placement,
        },
    }
    core.create_namespaced_pod(namespace, pod)
    running = wait_for(
        lambda: (p := core.read_namespaced_pod("fake", namespace)).status.phase == "Running" and p,
        timeout=30,
        what="the Pod on a KWOK node to be Running",
    )
    node = core.read_node(running.spec.node_name)
    assert node.metadata.labels.get("type") == "kwok"
    assert running.status.pod_ip


def test_pod_without_toleration_stays_off_kwok_nodes(
    cluster: Cluster, kube: Any, namespace: str
) -> None:
    if not cluster.local:
        pytest.skip("only the local cluster's node set is known")
    core = client.CoreV1Api(kube)
    # Selects the KWOK nodes but does not tolerate their taint: it must stay Pending. (The
    # selector also keeps it off the real node.)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [{"name": "c", "image": "example.invalid/none:1"}],
        },
    }
    core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> bool:
        p = core.read_namespaced_pod("plain", namespace)
        assert not p.spec.node_name, f"scheduled onto {p.spec.node_name}"
        cond = {c.type: c for c in p.status.conditions or []}.get("PodScheduled")
        return cond is not None and cond.status == "False" and cond.reason == "Unschedulable"

    wait_for(unschedulable, timeout=30, what="the scheduler to report the Pod Unschedulable")
    message = {c.type: c for c in core.read_namespaced_pod("plain", namespace).status.conditions}[
        "PodScheduled"
    ].message
    assert "untolerated taint" in message, message


def test_garbage_collection_deletes_dependents(kube: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    owner = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}, "data": {"k": "v"}}
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "child", "ownerReferences": [ref]}, "data": {}}
    )
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(child_gone, timeout=30, what="the garbage collector to delete the dependent")


def test_service_account_token(kube: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    req = core.create_namespaced_service_account_token(
        "default", namespace, {"spec": {"audiences": [], "expirationSeconds": 600}}
    )
    assert req.status.token.count(".") == 2  # a signed JWT
    review = client.AuthenticationV1Api(kube).create_token_review(
        {"spec": {"token": req.status.token}}
    )
    assert review.status.authenticated
    assert review.status.user.username == f"system:serviceaccount:{namespace}:default"


def test_kubectl_and_helm_work(cluster: Cluster, namespace: str) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.")
    assert version["clientVersion"]["gitVersion"].startswith("v1.")
    out = cluster.kubectl("get", "serviceaccount", "default", "-n", namespace, "-o", "name").stdout
    assert out.strip() == "serviceaccount/default"
    assert cluster.helm("version", "--short").stdout.startswith("v3.")
    assert cluster.helm("list", "-n", namespace, "-q").stdout.strip() == ""
    if cluster.local:
        assert cluster.tool("kubectl").startswith(str(cluster.bin_dir))
        assert cluster.tool("helm").startswith(str(cluster.bin_dir))


def test_pinned_kubernetes_version(cluster: Cluster, kube: Any) -> None:
    if not cluster.local:
        pytest.skip("the pin applies to the local control plane only")
    pinned = pinned_kube_version()
    assert client.VersionApi(kube).get_code().git_version == pinned
    client_version = json.loads(cluster.kubectl("version", "--client", "-o", "json").stdout)
    assert client_version["clientVersion"]["gitVersion"] == pinned


CLUSTER_SCRIPTS = Path(__file__).resolve().parents[2] / "hack" / "cluster"


def test_env_sh_puts_our_binaries_first(cluster: Cluster) -> None:
    if not cluster.local:
        pytest.skip("hack/cluster/env.sh describes the local cluster only")
    script = f'eval "$({CLUSTER_SCRIPTS}/env.sh)"; command -v kubectl helm; echo "$KUBECONFIG"'
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    assert out == [
        str(cluster.bin_dir / "kubectl"),
        str(cluster.bin_dir / "helm"),
        str(cluster.kubeconfig),
    ]


def test_gang_scheduling_api_is_served_and_a_cluster_with_other_gates_is_not_reused(
    cluster: Cluster, kube: Any
) -> None:
    """up.sh turns Kubernetes 1.36's alpha gang scheduling on by default (KUBE_FEATURE_GATES,
    KUBE_RUNTIME_CONFIG), and --check fails for a running cluster started with other values
    (up.sh then restarts it instead of reusing it)."""
    if not cluster.local:
        pytest.skip("hack/cluster/up.sh manages the local cluster only")
    found = client.ApisApi(kube).get_api_versions()
    versions = {
        v.group_version for g in found.groups if g.name == "scheduling.k8s.io" for v in g.versions
    }
    if os.environ.get("KUBE_RUNTIME_CONFIG", None) == "":
        assert "scheduling.k8s.io/v1alpha2" not in versions
    else:
        assert "scheduling.k8s.io/v1alpha2" in versions
    check = [str(CLUSTER_SCRIPTS / "up.sh"), "--check"]
    same = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert same.returncode == 0, same.stderr
    other = os.environ.get("KUBE_FEATURE_GATES", "GenericWorkload=true") + ",Other=true"
    changed = subprocess.run(
        check,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBE_FEATURE_GATES": other},
    )
    assert changed.returncode == 1


def test_up_sh_refuses_a_busy_port(cluster: Cluster, tmp_path: Path) -> None:
    if not cluster.local:
        pytest.skip("hack/cluster/up.sh manages the local cluster only")
    # A second cluster with its own state dir but the running cluster's ports must not start.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERASJOB_CLUSTER_")}
    env["KERASJOB_RUN"] = str(tmp_path / "run")
    up = [str(CLUSTER_SCRIPTS / "up.sh")]
    proc = subprocess.run(
        up, capture_output=True, text=True, env={**env, "KERASJOB_NODE": "0"}, timeout=60
    )
    assert proc.returncode == 1
    assert re.search(r"port \d+ \(\w+_PORT\) is already in use", proc.stderr), proc.stderr
    assert not (tmp_path / "run" / "cluster").exists()
    # With a real node, a second one is refused first (one per machine), in one line.
    proc = subprocess.run(up, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "another real node runs on this machine" in proc.stderr
    assert not (tmp_path / "run" / "cluster").exists()

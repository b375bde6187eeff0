"""Fixtures of the end-to-end tests: kerasjob run the way users run it.

``deployment`` (session): on the local cluster, the operator and trainer images are built
from this checkout (``hack/images/build.sh``, cached) and imported into the real node
(containerd + kubelet); on any cluster, the operator chart is ``helm install``ed with the
operator image, in-cluster, with the chart's ServiceAccount and RBAC, watching one namespace
made for this session, and uninstalled at the end. With ``KERASJOB_TEST_CLUSTER=current``
(kind, through ``hack/kind/e2e.sh``) the images must already be on the nodes.

``images`` (session): just the images on the nodes (the node tests need no operator).

``node_stores`` (session): versitygw (S3) and fake-gcs-server (GCS), real servers built from
their Go modules, listening on the real node's address so that its Pods reach them (local
cluster only: kind's nodes cannot reach this machine's servers) (`training_run.bucket_job`
makes a job keep its checkpoints there).

``kj``: a dict-based API client (:class:`kerasjob_dev.synckube.Kube`) for the cluster under test.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import Cluster
from kerasjob_dev.objectstores import Stores, running
from kerasjob_dev.synckube import ApiError, Kube
from kerasjob_dev.testing.training_run import node_ip


@dataclass(frozen=True)
class Deployment:
    """The installed operator and the namespace whose KerasJobs it handles."""

    cluster: Cluster
    kube: Kube
    namespace: str
    release: str
    operator_namespace: str

    def operator_logs(self, tail: int = 200) -> str:
        proc = self.cluster.kubectl(
            "logs",
            "-n",
            self.operator_namespace,
            f"deployment/{self.release}-kerasjob-operator",
            f"--tail={tail}",
            check=False,
        )
        return proc.stdout + proc.stderr


def _create_namespace(kube: Kube, name: str) -> None:
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})


def _delete_namespace(kube: Kube, name: str) -> None:
    with contextlib.suppress(ApiError):  # already gone
        kube.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="session")
def images(cluster: Cluster) -> localdeploy.Images | None:
    """The operator and trainer images are on the cluster's nodes (built and imported into
    the real node here; on another cluster, loaded by whoever made it, e.g. hack/kind):
    the exported archives, or None when someone else loaded them."""
    if not cluster.local:
        return None
    built = localdeploy.build_images()
    load_s = localdeploy.load_images(built)
    print(f"\nimages built/confirmed in {built.seconds:.1f} s, loaded in {load_s:.1f} s")
    return built


@pytest.fixture(scope="session")
def deployment(cluster: Cluster, images: localdeploy.Images | None) -> Iterator[Deployment]:
    kube = Kube(str(cluster.kubeconfig))
    suffix = uuid.uuid4().hex[:6]
    jobs_ns, op_ns, release = f"e2e-{suffix}", f"kerasjob-e2e-{suffix}", f"e2e-{suffix}"
    _create_namespace(kube, jobs_ns)
    try:
        localdeploy.install_operator(
            cluster.tool("helm"),
            str(cluster.kubeconfig),
            release=release,
            namespace=op_ns,
            watch_namespaces=[jobs_ns],
        )
        yield Deployment(cluster, kube, jobs_ns, release, op_ns)
    finally:
        try:
            localdeploy.uninstall_operator(
                cluster.tool("helm"), str(cluster.kubeconfig), release=release, namespace=op_ns
            )
        finally:
            _delete_namespace(kube, jobs_ns)
            _delete_namespace(kube, op_ns)


@pytest.fixture
def kj(cluster: Cluster) -> Kube:
    return Kube(str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def node_stores(
    deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stores]:
    if not deployment.cluster.local:
        pytest.skip("the object stores run on this machine, which kind's Pods cannot reach")
    with running(tmp_path_factory.mktemp("objectstores"), host=node_ip(deployment.kube)) as s:
        yield s

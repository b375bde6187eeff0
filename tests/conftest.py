"""Shared fixtures: the cluster the tests run against (see dev/kerasjob_dev/cluster.py).

Fixtures
--------
``cluster`` (session)
    :class:`kerasjob_dev.cluster.Cluster` -- the local control plane of ``hack/cluster``, started
    on first use and stopped at the end of the session (also on Ctrl-C/SIGTERM), or, with
    ``KERASJOB_TEST_CLUSTER=current``, the cluster of ``KUBECONFIG`` used unchanged.
``kube`` (session)
    A ``kubernetes.client.ApiClient`` configured for that cluster.
``namespace`` (function)
    A fresh namespace ``t-<8 hex>`` (its default ServiceAccount exists), deleted afterwards.
``kwok_placement`` (function)
    A copy of :data:`kerasjob_dev.cluster.KWOK_POD_PLACEMENT`; merge it into a Pod spec to put the
    Pod on a fake KWOK node (skips the test when the cluster has no node labelled type=kwok).

Tests that need a cluster are marked ``@pytest.mark.cluster``. They are skipped only when
``KERASJOB_SKIP_CLUSTER=1``; otherwise the cluster must come up or they error.

Import helpers as ``from kerasjob_dev.cluster import KWOK_POD_PLACEMENT, wait_for`` (the dev
tooling shared by the tests, the demo and the benchmarks: ``dev/kerasjob_dev``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from kerasjob_dev import cluster as support

SKIP_REASON = "KERASJOB_SKIP_CLUSTER=1: tests that need a Kubernetes cluster are skipped"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not support.cluster_skipped():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster() -> Iterator[support.Cluster]:
    """The cluster under test (see the module docstring)."""
    if support.cluster_skipped():
        pytest.skip(SKIP_REASON)
    if support.wants_current_cluster():
        yield support.current_cluster()
        return
    try:
        yield support.acquire_local()
    finally:
        support.release_local()


@pytest.fixture(scope="session")
def kube(cluster: support.Cluster) -> Any:
    """``kubernetes.client.ApiClient`` for the cluster under test."""
    return cluster.api_client()


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace ``t-<8 hex>`` with its default ServiceAccount; deleted afterwards."""
    name = support.create_namespace(kube)
    try:
        yield name
    finally:
        support.delete_namespace(kube, name)


@pytest.fixture
def kwok_placement(cluster: support.Cluster) -> dict[str, Any]:
    """Pod spec fields for a fake KWOK node; skips when the cluster has no KWOK nodes."""
    if not cluster.local:
        nodes = cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").stdout
        if not nodes.strip():
            pytest.skip("this cluster has no fake KWOK nodes (label type=kwok)")
    return copy.deepcopy(support.KWOK_POD_PLACEMENT)

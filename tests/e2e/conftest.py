"""Fixtures of the end-to-end tests: the local node agent next to the cluster.

``localnode`` (module scope): the agent (``python -m kerasjob.localnode``) registered as Node
``kerasjob-local`` on the ``cluster`` under test, started for the first test of a module that
uses it and stopped after its last one (leaving no process, network namespace or bridge), so
Pods of other tests never land on it. (Module, not package, scope: tests/e2e is no Python
package, and pytest would keep a "package" fixture to the end of the session.) Starting it
takes about a second. Skipped, with the reason, when the cluster is not the local control
plane or the machine lacks root / iproute2.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kerasjob.localnode import netns
from kerasjob.localnode.kube import Kube
from kerasjob.localnode.runner import AgentProcess, leftover_namespaces, log_file
from support.cluster import REPO_ROOT, Cluster


class LocalNode:
    """The running agent and what tests need from it."""

    def __init__(self, agent: AgentProcess, state_dir: Path, kube: Kube) -> None:
        self.agent, self.state_dir, self.kube = agent, state_dir, kube
        self.name = agent.node

    def log_path(self, namespace: str, pod: str, container: str = "trainer") -> Path:
        return log_file(self.state_dir, namespace, pod, container)

    def log(self, namespace: str, pod: str, container: str = "trainer") -> str:
        path = self.log_path(namespace, pod, container)
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def localnode(cluster: Cluster) -> Iterator[LocalNode]:
    if not cluster.local:
        pytest.skip("the local node agent runs only next to the local control plane")
    problems = netns.missing_prerequisites()
    if problems:
        pytest.skip("local node agent: " + "; ".join(problems))
    run_dir = Path(os.environ.get("KERASJOB_RUN", REPO_ROOT / ".run"))
    state_dir = run_dir / "localnode"
    agent = AgentProcess(
        str(cluster.kubeconfig), run_dir / "e2e" / "localnode-agent.log", state_dir=state_dir
    )
    agent.start()
    try:
        yield LocalNode(agent, state_dir, Kube(str(cluster.kubeconfig)))
    finally:
        agent.stop()
    assert leftover_namespaces() == [], "the agent left network namespaces behind"


@pytest.fixture
def kj(cluster: Cluster) -> Kube:
    """A dict-based API client (the agent's own) for the cluster under test."""
    return Kube(str(cluster.kubeconfig))

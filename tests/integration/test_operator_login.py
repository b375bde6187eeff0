"""`kerasjob --kubeconfig FILE run` logs kopf's watches in with FILE, not $KUBECONFIG."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev.cluster import Cluster
from kerasjob_dev.harness import (
    OperatorProcess,
    create_job,
    install_crds,
    isolated_namespace,
    job_manifest,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


class ExplicitKubeconfigOperator(OperatorProcess):
    def __init__(self, cluster: Cluster, kubeconfig: Path, namespace: str, decoy: Path) -> None:
        # $KUBECONFIG names a file that does not exist: only --kubeconfig can log in.
        super().__init__(cluster, (namespace,), name="login", env={"KUBECONFIG": str(decoy)})
        self.kubeconfig = kubeconfig

    def argv(self) -> list[str]:
        argv = super().argv()
        run = argv.index("run")
        return [*argv[:run], "--kubeconfig", str(self.kubeconfig), *argv[run:]]


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    yield from isolated_namespace(kube)


def test_kubeconfig_flag_is_used_for_watches(
    cluster: Cluster, kube: Any, namespace: str, kwok_placement: dict[str, Any], tmp_path: Path
) -> None:
    install_crds(cluster)
    with ExplicitKubeconfigOperator(
        cluster, Path(cluster.kubeconfig), namespace, tmp_path / "missing-kubeconfig"
    ) as operator:
        create_job(kube, namespace, job_manifest("login", workers=2))
        status = wait_phase(kube, namespace, "login", "Running")
        assert status["replicaStatuses"]["worker"]["active"] == 2, operator.log_tail()

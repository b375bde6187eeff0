"""`kerasjob convert` on the TFJob corpus (Kubeflow's examples and docs): every converted
KerasJob is accepted by the real API server (server-side dry run: CRD schema, defaults and
CEL rules), through the SDK and through `kerasjob submit --dry-run`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kerasjob.cli import app as cli
from kerasjob.cli.convert import convert_tfjob
from kerasjob.sdk import KerasJobClient
from kerasjob_dev.cluster import Cluster
from kerasjob_dev.harness import install_crds

pytestmark = pytest.mark.cluster

CORPUS = sorted((Path(__file__).parents[1] / "data" / "tfjobs").glob("*.yaml"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_converted_tfjob_passes_server_dry_run(
    cluster: Cluster, namespace: str, path: Path, tmp_path: Path, capsys
) -> None:
    install_crds(cluster)
    job, _ = convert_tfjob(yaml.safe_load(path.read_text()))
    job["metadata"]["namespace"] = namespace
    stored = KerasJobClient(namespace, kubeconfig=str(cluster.kubeconfig)).create(job, dry_run=True)
    assert stored.spec.workers == job["spec"]["workers"]

    # The same through the CLI: convert to a file, submit it as a dry run.
    converted = tmp_path / "kerasjob.yaml"
    assert cli.main(["convert", str(path)]) == 0
    converted.write_text(capsys.readouterr().out)
    assert (
        cli.main(
            [
                "--kubeconfig",
                str(cluster.kubeconfig),
                "submit",
                "--dry-run",
                "-f",
                str(converted),
                "-n",
                namespace,
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.endswith("created (server dry run)\n")

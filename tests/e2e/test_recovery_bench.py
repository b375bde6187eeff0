"""bench/recovery.py's quick mode runs on this session's real node (issue 26: every bench's
quick mode runs in `make test-bench`, so none rots unnoticed).

The bench is run as users run it, a subprocess of its own: it joins the local cluster this
session holds (its lease keeps the cluster up for the session), loads the images the session
built (already there: skipped), Helm-installs its own operator watching its own namespace,
trains examples/mnist.yaml on 2 workers and disrupts worker 1 twice (SIGTERM, then SIGKILL of
its container). The figures are `make bench`'s; this checks that it completes, writes its
JSON, and that what it records holds: worker 0 kept its Pod, worker 1's was re-created, each
disruption counted once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, Cluster

pytestmark = [
    pytest.mark.bench,  # make test-bench, not make test
    pytest.mark.cluster,
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]


def test_recovery_bench_quick(
    cluster: Cluster, images: localdeploy.Images | None, tmp_path: Path
) -> None:
    if not cluster.local:
        pytest.skip("bench/recovery.py disrupts worker 1 through the local node's containerd")
    out = tmp_path / "recovery.json"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "recovery.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    print(proc.stdout[-1500:])
    assert result["quick"] and [d["kind"] for d in result["disruptions"]] == ["sigterm", "sigkill"]
    for d in result["disruptions"]:
        assert d["chief_pod_kept"] and d["victim_recreated"], d
        assert d["first_step_s"] >= d["resumed_s"] > 0, d
        assert {"python", "tensorflow", "cluster", "restore", "first_step"} <= set(d["phases_s"])
    assert result["chief_pod_kept_every_time"]
    assert result["counted"]["status_restarts"] == {"disruptions": 2, "failures": 0}

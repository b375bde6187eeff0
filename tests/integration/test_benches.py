"""The cluster benchmarks run (their quick modes) on this session's cluster: the figures are
`make bench`/`bench-scale`/`bench-gang`/`bench-tfjob`'s; this only checks that each bench
completes and writes its JSON, so they cannot rot unnoticed (issue 26).

Each bench runs as a subprocess with ``KERASJOB_TEST_CLUSTER=current`` and this session's
kubeconfig: it uses the cluster as is (starts and stops nothing) and runs its own operator on
namespaces of its own. bench/compare_tfjob.py's quick mode then measures KerasJobs alone (the
Kubeflow training-operator is not built here: a cold build from its Go module takes minutes);
`make bench-tfjob` runs both sides. bench/recovery.py needs the real node and the built images,
as tests/e2e does: its quick mode runs there (tests/e2e/test_recovery_bench.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev import benchpage
from kerasjob_dev.cluster import Cluster

pytestmark = [
    pytest.mark.bench,  # make test-bench, not make test
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

ROOT = Path(__file__).resolve().parents[2]


def _quick(cluster: Cluster, script: str, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    env = cluster.env()
    env["KERASJOB_TEST_CLUSTER"] = "current"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_operator_bench_quick(cluster: Cluster, kwok_placement: Any, tmp_path: Path) -> None:
    result, _ = _quick(cluster, "operator.py", tmp_path / "operator.json")
    assert result["quick"] and [b["jobs"] for b in result["bursts"]] == [1, 10]
    assert all(b["complete"] for b in result["bursts"]), result["bursts"]
    assert result["disruption"]["rounds"] == 3
    assert result["operator_peak_rss_mib"] > 0
    assert "\n| 10 | " in benchpage.render_operator(result)  # the docs' table (make bench-docs)


def test_scale_bench_quick(cluster: Cluster, kwok_placement: Any, tmp_path: Path) -> None:
    result, _ = _quick(cluster, "scale.py", tmp_path / "scale.json")
    assert result["quick"] and [lv["jobs"] for lv in result["levels"]] == [5]
    level = result["levels"][0]
    assert {
        "create_to_all_running_s",
        "disrupt_to_all_running_s",
        "finish_to_all_succeeded_s",
        "delete_to_all_pods_gone_s",
        "operator_peak_rss_mib",
    } <= set(level)
    # Survivors restart in place: one Pod created per job; exiting (no supervisor): all 8.
    assert level["pods_created"]["disrupt"] == 5, level["pods_created"]
    assert level["pods_created"]["disrupt_survivors_exit"] == 5 * 8, level["pods_created"]
    assert level["disrupt_survivors_exit_to_all_running_s"] > 0
    assert "\n| 5 | " in benchpage.render_scale(result)  # the docs' table (make bench-docs)


def test_gang_bench_quick(cluster: Cluster, kwok_placement: Any, tmp_path: Path) -> None:
    result, _ = _quick(cluster, "gang.py", tmp_path / "gang.json")
    assert result["quick"] and [r["gang"] for r in result["runs"]] == [True, False]
    on = result["runs"][0]
    assert on["succeeded"] == on["jobs"] == 6, on  # with gangs every job gets its turn


def test_compare_tfjob_bench_quick(cluster: Cluster, kwok_placement: Any, tmp_path: Path) -> None:
    result, stdout = _quick(cluster, "compare_tfjob.py", tmp_path / "compare_tfjob.json")
    assert result["quick"] and result["jobs"] == 5
    assert "quick: skipping the TFJob side" in stdout and result["tfjob_skipped"]
    assert list(result["runs"]) == ["kerasjob"] and result["runs"]["kerasjob"]["complete"]

"""bench/trainer.py runs (its quick mode): the figures are `make bench`'s; this only checks that
the bench completes and writes its JSON, so it cannot rot unnoticed (issue 26: it crashed at
its second measurement for months)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kerasjob_dev import benchpage

pytestmark = [
    pytest.mark.bench,  # make test-bench, not make test
    pytest.mark.tf,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

ROOT = Path(__file__).resolve().parents[2]


def test_trainer_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "trainer.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "trainer.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["quick"]
    assert {"none", "mwms-1", "mwms-2", "pipelines", "recovery", "environment"} <= set(result)
    assert "backup_overhead_percent" in result["mwms-2"]
    assert {
        "stream",
        "indexed",
        "indexed-deterministic",
        "pipeline_alone_batches_per_second",
    } <= set(result["pipelines"])
    assert result["recovery"]["survivor_exit_code"] == 43
    # the benchmarks page's table is written from exactly this JSON (make bench-docs)
    assert result["run"]["command"].startswith("python bench/trainer.py --quick")
    assert "| MultiWorkerMirroredStrategy, 2 workers | 2 |" in benchpage.render_trainer(result)

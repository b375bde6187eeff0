"""bench/strategies.py runs (its quick mode): the figures are `make bench`'s; this checks that
the bench completes, writes its JSON and that the strategies page renders it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kerasjob_dev import benchpage, benchrun

pytestmark = [
    pytest.mark.bench,  # make test-bench, not make test
    pytest.mark.tf,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]


def test_strategies_bench_quick(tmp_path: Path) -> None:
    result = benchrun.run_quick("strategies.py", tmp_path / "strategies.json", timeout=900)
    assert result["quick"] and result["run"]["command"].startswith("python bench/strategies.py")
    assert result["mwms_2_workers"]["steps_per_s"] > 0
    assert result["ps_2_workers_1_ps"]["steps_per_s"] > 0
    loss = result["ps_worker_loss"]
    assert loss["before"] and loss["during"] and loss["chief_restarts"] == 0
    assert len(result["ps_loss"]["seconds_to_first_step"]) == 1
    page = benchpage.render_strategies(result)
    assert "| ParameterServerStrategy, chief + 2 workers + 1 ps |" in page

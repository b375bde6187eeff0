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
    # --quick: mnist-mlp only (no "models"), 200 steps: 9 windows of 20 after 20 of warm-up
    assert "models" not in result
    for key, per_step in (("mwms_2_workers", 128), ("ps_2_workers_1_ps", 64)):
        r = result[key]
        assert r["windows"] == 9 and r["examples_per_step"] == per_step, r
        assert r["steps_per_s"] > 0 and r["examples_per_s"] > 0, r
        assert abs(r["examples_per_s"] - r["steps_per_s"] * per_step) <= per_step, r
    loss = result["ps_worker_loss"]
    assert loss["before"] and loss["during"] and loss["chief_restarts"] == 0
    (seconds,) = result["ps_loss"]["seconds_to_first_step"]
    assert seconds > 0 and result["ps_loss"]["median_s"] == seconds
    (redone,) = result["ps_loss"]["steps_redone"]
    assert redone >= 0  # from the last backup
    page = benchpage.render_strategies(result)
    assert "| mnist-mlp | ParameterServerStrategy, chief + 2 workers + 1 ps |" in page
    assert "mnist-cnn" not in page

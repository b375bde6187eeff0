"""The benchmarks page's blocks are written from bench/results/*.json (kerasjob_dev.benchpage):
a block whose JSON exists is rewritten, headed by what it was measured with; one whose JSON is
absent is kept; a --quick result or one without its `run` is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kerasjob_dev import benchpage

RUN = {
    "when": "2026-11-26T13:02:42Z",
    "command": "python bench/scale.py --jobs 10",
    "cpus": 2,
    "cpu_model": "Some CPU",
    "python": "3.11.7",
    "git": {"commit": "0123456789abcdef", "dirty": False},
    "loadavg_start": [0.21, 1.4, 2.0],
    "loadavg_end": [6.87, 3.1, 2.5],
    "wall_s": 123.9,
}
LEVEL = {
    "jobs": 1000,
    "create_to_all_running_s": 240.4,
    "disrupt_to_all_running_s": 73.0,
    "disrupt_survivors_exit_to_all_running_s": 301.0,
    "pods_created": {"create": 8000, "disrupt": 1000, "disrupt_survivors_exit": 8000},
    "finish_to_all_succeeded_s": 20.25,
    "delete_to_all_pods_gone_s": 593.0,
    "operator_peak_rss_mib": 196.2,
    "operator_cpu_seconds_per_job": 0.145,
    "api_requests_per_job": 33.0,
    "reconciles_per_job": 39.1,
}
PAGE = """# Scale

Prose stays.

<!-- bench:scale -->
old figures
<!-- /bench:scale -->

<!-- bench:operator -->
kept: no operator.json
<!-- /bench:operator -->
"""


def _write(results: Path, name: str, data: dict[str, Any]) -> None:
    results.mkdir(exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(data))


def test_a_block_is_rewritten_from_its_json_and_others_kept(tmp_path: Path) -> None:
    _write(tmp_path / "results", "scale", {"quick": False, "run": RUN, "levels": [LEVEL]})
    (tmp_path / "results" / "scale.svg").write_text("<svg/>")  # the bench's plot
    docs = tmp_path / "docs"
    (docs / "operations").mkdir(parents=True)
    page = docs / "operations" / "scale.md"
    page.write_text(PAGE)
    assert benchpage.main(["--results", str(tmp_path / "results"), "--docs", str(docs)]) == 0
    text = page.read_text()
    assert "old figures" not in text and "Prose stays." in text
    assert "kept: no operator.json" in text
    assert (
        "Measured 2026-11-26 13:02 UTC by `python bench/scale.py --jobs 10` (124 s), commit "
        "`0123456789`, on 2 CPU cores (Some CPU, Python 3.11.7); load average (1 min) 0.2 at "
        "the start, 6.9 at the end." in text
    )
    assert "![scale: the table's figures per level](scale.svg)" in text
    assert (docs / "operations" / "scale.svg").read_text() == "<svg/>"
    row = (
        "| 1,000 | 240.4 s | 73.0 s (1,000 Pods) | 301.0 s (8,000 Pods) | 20.2 s | 593.0 s | "
        "196 MiB | 145 ms | 33.0 | 39.1 |"
    )
    assert row in text
    # idempotent: a second run writes the same page
    assert benchpage.main(["--results", str(tmp_path / "results"), "--docs", str(docs)]) == 0
    assert page.read_text() == text


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"quick": True, "run": RUN, "levels": [LEVEL]}, "is a --quick run"),
        ({"quick": False, "levels": [LEVEL]}, "has no `run`"),
    ],
)
def test_refused_results(
    tmp_path: Path, data: dict[str, Any], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / "results", "scale", data)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "scale.md"
    page.write_text(PAGE)
    argv = ["--results", str(tmp_path / "results"), "--docs", str(tmp_path / "docs")]
    assert benchpage.main(argv) == 1
    assert error in capsys.readouterr().err
    assert page.read_text() == PAGE


def test_a_block_of_no_known_bench_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(benchpage.BenchPageError, match="bench:nosuch"):
        benchpage.rewrite("<!-- bench:nosuch -->\nx\n<!-- /bench:nosuch -->\n", tmp_path)


def test_every_block_on_the_site_has_a_renderer() -> None:
    blocks = [
        m.group("name")
        for page in sorted(benchpage.DOCS.rglob("*.md"))
        for m in benchpage.BLOCK.finditer(page.read_text())
    ]
    assert blocks and set(blocks) <= set(benchpage.RENDERERS)


def test_a_scale_run_from_before_the_survivors_exit_phase_says_not_run() -> None:
    old = {k: v for k, v in LEVEL.items() if not k.startswith(("pods_", "disrupt_survivors"))}
    table = benchpage.render_scale({"run": RUN, "levels": [old]})
    assert "| 1,000 | 240.4 s | 73.0 s | not run | 20.2 s |" in table


def test_strategies_renders_each_model_measured() -> None:
    def speed(steps: float, per_step: int) -> dict[str, Any]:
        return {"steps_per_s": steps, "examples_per_step": per_step, "examples_per_s": 0}

    result = {
        "run": RUN,
        "mwms_2_workers": speed(29.0, 128),
        "ps_2_workers_1_ps": speed(66.5, 64),
        "models": {
            "mnist-cnn": {"mwms_2_workers": speed(25.8, 128), "ps_2_workers_1_ps": speed(39.9, 64)}
        },
        "ps_worker_loss": {"before": 1.0, "during": None, "after": 2.0, "gone_s": 15.0},
        "ps_loss": {"median_s": 21.0, "seconds_to_first_step": [21.0], "steps_redone": [50]},
    }
    page = benchpage.render_strategies(result)
    assert "| mnist-mlp | MultiWorkerMirroredStrategy, 2 workers | 29.0 |" in page
    assert "| mnist-cnn | ParameterServerStrategy, chief + 2 workers + 1 ps | 39.9 |" in page
    # A result of a quick run (no "models") renders mnist-mlp alone.
    assert "mnist-cnn" not in benchpage.render_strategies(
        {k: v for k, v in result.items() if k != "models"}
    )

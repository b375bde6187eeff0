"""The benchmarks' figures on the documentation site, written from bench/results/*.json.

    python -m kerasjob_dev.benchpage      # (make bench-docs) rewrite every block whose
                                          # JSON is in bench/results/
    python -m kerasjob_dev.benchpage --results DIR --docs DIR

A page marks a generated block with a pair of comments naming a bench:

    <!-- bench:trainer -->
    ...
    <!-- /bench:trainer -->

and this module replaces what is between them with the tables of bench/results/trainer.json,
headed by what they were measured with: the UTC time, the command, its wall time, the commit,
the machine and the load average (the JSON's ``run``, `kerasjob_dev.benchrun`); a plot the
bench drew (bench/results/scale.svg) is copied beside the page and shown. A block
whose JSON is absent is left as it is, so one bench can be re-run and its block refreshed
alone. A ``--quick`` result is refused: its sizes only show that the bench runs. The prose
around a block is the page's own; the figures are only ever in the blocks.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- bench:(?P<name>[a-z0-9_]+) -->\n)(.*?)(<!-- /bench:(?P=name) -->)", re.S)


class BenchPageError(Exception):
    """A result the page cannot be written from."""


# ---------------------------------------------------------------------------- helpers
def _n(x: float, digits: int = 1) -> str:
    """A figure with thousands separators: 36222 -> 36,222; 0.25 -> 0.25."""
    if isinstance(x, int) or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def _s(x: float) -> str:
    return f"{x:.3f} s" if x < 0.1 else f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def measured(run: dict[str, Any]) -> str:
    """One sentence: when, by what command, at which commit, on what, under what load."""
    when = datetime.strptime(run["when"], "%Y-%m-%dT%H:%M:%SZ").strftime("%Y-%m-%d %H:%M")
    dirty = " (with uncommitted changes)" if run["git"]["dirty"] else ""
    start, end = run["loadavg_start"][0], run["loadavg_end"][0]
    return (
        f"Measured {when} UTC by `{run['command']}` ({run['wall_s']:.0f} s), commit "
        f"`{run['git']['commit'][:10]}`{dirty}, on {run['cpus']} CPU cores "
        f"({run['cpu_model']}, Python {run['python']}); load average (1 min) {start:.1f} at "
        f"the start, {end:.1f} at the end."
    )


# ---------------------------------------------------------------------------- renderers
def render_trainer(r: dict[str, Any]) -> str:
    modes = (
        ("none", "no strategy", 1),
        ("mwms-1", "MultiWorkerMirroredStrategy, 1 worker", 1),
        ("mwms-2", "MultiWorkerMirroredStrategy, 2 workers", 2),
    )
    throughput = _table(
        ("strategy", "processes", "steps/s", "samples/s"),
        [
            (label, str(n), _n(r[m]["steps_per_second"]), _n(r[m]["samples_per_second"]))
            for m, label, n in modes
        ],
    )
    p = r["pipelines"]
    pipelines = _table(
        ("input pipeline", "steps/s (median)", "vs stream (median of the rounds' ratios)"),
        [
            (
                label,
                _n(p[v]["steps_per_second"]),
                f"{p[v]['vs_stream']:.3f}x" if v != "stream" else "1",
            )
            for v, label in (
                ("stream", "stream (shuffle buffer)"),
                ("indexed", "step-indexed"),
                ("indexed-deterministic", "step-indexed, `deterministic: true`"),
            )
        ],
    )
    alone = p["pipeline_alone_batches_per_second"]
    rec = r["recovery"]
    two = r["mwms-2"]
    return "\n".join(
        [
            measured(r["run"]) + f" TensorFlow {r['environment']['tensorflow']}.",
            "",
            throughput,
            "",
            f"A backup every {two['save_freq']} steps costs "
            f"{two['backup_overhead_percent']:.1f}% of those steps' time (2 workers).",
            "",
            f"Input pipelines, 1-worker MWMS, {p['rounds']} rounds of {p['window_steps']} "
            "steps per variant back to back in one process:",
            "",
            pipelines,
            "",
            f"The pipelines alone (no training step): stream {_n(alone['stream'])}, "
            f"step-indexed {_n(alone['indexed'])} batches/s.",
            "",
            f"Recovery: after a SIGKILL of one of 2 workers the survivor exits "
            f"{rec['survivor_exit_code']} in {_s(rec['kill_to_survivor_exit_s'])}; the restarted "
            f"group's first step comes {_s(rec['kill_to_first_resumed_step_s'])} after the "
            f"kill, {_s(rec['restart_to_first_step_s'])} of it from the restart (TensorFlow "
            f"start-up, cluster, restore); {rec['steps_redone']} steps redone (saveFreq "
            f"{rec['save_freq']}).",
        ]
    )


def render_keras3(r: dict[str, Any]) -> str:
    rates = {(t["model"], t["processes"]): t for t in r["throughput"]}
    throughput = _table(
        ("model", "processes", "steps/s", "samples/s"),
        [
            (t["model"], str(t["processes"]), _n(t["steps_per_s"]), _n(t["samples_per_s"]))
            for t in r["throughput"]
        ],
    )
    scaling = ", ".join(
        f"{m} {rates[(m, 2)]['samples_per_s'] / rates[(m, 1)]['samples_per_s']:.2f}x"
        for m in dict.fromkeys(t["model"] for t in r["throughput"])
        if (m, 1) in rates and (m, 2) in rates
    )
    disruptions = _table(
        ("backend", "median", "each (s)", "steps redone"),
        [
            (
                d["backend"],
                _s(d["median_downtime_s"]),
                ", ".join(f"{x:.1f}" for x in d["downtime_s"]),
                ", ".join(str(x) for x in d["steps_redone"]),
            )
            for d in r["recovery"]
        ],
    )
    phases = ("framework_import_s", "cluster_s", "restore_s", "first_step_s", "total_s")
    startup = _table(
        ("backend", "import", "cluster formed", "restore", "first step", "in all"),
        [
            (d["backend"], *(_s(d["startup"][k]) for k in phases))
            for d in r["recovery"]
            if d["startup"]
        ],
    )
    count = len(r["recovery"][0]["downtime_s"])
    lines = [
        measured(r["run"]),
        "",
        "Steps/s of backend `jax`, batchSizePerReplica 64 (the global batch grows with the "
        "processes: samples/s is the comparable figure):",
        "",
        throughput,
        "",
        f"Samples/s of two processes over one: {scaling}.",
        "",
        f"Disruption → first resumed step, {count} SIGTERMs in a row to worker 1 of a "
        "2-process mnist-mlp job, from the chief's goodput ledger:",
        "",
        disruptions,
        "",
        "The start-up of one process (its `kerasjob: startup` line, first generation):",
        "",
        startup,
    ]
    if r["image_bytes"]:
        sizes = ", ".join(
            f"`{image}` {size / 1e6:,.0f} MB" for image, size in sorted(r["image_bytes"].items())
        )
        lines += ["", f"Images as exported: {sizes}."]
    return "\n".join(lines)


def render_operator(r: dict[str, Any]) -> str:
    def ms(d: dict[str, float], p99: bool = True) -> str:
        return _s(d["median_s"]) + (f" / {_s(d['p99_s'])}" if p99 else "")

    rows = [
        (
            str(b["jobs"]),
            ms(b["apply_to_pods_created"]),
            ms(b["apply_to_running"]),
            ms(b["pod_created_to_bound"]),
            ms(b["pod_bound_to_running"], p99=False),
            f"{b['pods_created_per_s']:.0f} / {b['pods_bound_per_s']:.0f}",
            _n(b["api_requests_per_job"]),
            f"{1000 * b['operator_cpu_seconds_per_job']:.0f} ms",
            f"{b['loadavg_1m_before']:.1f}",
        )
        for b in r["bursts"]
    ]
    table = _table(
        (
            f"jobs x {r['workers_per_job']} workers",
            "apply → all Pods created, median / p99",
            "apply → Running, median / p99",
            "Pod created → bound, median / p99",
            "bound → Running, median",
            "Pods created / bound per s",
            "API requests per job",
            "operator CPU per job",
            "load before",
        ),
        rows,
    )
    d = r["disruption"]["disruption_to_replacement_created"]
    return "\n".join(
        [
            measured(r["run"]),
            "",
            table,
            "",
            f"A worker Pod deleted → its replacement created: median {_s(d['median_s'])}, "
            f"p99 {_s(d['p99_s'])} over {d['n']} deletions. Operator peak RSS "
            f"{r['operator_peak_rss_mib']:.0f} MiB.",
        ]
    )


def _recovered(level: dict[str, Any], phase: str, key: str) -> str:
    """A disrupt phase's seconds and the Pods it created ("not run": a run from before it)."""
    if key not in level:
        return "not run"
    created = (level.get("pods_created") or {}).get(phase)
    return _s(level[key]) + (f" ({created:,} Pods)" if created is not None else "")


def render_scale(r: dict[str, Any]) -> str:
    rows = [
        (
            f"{lv['jobs']:,}",
            _s(lv["create_to_all_running_s"]),
            _recovered(lv, "disrupt", "disrupt_to_all_running_s"),
            _recovered(lv, "disrupt_survivors_exit", "disrupt_survivors_exit_to_all_running_s"),
            _s(lv["finish_to_all_succeeded_s"]),
            _s(lv["delete_to_all_pods_gone_s"]),
            f"{lv['operator_peak_rss_mib']:.0f} MiB",
            f"{1000 * lv['operator_cpu_seconds_per_job']:.0f} ms",
            _n(lv["api_requests_per_job"]),
            _n(lv["reconciles_per_job"]),
        )
        for lv in r["levels"]
    ]
    return "\n".join(
        [
            measured(r["run"]),
            "",
            _table(
                (
                    "jobs x 8 workers",
                    "create → all Running",
                    "one worker each deleted → all Running (Pods created)",
                    "the same, survivors exit (no supervisor)",
                    "chiefs exit 0 → all Succeeded",
                    "delete → all Pods gone",
                    "operator peak RSS",
                    "CPU per job",
                    "API requests per job",
                    "reconciles per job",
                ),
                rows,
            ),
        ]
    )


def render_strategies(r: dict[str, Any]) -> str:
    """bench/strategies.py: all-reduce vs parameter servers, and what a loss costs."""
    mwms, ps = r["mwms_2_workers"], r["ps_2_workers_1_ps"]
    loss, ps_loss = r["ps_worker_loss"], r["ps_loss"]

    def rate(x: float | None) -> str:
        return _n(x) if x is not None else "-"

    # mnist-mlp at the top level; the other models (the full run's mnist-cnn) under "models".
    models = {"mnist-mlp": (mwms, ps)} | {
        name: (m["mwms_2_workers"], m["ps_2_workers_1_ps"])
        for name, m in (r.get("models") or {}).items()
    }
    rows = []
    for name, (a, b) in models.items():
        rows += [
            [name, "MultiWorkerMirroredStrategy, 2 workers", _n(a["steps_per_s"]),
             str(a["examples_per_step"]), _n(a["examples_per_s"])],
            [name, "ParameterServerStrategy, chief + 2 workers + 1 ps", _n(b["steps_per_s"]),
             str(b["examples_per_step"]), _n(b["examples_per_s"])],
        ]  # fmt: skip
    speed = _table(["model (CPU)", "strategy", "steps/s", "examples/step", "examples/s"], rows)
    disruption = _table(
        ["parameter servers", "figure"],
        [
            ["steps/s before a worker's loss", rate(loss["before"])],
            [f"steps/s while it is gone ({loss['gone_s']:.0f} s)", rate(loss["during"])],
            ["steps/s once it is back", rate(loss["after"])],
            ["a ps's SIGKILL -> the group's first resumed step, median", _s(ps_loss["median_s"])],
            ["  each", ", ".join(_s(s) for s in ps_loss["seconds_to_first_step"])],
            ["  steps redone (from the last backup)", ", ".join(map(str, ps_loss["steps_redone"]))],
        ],
    )  # fmt: skip
    return f"{measured(r['run'])}\n\n{speed}\n\n{disruption}\n"


#: The plots some benches draw beside their JSON (bench/results/NAME.svg).
PLOTS = {"scale": "scale.svg"}

RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "trainer": render_trainer,
    "keras3": render_keras3,
    "operator": render_operator,
    "scale": render_scale,
    "strategies": render_strategies,
}


# ---------------------------------------------------------------------------- the pages
def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("quick"):
        raise BenchPageError(f"{path} is a --quick run: its figures only show that it runs")
    if "run" not in data:
        raise BenchPageError(f"{path} has no `run` (when, command, load): re-run the bench")
    return data


def rewrite(text: str, results: Path, page_dir: Path | None = None) -> tuple[str, list[str]]:
    """`text` with each block whose result exists rewritten; the names rewritten. A bench's
    plot (PLOTS) is copied into `page_dir` beside the page and shown below its table."""
    done: list[str] = []

    def one(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in RENDERERS:
            raise BenchPageError(f"no renderer for block bench:{name}")
        data = load(results, name)
        if data is None:
            return m.group(0)
        done.append(name)
        body = RENDERERS[name](data)
        plot = results / PLOTS[name] if name in PLOTS else None
        if plot is not None and plot.exists() and page_dir is not None:
            shutil.copyfile(plot, page_dir / plot.name)
            body += f"\n\n![{name}: the table's figures per level]({plot.name})"
        return f"{m.group(1)}{body}\n{m.group(4)}"

    return BLOCK.sub(one, text), done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    try:
        for page in sorted(args.docs.rglob("*.md")):
            text = page.read_text()
            new, done = rewrite(text, args.results, page.parent)
            if done and new != text:
                page.write_text(new)
            for name in done:
                print(f"{page.relative_to(args.docs)}: bench:{name} from {name}.json")
    except BenchPageError as e:
        print(f"benchpage: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

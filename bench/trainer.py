"""Trainer benchmarks: throughput per strategy, input pipeline and determinism, backup
overhead, kill -> first resumed step.

    python bench/trainer.py          # (make bench) prints figures, writes
                                     # bench/results/trainer.json
    python bench/trainer.py --quick  # small sizes (QUICK): checks that it runs, ~1-2 min

Figures (mnist-mlp on the MNIST sample, batchSizePerReplica 64, CPU):
- steps/s for no strategy, 1-worker MWMS and 2-worker MWMS (2 processes on 127.0.0.1):
  median over windows of WINDOW steps after a warm-up;
- pipelines (1-worker MWMS): the stream pipeline (shuffle buffer, the trainer's pipeline
  before the step-indexed one) vs the step-indexed pipeline, with `deterministic` off and
  on; ROUNDS rounds of one WINDOW-step window per variant back to back in one process, the
  median rate of each and the median per-round indexed/stream ratio (the bar: >= 0.95
  with determinism off);
- backup overhead: extra time of a step that writes the BackupAndRestore backup, in % of
  the time of saveFreq ordinary steps, at the default saveFreq (100), 2-worker MWMS;
- recovery: SIGKILL one of 2 real trainers, time until the survivor exits (43), and until
  the first step of the restarted group (restart issued as soon as the survivor exits,
  i.e. no scheduler in the way), plus steps redone.
Runs in a few minutes; the machine's load average is recorded next to the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

WARMUP = 20
WINDOW = 25
STEPS = 320
SAVE_FREQ = 100
BATCH = 64
ROUNDS = 15
PIPELINE_WARMUP = 10
PIPELINE_ALONE_BATCHES = 1000
PIPELINES = ("stream", "indexed", "indexed-deterministic")
RECOVERY_STEPS = 400
RECOVERY_KILL_AT = 150
RESULTS = ROOT / "bench" / "results" / "trainer.json"
#: --quick: the same measurements at small sizes; the figures only show that it runs.
QUICK = {
    "WARMUP": 5,
    "WINDOW": 10,
    "STEPS": 60,
    "SAVE_FREQ": 20,
    "ROUNDS": 2,
    "PIPELINE_WARMUP": 5,
    "PIPELINE_ALONE_BATCHES": 100,
    "RECOVERY_STEPS": 120,
    "RECOVERY_KILL_AT": 50,
}


quick = False


def use_quick_sizes() -> None:
    global quick
    quick = True
    globals().update(QUICK)


# ---------------------------------------------------------------- one measured process
def measure(mode: str, backup_dir: str | None) -> dict[str, Any]:
    """Run in a child process: fit STEPS steps, return per-step intervals (seconds)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras

    from kerasjob_contract.trainer_config import DatasetConfig
    from kerasjob_trainer.runtimes.tf_keras import cluster as cl
    from kerasjob_trainer.runtimes.tf_keras import data, models, preemption
    from kerasjob_trainer.runtimes.tf_keras.strategy import build_strategy

    info = cl.parse_tf_config(os.environ.get("TF_CONFIG"))
    strategy = tf.distribute.get_strategy() if mode == "none" else build_strategy(info)
    global_batch = BATCH * strategy.num_replicas_in_sync
    with strategy.scope():
        model = models.build_model("mnist-mlp", {}, 1e-3).model
    examples = data.load_examples(DatasetConfig(), (784,), 10, 42)
    dataset = data.make_train_input(examples, global_batch, 42, 0)
    ends: list[float] = []
    saves: list[int] = []

    class Clock(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            ends.append(time.perf_counter())
            if backup_dir and len(ends) % SAVE_FREQ == 0:
                saves.append(len(ends))  # the backup ran in this step's batch-end hooks

    callbacks: list[Any] = [Clock()]
    if backup_dir:
        # Listed first, so a step's backup lands inside that step's interval.
        callbacks.insert(0, preemption.backup_and_restore(backup_dir, SAVE_FREQ, lambda: None))
    model.fit(dataset, epochs=1, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)
    intervals = [b - a for a, b in itertools.pairwise(ends)]  # interval i ends step i+2
    return {
        "intervals": intervals,
        "saves": saves,
        "global_batch": global_batch,
        "chief": info.is_chief,
    }


def _window_rates(intervals: list[float], skip: set[int]) -> list[float]:
    steady = [t for i, t in enumerate(intervals) if i >= WARMUP and i + 2 not in skip]
    return [
        WINDOW / sum(steady[i : i + WINDOW]) for i in range(0, len(steady) - WINDOW + 1, WINDOW)
    ]


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    saves = set(result["saves"])
    rates = _window_rates(result["intervals"], saves)
    out: dict[str, Any] = {
        "steps_per_second": round(statistics.median(rates), 1),
        "windows": [round(r, 1) for r in rates],
        "samples_per_second": round(statistics.median(rates) * result["global_batch"]),
        "global_batch": result["global_batch"],
    }
    if saves:
        steady = [
            t for i, t in enumerate(result["intervals"]) if i >= WARMUP and i + 2 not in saves
        ]
        step = statistics.median(steady)
        extra = [result["intervals"][s - 2] - step for s in sorted(saves)]
        out["backup_seconds"] = [round(e, 4) for e in extra]
        out["backup_overhead_percent"] = round(
            100 * statistics.median(extra) / (SAVE_FREQ * step), 2
        )
        out["save_freq"] = SAVE_FREQ
    return out


# ---------------------------------------------------------------- orchestration
def _child(mode: str, env: dict[str, str], backup_dir: str | None, out: Path) -> Any:
    cmd = [sys.executable, __file__, "--measure", mode, "--out", str(out)]
    if quick:
        cmd.append("--quick")
    if backup_dir:
        cmd += ["--backup-dir", backup_dir]
    return subprocess.Popen(
        cmd,
        env={**os.environ, **env, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def throughput(tmp: Path) -> dict[str, Any]:
    from kerasjob_dev.trainer_procs import free_ports, tf_config

    figures: dict[str, Any] = {}
    for mode in ("none", "mwms-1"):
        out = tmp / f"{mode}.json"
        assert _child(mode, {"TF_CONFIG": ""}, None, out).wait(300) == 0, mode
        figures[mode] = summarize(json.loads(out.read_text()))
        print(f"  {mode:8s} {figures[mode]['steps_per_second']:7.1f} steps/s", flush=True)
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    outs = [tmp / f"mwms-2-{i}.json" for i in range(2)]
    procs = [
        _child(
            "mwms-2", {"TF_CONFIG": tf_config(cluster, "worker", i)}, str(tmp / "backup"), outs[i]
        )
        for i in range(2)
    ]
    assert [p.wait(300) for p in procs] == [0, 0]
    figures["mwms-2"] = summarize(json.loads(outs[0].read_text()))
    print(
        f"  mwms-2   {figures['mwms-2']['steps_per_second']:7.1f} steps/s, backup every "
        f"{SAVE_FREQ} steps: {figures['mwms-2']['backup_overhead_percent']}% of step time",
        flush=True,
    )
    return figures


def measure_pipelines() -> dict[str, Any]:
    """In a child process: ROUNDS rounds of one window per variant, back to back.

    One model, one process: each variant's window runs right after the others', so a
    change in the machine's load (shared machines) hits all of them alike; the figure is
    the median over rounds of each variant's rate, and the median of the per-round ratios.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras

    from kerasjob_contract.trainer_config import DatasetConfig
    from kerasjob_trainer.runtimes.tf_keras import data, models
    from kerasjob_trainer.runtimes.tf_keras.cluster import LOCAL
    from kerasjob_trainer.runtimes.tf_keras.strategy import build_strategy

    strategy = build_strategy(LOCAL)
    with strategy.scope():
        model = models.build_model("mnist-mlp", {}, 1e-3).model
    examples = data.load_examples(DatasetConfig(), (784,), 10, 42)
    inputs = {
        "stream": lambda: data.make_stream_dataset(examples, BATCH, 42),
        "indexed": lambda: data.make_train_input(examples, BATCH, 42, 0),
    }
    ends: list[float] = []

    class Clock(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            ends.append(time.perf_counter())

    rates: dict[str, list[float]] = {p: [] for p in PIPELINES}
    for _ in range(ROUNDS + 1):  # round 0 warms every variant up (tracing), not counted
        for variant in PIPELINES:
            pipeline, _, deterministic = variant.partition("-")
            if deterministic:
                tf.config.experimental.enable_op_determinism()
            ends.clear()
            model.fit(
                inputs[pipeline](),
                epochs=1,
                steps_per_epoch=PIPELINE_WARMUP + WINDOW,
                callbacks=[Clock()],
                verbose=0,
            )
            if deterministic:
                # Not public API; the bench only, so both modes share one process.
                from tensorflow.python.framework import config as tf_framework_config

                tf_framework_config.disable_op_determinism()
            rates[variant].append(WINDOW / (ends[-1] - ends[-1 - WINDOW]))
    # The pipelines alone (no training step): batches/s one pipeline produces on its own.
    alone: dict[str, float] = {}
    for pipeline, make in inputs.items():
        ds = make()  # distributed as fit distributes it
        ds = (
            strategy.distribute_datasets_from_function(ds, ds.input_options)
            if pipeline == "indexed"
            else strategy.experimental_distribute_dataset(ds)
        )
        it = iter(ds)
        for _ in range(50):
            next(it)
        began = time.perf_counter()
        for _ in range(PIPELINE_ALONE_BATCHES):
            next(it)
        alone[pipeline] = PIPELINE_ALONE_BATCHES / (time.perf_counter() - began)
    return {"rates": {p: r[1:] for p, r in rates.items()}, "alone": alone}


def pipelines(tmp: Path) -> dict[str, Any]:
    """Stream vs indexed pipeline, determinism off/on (see `measure_pipelines`)."""
    out = tmp / "pipelines.json"
    assert _child("pipelines", {"TF_CONFIG": ""}, None, out).wait(600) == 0
    measured = json.loads(out.read_text())
    rates = measured["rates"]
    figures: dict[str, Any] = {
        p: {"steps_per_second": round(statistics.median(r), 1), "windows": [round(x, 1) for x in r]}
        for p, r in rates.items()
    }
    for p in PIPELINES[1:]:
        ratios = [a / b for a, b in zip(rates[p], rates["stream"], strict=True)]
        figures[p]["vs_stream"] = round(statistics.median(ratios), 3)
    figures["rounds"] = ROUNDS
    figures["window_steps"] = WINDOW
    figures["pipeline_alone_batches_per_second"] = {
        p: round(r) for p, r in measured["alone"].items()
    }
    for p in PIPELINES:
        ratio = f" ({figures[p]['vs_stream']:.3f}x stream)" if "vs_stream" in figures[p] else ""
        print(f"  {p:22s} {figures[p]['steps_per_second']:7.1f} steps/s{ratio}", flush=True)
    print(
        "  the pipelines alone (no training): "
        + ", ".join(
            f"{p} {r} batches/s" for p, r in figures["pipeline_alone_batches_per_second"].items()
        ),
        flush=True,
    )
    return figures


def recovery(tmp: Path) -> dict[str, Any]:
    from kerasjob_dev.trainer_procs import RESUMED_LINE, STEP_LINE, Group

    config = {
        "epochs": 1,
        "stepsPerEpoch": RECOVERY_STEPS,
        "saveFreq": SAVE_FREQ,
        "logEverySteps": 1,
        "batchSizePerReplica": BATCH,
    }
    g = Group(tmp / "recovery", config)
    (tmp / "recovery").mkdir()
    try:
        survivor, victim = g.start()
        victim.wait_for_step(RECOVERY_KILL_AT, 300)
        killed = time.monotonic()
        victim.signal(signal.SIGKILL)
        code = survivor.wait(30)
        survivor_exit = time.monotonic() - killed
        last = max(survivor.steps())
        restarted = time.monotonic()
        chief, _ = g.start()
        first = None
        while first is None:
            lines = chief.lines()
            if any(RESUMED_LINE.match(ln) for ln in lines) and any(
                STEP_LINE.match(ln) for ln in lines
            ):
                first = time.monotonic()
            elif chief.proc.poll() is not None:
                raise RuntimeError(chief.tail())
            elif time.monotonic() - restarted > 300:
                raise RuntimeError("no resumed step in 300 s")
            else:
                time.sleep(0.02)
        resumed = next(int(m.group(1)) for ln in chief.lines() if (m := RESUMED_LINE.match(ln)))
        assert g.wait_all(300) == [0, 0], g.logs()
    finally:
        g.stop()
    return {
        "survivor_exit_code": code,
        "kill_to_survivor_exit_s": round(survivor_exit, 3),
        "restart_to_first_step_s": round(first - restarted, 2),
        "kill_to_first_resumed_step_s": round(first - killed, 2),
        "steps_redone": last - resumed,
        "save_freq": SAVE_FREQ,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--measure")
    p.add_argument("--out", help=f"where the figures go (default {RESULTS.relative_to(ROOT)})")
    p.add_argument("--quick", action="store_true", help="small sizes: checks that it runs")
    p.add_argument("--backup-dir")
    p.add_argument("--only", choices=("pipelines",), help="run only these figures")
    args = p.parse_args()
    if args.quick:
        use_quick_sizes()
    if args.measure == "pipelines":
        Path(args.out).write_text(json.dumps(measure_pipelines()))
        os._exit(0)
    if args.measure:
        result = measure(args.measure, args.backup_dir)
        if result["chief"]:
            Path(args.out).write_text(json.dumps(result))
        os._exit(0)  # skip MWMS teardown: the figures are written
    from kerasjob_dev import benchrun

    stamp = benchrun.stamp()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kerasjob-bench-") as tmp:
        figures: dict[str, Any] = {}
        if not args.only:
            print("trainer throughput (mnist-mlp, MNIST sample, CPU):", flush=True)
            figures = throughput(Path(tmp))
        print(
            f"input pipelines (1-worker MWMS, {ROUNDS} rounds of {WINDOW} steps each):", flush=True
        )
        figures["pipelines"] = pipelines(Path(tmp))
        if not args.only:
            print("recovery (2 workers, SIGKILL one):", flush=True)
            figures["recovery"] = recovery(Path(tmp))
            r = figures["recovery"]
            print(
                f"  survivor exited {r['survivor_exit_code']} after "
                f"{r['kill_to_survivor_exit_s']}s; first resumed step "
                f"{r['kill_to_first_resumed_step_s']}s after the kill "
                f"({r['restart_to_first_step_s']}s of it TensorFlow start-up); "
                f"{r['steps_redone']} steps redone (saveFreq {SAVE_FREQ})",
                flush=True,
            )
    import tensorflow as tf

    figures["environment"] = {
        "tensorflow": tf.__version__,
        "cpus": os.cpu_count(),
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
        "runtime_s": round(time.monotonic() - started, 1),
    }
    figures["run"] = benchrun.finish(stamp, started)
    figures["quick"] = quick
    results = (
        Path(args.out)
        if args.out
        else RESULTS.with_name("trainer-pipelines.json")
        if args.only
        else RESULTS
    )
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {results} ({figures['environment']['runtime_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

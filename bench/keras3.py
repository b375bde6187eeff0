"""Keras 3 on JAX vs tf-keras: throughput, disruption cost, start-up, image sizes.

    python bench/keras3.py          # (make bench) figures; bench/results/keras3.json
    python bench/keras3.py --quick  # jax's recovery only (1 disruption): checks that it runs

Every figure comes from real trainer processes (`python -m kerasjob_trainer`, the operator's
environment, 127.0.0.1), as in tests/trainer:
- steps/s of 1 and 2 processes, mnist-mlp and mnist-cnn, backend jax, batchSizePerReplica 64
  (the global batch grows with the processes: samples/s is the comparable figure): the
  median rate over windows of WINDOW steps after WARMUP steps, from the trainers' own
  per-step audit times (KERASJOB_AUDIT_DIR);
- disruption -> first resumed step, DISRUPTIONS SIGTERMs in a row to worker 1 of a 2-process
  job, jax vs tensorflow: each disruption's `downtime_s` from the chief's goodput ledger (last
  step before it -> first step after it; the restart is issued as soon as every process has
  exited: no scheduler in the way);
- start-up of one process, import to first step, from its `kerasjob: startup` line
  (framework import, cluster formed, restore, first step);
- image sizes: the exported archives of `make images IMAGE_VARIANTS="cpu jax-cpu"`, where built.
The machine's load average is recorded next to the figures.

--quick measures jax's recovery only, one disruption (TensorFlow's recovery is measured by
bench/trainer.py and bench/recovery.py): no throughput, no tensorflow row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kerasjob_contract as contract
from kerasjob_dev import benchrun, localdeploy
from kerasjob_dev.trainer_procs import Group

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "keras3.json"
STARTUP = re.compile(contract.LOG_STARTUP_RE, re.M)
TIMEOUT = 600.0


def _median_rate(times: list[float], warmup: int, window: int) -> float:
    """Median steps/s over consecutive windows of `window` steps after `warmup`."""
    t = times[warmup:]
    rates = [
        window / (t[i + window] - t[i])
        for i in range(0, len(t) - window, window)
        if t[i + window] > t[i]
    ]
    return statistics.median(rates) if rates else float("nan")


def throughput(model: str, processes: int, steps: int, warmup: int, window: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        audit = Path(tmp) / "audit"
        config = {
            "model": model,
            "epochs": 1,
            "stepsPerEpoch": steps,
            "saveFreq": steps * 2,
            "batchSizePerReplica": 64,
            "logEverySteps": steps,
        }
        g = Group(
            Path(tmp),
            config,
            workers=processes,
            backend="jax",
            env={"KERASJOB_AUDIT_DIR": str(audit)},
        )
        try:
            g.start()
            codes = g.wait_all(TIMEOUT)
            if codes != [0] * processes:
                raise RuntimeError(f"{model} x{processes}: exit codes {codes}\n{g.logs()}")
            times = [r["time"] for r in g.audit_records("steps-worker0.jsonl")]
        finally:
            g.stop()
    rate = _median_rate(times, warmup, window)
    return {
        "model": model,
        "processes": processes,
        "steps_per_s": round(rate, 1),
        "samples_per_s": round(rate * 64 * processes),
    }


def disruptions(backend: str, count: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "model": "mnist-mlp",
            "epochs": 1,
            "stepsPerEpoch": steps,
            "saveFreq": 50,
            "batchSizePerReplica": 64,
            "logEverySteps": 1,
        }
        g = Group(Path(tmp), config, workers=2, backend=backend)
        startup: dict[str, float] = {}
        try:
            for i in range(count):
                trainers = g.start()
                trainers[0].wait_for_step(0, TIMEOUT)  # its first step: training runs
                time.sleep(1.0)
                if not startup:
                    m = STARTUP.search(trainers[0].text())
                    if m:
                        startup = {
                            "framework_import_s": float(m.group(3)),
                            "cluster_s": float(m.group(4)),
                            "restore_s": float(m.group(5)),
                            "first_step_s": float(m.group(6)),
                            "total_s": float(m.group(7)),
                        }
                trainers[1].signal(signal.SIGTERM)
                codes = g.wait_all(TIMEOUT)
                if codes != [42, 42]:
                    raise RuntimeError(f"{backend}: disruption {i + 1}: {codes}\n{g.logs()}")
            g.start()
            if g.wait_all(TIMEOUT) != [0, 0]:
                raise RuntimeError(f"{backend}: the last generation failed\n{g.logs()}")
            ledger = json.loads((g.ckpt / "goodput" / "ledger.json").read_text())
        finally:
            g.stop()
    downtimes = [round(e["downtime_s"], 2) for e in ledger["events"]]
    return {
        "backend": backend,
        "downtime_s": downtimes,
        "median_downtime_s": round(statistics.median(downtimes), 2),
        "steps_redone": [e["steps_redone"] for e in ledger["events"]],
        "startup": startup,
    }


def image_sizes() -> dict[str, int]:
    out = {}
    for image, stem in localdeploy.ARCHIVES.items():
        path = localdeploy.export_dir() / f"{stem}.tar"
        if path.exists() and image != localdeploy.OPERATOR_IMAGE:
            out[image] = path.stat().st_size
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="jax's recovery only, 1 disruption: checks it runs"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    quick = args.quick
    count = 1 if quick else 5
    stamp = benchrun.stamp()
    began = time.monotonic()
    started = time.time()
    load = os.getloadavg()[0]
    # --quick: jax's recovery only (TensorFlow's: bench/trainer.py and bench/recovery.py).
    models = () if quick else ("mnist-mlp", "mnist-cnn")
    rates = [throughput(m, n, steps=400, warmup=50, window=50) for m in models for n in (1, 2)]
    for r in rates:
        print(
            f"jax {r['model']:10s} x{r['processes']}: {r['steps_per_s']:7.1f} steps/s "
            f"{r['samples_per_s']:7d} samples/s"
        )
    # Each generation trains ~1 s before its SIGTERM, and JAX agrees on the step ~1 s later.
    backends = ("jax",) if quick else ("jax", "tensorflow")
    recovery = [disruptions(b, count, 400 * (count + 1)) for b in backends]
    for r in recovery:
        print(
            f"{r['backend']:10s} disruption -> first resumed step: median "
            f"{r['median_downtime_s']} s of {r['downtime_s']}; steps redone "
            f"{r['steps_redone']}; start-up {r['startup']}"
        )
    sizes = image_sizes()
    for image, size in sizes.items():
        print(f"{image}: {size / 1e6:.0f} MB")
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "quick": quick,
        "load_average_1m": round(load, 2),
        "cpus": os.cpu_count(),
        "throughput": rates,
        "recovery": recovery,
        "image_bytes": sizes,
        "seconds": round(time.time() - started, 1),
    }
    result["run"] = benchrun.finish(stamp, began)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""All-reduce or parameter servers: what each trains per second, and what a disruption costs.

    python bench/strategies.py          # prints figures, writes bench/results/strategies.json
    python bench/strategies.py --quick  # mnist-mlp only, 200 steps: checks that it runs

Real trainer processes on 127.0.0.1 (`kerasjob_dev.trainer_procs`, as in tests/trainer),
mnist-mlp (and for throughput mnist-cnn) on the MNIST sample, batchSizePerReplica 64, CPU, a
step line every 10 steps (the chief's; timed as this script sees it appear, polled every 20 ms):

- steps/s and examples/s of MultiWorkerMirroredStrategy with 2 workers (a step: both
  workers' batches, 128 examples) and of ParameterServerStrategy with a chief, 2 workers and
  1 ps (a step: one worker's batch, 64 examples): median over windows of WINDOW steps after
  WARMUP steps; for mnist-mlp (the JSON's top level) and each of OTHER_MODELS (mnist-cnn,
  under "models"; not in --quick);
- a parameter-server job through a worker's loss: steps/s before it, while worker 1 is gone
  (SIGKILLed, started again GONE_SECONDS later, as the operator re-creates a Pod) and after
  it is back (once its server serves, plus SETTLE_SECONDS);
- a parameter-server job through a ps's loss: seconds from the SIGKILL to the first step of
  the restarted group (every process started again as soon as the chief has left, as the
  supervisor restarts the survivors in place and the operator re-creates the ps), and the
  steps redone (from the last backup); PS_LOSSES in a row.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "strategies.json"
STEP = re.compile(r"kerasjob: step (\d+)/")

WARMUP = 100
WINDOW = 50
STEPS = 1000
GONE_SECONDS = 15.0
SETTLE_SECONDS = 5.0
PS_LOSSES = 5
#: Models measured for throughput besides mnist-mlp (the disruption runs use mnist-mlp).
OTHER_MODELS: tuple[str, ...] = ("mnist-cnn",)
SAVE_FREQ = 100
#: The disruption runs' length: never reached (they stop once measured).
ENDLESS = 100_000
QUICK = {
    "WARMUP": 20,
    "WINDOW": 20,
    "STEPS": 200,
    "GONE_SECONDS": 5.0,
    "PS_LOSSES": 1,
    "OTHER_MODELS": (),
}


class Steps:
    """The chief's step lines, timed when they appear in its log."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.seen: list[tuple[float, int]] = []
        self._offset = 0

    def poll(self) -> None:
        text = self.trainer.log.read_text(errors="replace")
        now = time.monotonic()
        for m in STEP.finditer(text, self._offset):
            self.seen.append((now, int(m.group(1))))
        self._offset = len(text)

    def until(self, step: int, timeout: float = 900.0) -> float:
        """Wait for a step line >= `step`; when it appeared."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.poll()
            done = [t for t, s in self.seen if s >= step]
            if done:
                return done[0]
            if self.trainer.proc.poll() is not None:
                raise RuntimeError(f"{self.trainer.name} exited:\n{self.trainer.tail()}")
            time.sleep(0.02)
        raise TimeoutError(f"step {step} not reached")

    def rate(self, start: float, stop: float) -> float | None:
        """Steps per second between two moments, from the lines seen between them."""
        inside = [(t, s) for t, s in self.seen if start <= t <= stop]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def windows(steps: Steps, first: int, last: int) -> list[float]:
    rates = []
    for begin in range(first, last - WINDOW + 1, WINDOW):
        t0 = next(t for t, s in steps.seen if s >= begin)
        t1 = next(t for t, s in steps.seen if s >= begin + WINDOW)
        rates.append(WINDOW / (t1 - t0))
    return rates


def config(steps: int, model: str = "mnist-mlp") -> dict[str, Any]:
    return {
        "model": model,
        "epochs": 1,
        "stepsPerEpoch": steps,
        "saveFreq": SAVE_FREQ,
        "batchSizePerReplica": 64,
        "logEverySteps": 10,
    }


def throughput(tmp: Path, ps: bool, model: str = "mnist-mlp") -> dict[str, Any]:
    from kerasjob_dev.trainer_procs import group

    kind = {"workers": 2, "chief": True, "ps": 1} if ps else {"workers": 2}
    with group(tmp, config(STEPS, model), **kind) as g:
        steps = Steps(g.start()[0])
        steps.until(STEPS)
        rates = windows(steps, WARMUP, STEPS)
        g.wait_all(120)
    per_step = 64 if ps else 128
    median = statistics.median(rates)
    return {
        "steps_per_s": round(median, 1),
        "examples_per_s": round(median * per_step, 0),
        "examples_per_step": per_step,
        "windows": len(rates),
    }


def worker_loss(tmp: Path) -> dict[str, Any]:
    from kerasjob_dev.trainer_procs import Trainer, group

    with group(tmp, config(ENDLESS), workers=2, chief=True, ps=1) as g:
        trainers = g.start()
        steps, worker = Steps(trainers[0]), trainers[2]
        t_before = steps.until(WARMUP)
        t_kill = steps.until(WARMUP + 3 * WINDOW)
        worker.signal(signal.SIGKILL)
        time.sleep(GONE_SECONDS)
        steps.poll()
        t_back = time.monotonic()
        back = Trainer(f"{worker.name}b", g.tmp, worker.env)
        g.trainers[2] = back
        while "serving for the chief" not in back.text():
            steps.poll()
            time.sleep(0.05)
        time.sleep(SETTLE_SECONDS)
        t_after = time.monotonic()
        steps.poll()
        last = max(s for _, s in steps.seen)
        steps.until(last + 3 * WINDOW)
        rates = {
            "before": steps.rate(t_before, t_kill),
            "during": steps.rate(t_kill, t_back),
            "after": steps.rate(t_after, time.monotonic()),
        }
        g.stop()
    return {k: round(v, 1) if v else None for k, v in rates.items()} | {
        "gone_s": GONE_SECONDS,
        "chief_restarts": 0,
    }


def ps_loss(tmp: Path) -> dict[str, Any]:
    from kerasjob_dev.trainer_procs import group
    from kerasjob_trainer.runtimes.tf_ps.backup import latest_step

    seconds, redone = [], []
    with group(tmp, config(ENDLESS), workers=2, chief=True, ps=1) as g:
        steps = Steps(g.start()[0])
        at = 0
        for _ in range(PS_LOSSES):
            steps.until(at + SAVE_FREQ + SAVE_FREQ // 2)  # a backup since the last start
            ps = next(t for t in g.trainers if "ps0" in t.name)
            t_kill = time.monotonic()
            steps.poll()
            lost_at = max(s for _, s in steps.seen)
            ps.signal(signal.SIGKILL)
            g.trainers[0].proc.wait(120)
            g.stop()
            resumed = latest_step(str(g.ckpt / "backup"))
            steps = Steps(g.start()[0])
            t_first = steps.until(resumed + 1)
            seconds.append(t_first - t_kill)
            redone.append(lost_at - resumed)
            at = resumed
        g.stop()
    return {
        "seconds_to_first_step": [round(s, 2) for s in seconds],
        "median_s": round(statistics.median(seconds), 2),
        "steps_redone": redone,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        globals().update(QUICK)
    from kerasjob_dev import benchrun

    stamp, started = benchrun.stamp(), time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for part in ("mwms", "ps", "worker-loss", "ps-loss"):
            (tmp / part).mkdir()
        figures: dict[str, Any] = {
            "quick": args.quick,
            "mwms_2_workers": throughput(tmp / "mwms", ps=False),
            "ps_2_workers_1_ps": throughput(tmp / "ps", ps=True),
            "ps_worker_loss": worker_loss(tmp / "worker-loss"),
            "ps_loss": ps_loss(tmp / "ps-loss"),
        }
        if OTHER_MODELS:
            figures["models"] = {}
        for model in OTHER_MODELS:
            for part in ("mwms", "ps"):
                (tmp / model / part).mkdir(parents=True)
            figures["models"][model] = {
                "mwms_2_workers": throughput(tmp / model / "mwms", ps=False, model=model),
                "ps_2_workers_1_ps": throughput(tmp / model / "ps", ps=True, model=model),
            }
    figures["run"] = benchrun.finish(stamp, started)
    print(json.dumps(figures, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

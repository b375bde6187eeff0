"""The Keras 3 trainer's Orbax backups and Grain input on CPU: what they cost.

    python bench/keras3_orbax.py [--quick] [--out FILE]      (make bench)

One process, KERAS_BACKEND=jax, the default CPU device:
- **overhead**: per model (the built-in mnist-mlp; `transformer`, kerasjob_dev.benchmodels':
  a ~110 M-parameter decoder, vocab 16,000, d_model 768, 12 blocks, batch 1 x 16 tokens)
  `model.fit` runs windows of steps with no backup, with Orbax backups (`checkpoint.Backups`,
  async: the trainer's own), with the trainer's former backup (one npz written by process
  0, fsync'd and renamed: `npz_save` below, as it was), and with a plain asynchronous writer
  of the same bytes (`Plain`: the arrays copied off the devices, then one thread writes them
  to one file and fsyncs it, no format at all: what the bytes alone cost). The cost of one
  backup is the window's time minus as many steps at the no-backup window's mean step time,
  divided by the backups taken. Two spacings: *queued*, a backup every SAVE_EVERY steps
  (saveFreq 10: each may wait for the last), and *isolated*, one backup SAVE_EVERY steps
  into the window (saveFreq 100: written long before the next). The overhead at saveFreq N
  is that spacing's cost over N mean steps, in %. Every backup has steps after it inside
  its window (none at a window's last step), and the window ends once the last one is
  committed: an asynchronous backup is charged what it costs in steady training (the steps
  its writing slows, and any wait for it), not its whole writing time, which a backup at
  the window's very end would be. A round runs each kind's window once, between two windows
  without backups whose mean step time it is charged against; ROUNDS rounds; medians.
- **restore**: Dense stacks of ~10 M, ~100 M and ~300 M parameters with Adam (its two slots:
  3x the parameters): one Orbax save, then a new `Backups` restores it into the live
  variables (seconds, bit-for-bit check included), and the bytes on disk.
- **grain**: ArrayRecord files of the MNIST sample (`records.write_split`) read through
  `grain_input.grain_source` (global batch 64, one process) with 0, 1 and 2 worker
  processes, and the same examples from memory: examples/s, beside what mnist-mlp trains
  per second (its no-backup steps/s x 64).
Writes JSON (default bench/results/keras3_orbax.json) with `run` (benchrun.stamp()).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "keras3_orbax.json"
SAVE_EVERY = 10


def npz_save(directory: str, model: Any) -> None:
    """The trainer's backup before Orbax: every variable by process 0, one atomic npz."""
    from kerasjob_trainer.runtimes.keras3 import state

    state.sync(model)
    arrays = {f"v{i:05d}": v.numpy() for i, v in enumerate(state.variables(model))}
    final = os.path.join(directory, "keras3-state.npz")
    with open(f"{final}.tmp", "wb") as f:
        buf = io.BytesIO()
        import numpy as np

        np.savez(buf, **arrays)
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(f"{final}.tmp", final)


class Plain:
    """An asynchronous backup without a format: copy every variable (the next steps overwrite
    donated buffers), then write the copies to one file and fsync it, in one thread."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "plain.bin")
        self.thread: threading.Thread | None = None

    def save(self, model: Any) -> None:
        import numpy as np

        from kerasjob_trainer.runtimes.keras3 import state

        self.wait()
        state.sync(model)
        copies = [np.array(v.value, copy=True) for v in state.variables(model)]
        self.thread = threading.Thread(target=self._write, args=(copies,))
        self.thread.start()

    def _write(self, copies: list[Any]) -> None:
        with open(self.path, "wb") as f:
            for a in copies:
                f.write(memoryview(a).cast("B"))
            f.flush()
            os.fsync(f.fileno())

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None


def _window(model: Any, data: tuple[Any, Any], steps: int, save: Any) -> list[float]:
    """Step end times of `steps` steps of fit, `save(step)` after each."""
    import keras

    times: list[float] = []

    class Cb(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            save(batch + 1)
            times.append(time.perf_counter())

    start = time.perf_counter()
    x, y = data
    model.fit(x, y, batch_size=len(y) // steps, epochs=1, verbose=0, callbacks=[Cb()])
    return [start, *times]


def _due_queued(steps: int) -> Callable[[int], bool]:
    """Every SAVE_EVERY steps, none at the window's last step: backups back to back."""
    return lambda step: step % SAVE_EVERY == 0 and step < steps


def _due_isolated(steps: int) -> Callable[[int], bool]:
    """One backup, SAVE_EVERY steps into the window: nothing queues behind it."""
    return lambda step: step == SAVE_EVERY


def _when(due: Callable[[int], bool], save: Callable[[], None]) -> Callable[[int], None]:
    return lambda step: save() if due(step) else None


def overhead(
    name: str, model: Any, data: tuple[Any, Any], steps: int, rounds: int
) -> dict[str, Any]:
    from kerasjob_trainer.runtimes.keras3 import checkpoint

    _window(model, data, steps, lambda s: None)  # compiled, warm
    costs: dict[str, list[float]] = {}
    base_steps: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        backups = checkpoint.Backups(os.path.join(tmp, "orbax"))
        plain = Plain(tmp)
        counter = [0]

        def orbax() -> None:
            counter[0] += 1
            backups.save(model, checkpoint.Header(step=counter[0], processes=1))

        kinds = {
            "orbax": (orbax, backups.wait),
            "npz": (lambda: npz_save(tmp, model), lambda: None),
            "plain": (lambda: plain.save(model), plain.wait),
        }
        # npz is synchronous: its cost does not depend on what follows it (queued only)
        plan = [(k, "queued") for k in kinds] + [("orbax", "isolated"), ("plain", "isolated")]

        def base_window() -> float:
            t = _window(model, data, steps, lambda s: None)
            base_steps.append((t[-1] - t[0]) / steps)
            return base_steps[-1]

        # (kind, spacing, seconds, backups); each charged against the mean step time of the
        # no-backup windows just before and after its round (the VM's speed drifts)
        base = base_window()
        for _ in range(rounds):
            measured = []
            for kind, how in plan:
                save, wait = kinds[kind]
                due = (_due_queued if how == "queued" else _due_isolated)(steps)
                t = _window(model, data, steps, _when(due, save))
                wait()  # an asynchronous backup's writing belongs to its window
                saves = sum(due(step) for step in range(1, steps + 1))
                measured.append((f"{kind}_{how}", time.perf_counter() - t[0], saves))
            after = base_window()
            step = (base + after) / 2
            for key, seconds, saves in measured:
                costs.setdefault(key, []).append((seconds - steps * step) / saves)
            base = after
        backups.close()
    step_s = statistics.median(base_steps)
    out: dict[str, Any] = {"model": name, "parameters": int(model.count_params())}
    out["step_s"] = round(step_s, 5)
    for kind in kinds:
        queued = statistics.median(costs[f"{kind}_queued"])
        isolated = statistics.median(costs.get(f"{kind}_isolated", [queued]))
        out[f"{kind}_save_cost_s"] = round(queued, 4)
        out[f"{kind}_isolated_save_cost_s"] = round(isolated, 4)
        # saveFreq 10: backups back to back (each may wait for the last); saveFreq 100: each
        # alone (it is written long before the next one)
        out[f"{kind}_overhead_pct_at_10"] = round(100 * queued / (10 * step_s), 3)
        out[f"{kind}_overhead_pct_at_100"] = round(100 * isolated / (100 * step_s), 3)
    return out


def restore_seconds(parameters: int, quick: bool) -> dict[str, Any]:
    import keras
    import numpy as np

    from kerasjob_trainer.runtimes.keras3 import checkpoint

    width = 256 if quick else 2048
    layers = max(1, round(parameters / (width * width + width)))
    model = keras.Sequential([keras.Input((width,))])
    for _ in range(layers):
        model.add(keras.layers.Dense(width))
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    with tempfile.TemporaryDirectory() as tmp:
        backups = checkpoint.Backups(tmp)
        t0 = time.perf_counter()
        backups.save(model, checkpoint.Header(step=1, processes=1))
        backups.close()
        save_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
        for v in model.trainable_variables:
            v.assign(np.zeros(v.shape, v.dtype))
        t0 = time.perf_counter()
        checkpoint.Backups(tmp).restore(model)  # raises unless bit for bit
        restore_s = time.perf_counter() - t0
    return {
        "parameters": int(model.count_params()),
        "state_bytes": size,
        "save_s": round(save_s, 2),
        "restore_s": round(restore_s, 2),
    }


def grain_throughput(steps: int, workers_list: tuple[int, ...]) -> list[dict[str, Any]]:
    from kerasjob_trainer.runtimes.keras3 import grain_input, records
    from kerasjob_trainer.shared.data import mnist_sample

    x, y, _, _ = mnist_sample()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        records.write_split(tmp, "train", x, y, shards=4)
        sources: list[tuple[str, Any, int]] = [("memory", grain_input.ArraySource(x, y), 0)]
        sources += [("arrayrecord", records.Records(records.files(tmp)), w) for w in workers_list]
        for kind, source, workers in sources:
            src = grain_input.grain_source(source, 64, 42, workers=workers)
            src.batch(0, 0, 1)  # started (worker processes up)
            t0 = time.perf_counter()
            for step in range(1, steps + 1):
                src.batch(step, 0, 1)
            rate = steps * 64 / (time.perf_counter() - t0)
            assert src.close is not None
            src.close()
            out.append({"source": kind, "workers": workers, "examples_per_s": round(rate)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: checks it runs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    import jax
    import keras
    import numpy as np

    sys.path.insert(0, str(ROOT / "dev"))
    from kerasjob_dev import benchrun
    from kerasjob_dev.benchmodels import transformer
    from kerasjob_trainer.runtimes.keras3.models import builtin

    run = benchrun.stamp()
    quick = args.quick
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {"quick": quick, "jax": jax.__version__, "keras": keras.__version__}
    steps, rounds = (20, 1) if quick else (100, 5)
    mlp = builtin("mnist-mlp", 1e-3)
    mnist = (rng.random((steps * 64, 784), dtype=np.float32), rng.integers(0, 10, steps * 64))
    results["overhead"] = [overhead("mnist-mlp", mlp, mnist, steps, rounds)]
    print(json.dumps(results["overhead"][-1]), flush=True)
    vocab, width, blocks, tsteps = (500, 64, 2, 20) if quick else (16000, 768, 12, 30)
    lm = transformer(vocab, width, blocks, heads=4 if quick else 12)
    tokens = rng.integers(0, vocab, (tsteps, 16)).astype(np.int32)
    lm_data = (tokens, np.roll(tokens, -1, axis=1))
    results["overhead"].append(overhead("transformer", lm, lm_data, tsteps, 1 if quick else 3))
    print(json.dumps(results["overhead"][-1]), flush=True)
    del lm
    sizes = (100_000, 1_000_000) if quick else (10_000_000, 100_000_000, 300_000_000)
    results["restore"] = [restore_seconds(n, quick) for n in sizes]
    print(json.dumps(results["restore"]), flush=True)
    results["grain"] = grain_throughput(20 if quick else 300, (0, 1) if quick else (0, 1, 2))
    consumed = 64 / results["overhead"][0]["step_s"]
    results["mlp_consumes_examples_per_s"] = round(consumed)
    print(json.dumps(results["grain"]), f"mnist-mlp trains {consumed:.0f} examples/s", flush=True)
    results["run"] = {**run, "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

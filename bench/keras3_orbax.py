"""The Keras 3 trainer's Orbax backups and Grain input on CPU: what they cost.

    python bench/keras3_orbax.py [--quick] [--out FILE]      (make bench)

One process, KERAS_BACKEND=jax, the default CPU device:
- **overhead**: per model (the built-in mnist-mlp; `transformer`, kerasjob_dev.benchmodels':
  a ~110 M-parameter decoder, vocab 16,000, d_model 768, 12 blocks, batch 1 x 16 tokens)
  `model.fit` runs windows of steps with no backup, with an Orbax backup every SAVE_EVERY steps
  (`checkpoint.Backups`, async: the trainer's own), and with the trainer's former backup (one
  npz written by process 0, fsync'd and renamed: `npz_save` below, as it was). The cost of
  one backup is the window's time minus as many steps at the no-backup window's mean step
  time, divided by the backups taken; the overhead at saveFreq N is that cost over N mean
  steps, in %. Windows of the three kinds alternate, ROUNDS times; medians. Every backup has
  SAVE_EVERY steps after it inside its window (none at a window's last step), and the
  window ends once the last one is committed: an asynchronous backup is charged what it
  costs in steady training (the steps its writing slows, and any wait for it), not its
  whole writing time, which a backup at the window's very end would be.
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
import time
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


def overhead(
    name: str, model: Any, data: tuple[Any, Any], steps: int, rounds: int
) -> dict[str, Any]:
    from kerasjob_trainer.runtimes.keras3 import checkpoint

    _window(model, data, steps, lambda s: None)  # compiled, warm
    per_save: dict[str, list[float]] = {"orbax": [], "npz": []}
    base_steps: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        backups = checkpoint.Backups(os.path.join(tmp, "orbax"))
        counter = [0]

        def due(step: int) -> bool:
            return step % SAVE_EVERY == 0 and step < steps

        def orbax(step: int) -> None:
            if due(step):
                counter[0] += 1
                backups.save(model, checkpoint.Header(step=counter[0], processes=1))

        def npz(step: int) -> None:
            if due(step):
                npz_save(tmp, model)

        for _ in range(rounds):
            t = _window(model, data, steps, lambda s: None)
            base = (t[-1] - t[0]) / steps
            base_steps.append(base)
            for kind, save in (("orbax", orbax), ("npz", npz)):
                t = _window(model, data, steps, save)
                if kind == "orbax":
                    backups.wait()  # the last save's writing belongs to this window
                    t[-1] = time.perf_counter()
                saves = sum(due(step) for step in range(1, steps + 1))
                per_save[kind].append(((t[-1] - t[0]) - steps * base) / saves)
        backups.close()
    step_s = statistics.median(base_steps)
    out: dict[str, Any] = {"model": name, "parameters": int(model.count_params())}
    out["step_s"] = round(step_s, 5)
    for kind, costs in per_save.items():
        cost = statistics.median(costs)
        out[f"{kind}_save_cost_s"] = round(cost, 4)
        for freq in (10, 100):
            out[f"{kind}_overhead_pct_at_{freq}"] = round(100 * cost / (freq * step_s), 3)
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
        sources = [("memory", grain_input.ArraySource(x, y), 0)]
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
    results["overhead"].append(overhead("transformer", lm, lm_data, tsteps, 1 if quick else 2))
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

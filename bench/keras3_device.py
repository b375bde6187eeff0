"""The Keras 3 trainer on one accelerator: steps/s, backup overhead, save and restore seconds.

For a GPU machine that has CUDA and JAX but no TensorFlow and no network (hack/gpu/README.md
says how to bring the project and a Keras wheel along). Runs on any JAX device, so it is
also checked on CPU (`--quick`, in `make test-bench`).

    KERAS_BACKEND=jax python bench/keras3_device.py [--quick] [--out FILE]

Per model (the built-in mnist-cnn, and `resnet`: a ResNet-style convnet of ~2.8 M parameters
on 32x32x3 inputs, synthetic data), in one process on the default device:
- steps/s: median over windows of WINDOW steps after WARMUP, through the trainer's own
  session (`kerasjob_trainer.runtimes.keras3.session.fit`), no backups;
- backup overhead: the same with a backup every SAVE_FREQ steps, in % of step time;
- save_s / restore_s: one Orbax save (until committed) / restore of the model's whole state;
- disruption: the bundled Keras 3 trainer (mnist-cnn) SIGTERMed after its first steps and
  restarted: the goodput ledger's downtime and steps redone, the restart's start-up.
Prints one line per figure and writes JSON (default bench/results/keras3_device.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")
# Steps/s, not start-up: no persistent compilation cache (each measurement's directory goes).
os.environ.setdefault("KERASJOB_JAX_CACHE", "0")

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "keras3_device.json"
SAVE_FREQ = 100


def resnet(classes: int = 10) -> Any:
    """A small ResNet (three stages of two residual blocks; ~2.8 M parameters)."""
    import keras
    from keras import layers

    def block(x: Any, filters: int, stride: int) -> Any:
        y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        y = layers.BatchNormalization()(y)
        y = layers.Activation("relu")(y)
        y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
        y = layers.BatchNormalization()(y)
        if stride != 1 or x.shape[-1] != filters:
            x = layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
        return layers.Activation("relu")(layers.Add()([x, y]))

    inputs = keras.Input((32, 32, 3))
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(inputs)
    for filters, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1)):
        x = block(x, filters, stride)
    x = layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, layers.Dense(classes)(x), name="resnet_small")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class _Times:
    """A Keras callback recording when each step ended."""

    def __init__(self) -> None:
        import keras

        class Cb(keras.callbacks.Callback):
            def __init__(self, out: list[float]) -> None:
                super().__init__()
                self.out = out

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                self.out.append(time.perf_counter())

        self.times: list[float] = []
        self.callback = Cb(self.times)


def _rate(times: list[float], warmup: int, window: int) -> float:
    t = times[warmup:]
    rates = [window / (t[i + window] - t[i]) for i in range(0, len(t) - window, window)]
    return statistics.median(rates) if rates else float("nan")


def measure(
    name: str, steps: int, warmup: int, window: int, batch: int, save_freq_backups: int = SAVE_FREQ
) -> dict[str, Any]:
    import numpy as np

    from kerasjob_contract.trainer_config import TrainerConfig
    from kerasjob_trainer.runtimes.keras3 import checkpoint, state
    from kerasjob_trainer.runtimes.keras3.identity import LOCAL
    from kerasjob_trainer.runtimes.keras3.models import builtin
    from kerasjob_trainer.runtimes.keras3.session import Context, session_for

    rng = np.random.default_rng(0)
    shape = (28, 28, 1) if name == "mnist-cnn" else (32, 32, 3)
    x = rng.random((4096, *shape), dtype=np.float32)
    y = rng.integers(0, 10, 4096)
    out: dict[str, Any] = {"model": name}
    for save_freq in (steps * 10, save_freq_backups):  # first without backups, then with
        with tempfile.TemporaryDirectory() as tmp:
            config = TrainerConfig(save_freq=save_freq, log_every_steps=steps * 10)
            job = session_for(Context(config, {}, LOCAL, tmp, os.path.join(tmp, "out"), None))
            model = builtin(name, 1e-3) if name == "mnist-cnn" else resnet()
            times = _Times()
            job.fit(
                model,
                (x, y),
                epochs=1,
                steps_per_epoch=steps,
                global_batch_size=batch,
                callbacks=[times.callback],
            )
            rate = _rate(times.times, warmup, window)
            if save_freq == save_freq_backups:
                out["steps_per_s_with_backups"] = round(rate, 2)
                backups = checkpoint.Backups(os.path.join(tmp, "bench-backup"))
                t0 = time.perf_counter()
                backups.save(model, checkpoint.Header(step=steps, processes=1))
                backups.wait()
                out["save_s"] = round(time.perf_counter() - t0, 3)
                saved = [np.array(v.numpy()) for v in state.variables(model)]
                for v in state.variables(model):  # scramble, then restore
                    v.assign(np.zeros(v.shape, dtype=v.dtype))
                t0 = time.perf_counter()
                backups.restore(model)  # checks every variable bit for bit itself
                out["restore_s"] = round(time.perf_counter() - t0, 3)
                backups.close()
                restored = [np.array(v.numpy()) for v in state.variables(model)]
                out["restore_bit_exact"] = all(
                    np.array_equal(a, b) for a, b in zip(saved, restored, strict=True)
                )
                out["backup_bytes"] = _bytes(os.path.join(tmp, "bench-backup"))
            else:
                out["steps_per_s"] = round(rate, 2)
            out["parameters"] = int(model.count_params())
    base, backed = out["steps_per_s"], out["steps_per_s_with_backups"]
    out["backup_overhead_pct"] = round((base / backed - 1) * 100, 1)
    return out


def _bytes(directory: str) -> int:
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


def disruption(steps: int, quick: bool) -> dict[str, Any]:
    """One SIGTERM to the bundled Keras 3 trainer (`python -m kerasjob_trainer`, backend jax,
    mnist-cnn, one process on the default device), then a restart: what the goodput ledger
    says it cost (downtime, steps redone, goodput) and the restarted process's start-up."""
    import re
    import signal
    import subprocess

    import kerasjob_contract as contract
    from kerasjob_trainer.shared.goodput import Ledger

    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "backend": "jax",
            "model": "mnist-cnn",
            "epochs": 1,
            "stepsPerEpoch": steps,
            "saveFreq": 50,
            "batchSizePerReplica": 64,
            "logEverySteps": 1,
        }
        env = {
            **os.environ,
            "KERASJOB_TRAINER_CONFIG": json.dumps(config),
            "KERASJOB_CHECKPOINT_DIR": tmp,
            "KERASJOB_JAX_CACHE": "1",
        }
        env.pop("KERASJOB_METRICS_PORT", None)
        cmd = [sys.executable, "-m", "kerasjob_trainer"]
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        assert first.stdout is not None
        for line in first.stdout:  # until its first step
            if re.match(contract.LOG_STEP_RE, line):
                break
        time.sleep(0.5 if quick else 2.0)
        first.send_signal(signal.SIGTERM)
        first.stdout.read()
        code = first.wait(120)
        second = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        if code != 42 or second.returncode != 0:
            raise RuntimeError(
                f"disruption run: exits {code}, {second.returncode}\n"
                f"{second.stdout[-2000:]}{second.stderr[-2000:]}"
            )
        ledger = json.loads(Path(tmp, "goodput", "ledger.json").read_text())
        startup = re.search(contract.LOG_STARTUP_RE, second.stdout, re.M)
    (event,) = ledger["events"]
    return {
        "cause": event["cause"],
        "downtime_s": round(event["downtime_s"], 2),
        "steps_redone": event["steps_redone"],
        "goodput": round(Ledger.from_json(ledger).goodput, 4),
        "restart_startup_total_s": float(startup.group(7)) if startup else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: checks it runs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    import jax
    import keras

    steps, warmup, window, batch = (20, 4, 4, 8) if args.quick else (600, 100, 100, 128)
    save_freq = 5 if args.quick else SAVE_FREQ
    started = time.time()
    device = str(jax.devices()[0])
    print(f"keras {keras.__version__}, jax {jax.__version__}, device {device}", flush=True)
    results = []
    for name in ("mnist-cnn", "resnet"):
        r = measure(name, steps, warmup, window, batch, save_freq)
        print(
            f"{name}: {r['parameters']} parameters, {r['steps_per_s']} steps/s "
            f"(batch {batch}), {r['steps_per_s_with_backups']} with a backup every "
            f"{save_freq} ({r['backup_overhead_pct']}%), save {r['save_s']} s, restore "
            f"{r['restore_s']} s (bit-exact: {r['restore_bit_exact']}), "
            f"{r['backup_bytes'] / 1e6:.1f} MB",
            flush=True,
        )
        results.append(r)
    recovery = disruption(200 if args.quick else 2000, args.quick)
    print(
        f"SIGTERM -> resumed: {recovery['cause']}, downtime {recovery['downtime_s']} s, "
        f"steps redone {recovery['steps_redone']}, restart start-up "
        f"{recovery['restart_startup_total_s']} s",
        flush=True,
    )
    if not all(r["restore_bit_exact"] for r in results):
        print("restore was not bit-exact", file=sys.stderr)
        return 1
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "quick": args.quick,
        "device": device,
        "keras": keras.__version__,
        "jax": jax.__version__,
        "batch": batch,
        "models": results,
        "disruption": recovery,
        "seconds": round(time.time() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

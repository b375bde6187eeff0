"""Sharded models (spec.trainer.mesh) in Keras 3 / JAX on CPU: a transformer's throughput on
the device meshes 4x1, 2x2 and 1x4 (axes batch x model).

    python bench/keras3_mesh.py [--quick] [--out FILE]      (make bench)

Each mesh runs in a fresh group of 2 processes x 2 CPU devices each
(XLA_FLAGS=--xla_force_host_platform_device_count=2), real multi-process JAX over
127.0.0.1: each process gets the identity env the operator sets (`trainer_procs.jax_identity`),
reads it with the trainer's `identity.parse_identity`, joins `jax.distributed.initialize` as
the trainer does, and sets the mesh up with the trainer's own code (`mesh.Sharding.setup`:
`check_fits`, `device_mesh`, `process_grid`, `data_shard`, `model_parallel`; then `shard`
with the layout). The model is kerasjob_dev.benchmodels' `transformer` (vocab 8,192,
d_model 256, 4 blocks of 8 heads, 64 tokens; 7.4 M parameters), its layout
`transformer_layout` (embedding, attention, MLP and head kernels on the `model` axis); every
process checks with `mesh.sharded_paths` that exactly the variables the layout names are
sharded (none on 4x1, whose model axis has size 1) and exits 1 otherwise.

The global batch is the same on every mesh (GLOBAL_BATCH sequences), so the figures compare:
each process feeds the rows of it that its devices hold (`data_shard`: half on 4x1 and 2x2,
all of it on 1x4) through `data.step_input`, as `session.fit` does, one `model.fit` per window.
Per group: `warmup` steps (the compile), then `windows` windows of `steps` steps. The meshes
take turns, `rounds` groups each (4x1, 2x2, 1x4, then 1x4, 2x2, 4x1: a load that drifts
weighs on every mesh alike). Per mesh, over the windows of all its rounds: the median
window's step time, steps/s, examples/s and tokens/s, each process's peak RSS, and the ratio
of the mesh's steps/s to 4x1's (pure data parallelism); the loss after the warm-up and after
the last window (the same on every mesh: a layout changes where the maths runs, not what it
computes). `--quick`: a tiny model, few steps, one round.
Writes JSON (default bench/results/keras3_mesh.json) with `run` (benchrun.stamp(), the load
average at the start and the end).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "keras3_mesh.json"
#: (batch, model): the meshes measured, pure data parallelism first (the ratios' base).
MESHES = ((4, 1), (2, 2), (1, 4))
PROCESSES = 2
DEVICES_PER_PROCESS = 2
#: How long one mesh's group may take before the bench gives up (s).
GROUP_TIMEOUT = 600.0


@dataclasses.dataclass(frozen=True)
class Sizes:
    vocab: int
    width: int
    blocks: int
    heads: int
    sequence: int
    global_batch: int  # sequences per step, the same on every mesh
    warmup: int  # steps before timing (the first compiles)
    steps: int  # per window
    windows: int  # per group
    rounds: int  # groups per mesh, the meshes in turn (the order reversed every other round)


FULL = Sizes(8192, 256, 4, 8, 64, 16, warmup=3, steps=5, windows=4, rounds=2)
QUICK = Sizes(512, 64, 2, 4, 16, 8, warmup=1, steps=2, windows=2, rounds=1)


def mesh_name(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


# -- one process of a group -------------------------------------------------------------------


def worker(shape: tuple[int, int], sizes: Sizes, result: Path) -> None:
    """One process of the group: JAX's distributed runtime, the mesh and layout, the model
    (checked to be sharded as the layout says), the warm-up, the timed windows; writes its
    figures to `result`."""
    from kerasjob_contract.mesh import parse_mesh
    from kerasjob_dev.benchmodels import TRANSFORMER_LAYOUT, transformer, transformer_layout
    from kerasjob_trainer.runtimes.keras3 import data as k3data
    from kerasjob_trainer.runtimes.keras3 import mesh as k3mesh
    from kerasjob_trainer.runtimes.keras3.identity import parse_identity

    identity = parse_identity()
    # As in the jax image, which has no TensorFlow: Keras would load this venv's
    # (set_random_seed seeds it when it can import it), ~350 MiB more RSS per process.
    sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]
    import jax

    jax.distributed.initialize(
        coordinator_address=identity.coordinator,
        num_processes=identity.num_processes,
        process_id=identity.process_id,
    )
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    mesh = parse_mesh([{"name": "batch", "size": shape[0]}, {"name": "model", "size": shape[1]}])
    assert mesh is not None
    sharding = k3mesh.Sharding.setup(mesh, DEVICES_PER_PROCESS, elastic=False)
    sharding.shard(transformer_layout(sharding.device_mesh))
    model = transformer(sizes.vocab, sizes.width, sizes.blocks, sizes.heads)
    sharded = sorted(k3mesh.sharded_paths(model.variables, mesh))
    named = sorted(
        v.path for v in model.variables if any(re.fullmatch(k, v.path) for k in TRANSFORMER_LAYOUT)
    )
    expected = named if shape[1] > 1 else []
    if sharded != expected or len(named) != 6 * sizes.blocks + 2:
        raise SystemExit(
            f"mesh {mesh.describe()}: the layout sharded {sharded}, expected {expected} "
            f"(the layout names {named})"
        )
    if shape[1] > 1:
        sharding.guard(model)  # the trainer's guard agrees

    index, count = sharding.data
    k3data.share(sizes.global_batch, count)  # the trainer's check: the batch splits evenly
    per = sizes.global_batch // count
    rng = np.random.default_rng(0)  # the same global batches in every process
    pool = rng.integers(0, sizes.vocab, (4, sizes.global_batch, sizes.sequence + 1), np.int32)

    def batch(step: int, part: int, parts: int) -> tuple[Any, Any]:
        rows = pool[step % len(pool), part * per : (part + 1) * per]
        return rows[:, :-1], rows[:, 1:]

    source = k3data.StepSource(batch, global_batch=sizes.global_batch, kind="arrays")
    step = 0

    def window(steps: int) -> tuple[float, float]:
        nonlocal step
        x = k3data.step_input(source, step, steps, index, count)
        t0 = time.perf_counter()
        history = model.fit(x, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
        elapsed = time.perf_counter() - t0  # fit's end reads the loss: the steps are done
        step += steps
        return elapsed, float(history.history["loss"][-1])

    compile_s, first_loss = window(sizes.warmup)
    timed = [window(sizes.steps) for _ in range(sizes.windows)]
    out = {
        "process": identity.process_id,
        "versions": {"jax": jax.__version__, "keras": keras.__version__},
        "data_share": [index, count],
        "local_batch": per,
        "parameters": int(model.count_params()),
        "sharded_variables": len(sharded),
        "warmup_s": round(compile_s, 3),
        "window_s": [round(t, 4) for t, _ in timed],
        "loss_first": round(first_loss, 4),
        "loss_last": round(timed[-1][1], 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    result.write_text(json.dumps(out))
    jax.distributed.shutdown()


# -- the bench --------------------------------------------------------------------------------


def run_group(shape: tuple[int, int], sizes: Sizes, tmp: Path, tag: str) -> list[dict[str, Any]]:
    """A fresh group of PROCESSES workers on mesh `shape`: their figures, process 0 first
    (their logs and results in `tmp`, named after `tag`)."""
    from kerasjob_dev.trainer_procs import free_ports, jax_identity

    (port,) = free_ports(1)
    flags = os.environ.get("XLA_FLAGS", "")
    base = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={DEVICES_PER_PROCESS}",
    }
    procs = []
    for i in range(PROCESSES):
        env = {**base, **jax_identity(f"127.0.0.1:{port}", PROCESSES, i)}
        argv = [sys.executable, __file__, "--worker", mesh_name(shape)]
        argv += ["--sizes", json.dumps(dataclasses.asdict(sizes))]
        argv += ["--result", str(tmp / f"{tag}-{i}.json")]
        with (tmp / f"{tag}-{i}.log").open("w") as log:
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + GROUP_TIMEOUT
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 1)))
        except subprocess.TimeoutExpired:
            codes.append(None)
    if codes != [0] * PROCESSES:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        tails = "\n".join(
            f"--- process {i}:\n" + (tmp / f"{tag}-{i}.log").read_text()[-3000:]
            for i in range(PROCESSES)
        )
        raise SystemExit(f"mesh {mesh_name(shape)}: exit codes {codes}\n{tails}")
    return [json.loads((tmp / f"{tag}-{i}.json").read_text()) for i in range(PROCESSES)]


def figures(
    shape: tuple[int, int], sizes: Sizes, groups: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    """One mesh's row from its groups (one per round): process 0's windows of every round
    (a group steps in lockstep: every step is a collective), process 1's median beside it."""
    windows = [t for g in groups for t in g[0]["window_s"]]
    step_s = statistics.median(windows) / sizes.steps
    other = statistics.median(t for g in groups for t in g[1]["window_s"]) / sizes.steps
    first = groups[0][0]
    return {
        "mesh": mesh_name(shape),
        "batch": shape[0],
        "model": shape[1],
        "parameters": first["parameters"],
        "sharded_variables": first["sharded_variables"],
        "local_batch": [p["local_batch"] for p in groups[0]],
        "warmup_s": statistics.median(g[0]["warmup_s"] for g in groups),
        "step_s": round(step_s, 4),
        "step_s_process1": round(other, 4),
        "steps_per_s": round(1 / step_s, 3),
        "window_steps_per_s": [round(sizes.steps / t, 3) for t in windows],
        "round_steps_per_s": [
            round(sizes.steps / statistics.median(g[0]["window_s"]), 3) for g in groups
        ],
        "examples_per_s": round(sizes.global_batch / step_s, 2),
        "tokens_per_s": round(sizes.global_batch * sizes.sequence / step_s, 1),
        "peak_rss_mib": [max(g[i]["peak_rss_mib"] for g in groups) for i in range(PROCESSES)],
        "loss_first": [g[0]["loss_first"] for g in groups],
        "loss_last": [g[0]["loss_last"] for g in groups],
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = "mesh   step s   steps/s  examples/s  tokens/s  vs 4x1  warm-up s  peak RSS MiB"
    lines = [head]
    for r in rows:
        rss = "/".join(f"{m:.0f}" for m in r["peak_rss_mib"])
        lines.append(
            f"{r['mesh']:<6} {r['step_s']:>6.3f}  {r['steps_per_s']:>7.2f}  "
            f"{r['examples_per_s']:>10.1f}  {r['tokens_per_s']:>8.0f}  {r['vs_4x1']:>6.2f}  "
            f"{r['warmup_s']:>9.1f}  {rss}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model: checks it runs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # BxM: one process of a group
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    sys.path.insert(0, str(ROOT / "dev"))
    if args.worker:
        batch, model = (int(n) for n in args.worker.split("x"))
        worker((batch, model), Sizes(**json.loads(args.sizes)), args.result)
        return 0

    from kerasjob_dev import benchrun

    run = benchrun.stamp()
    started = time.monotonic()
    sizes = QUICK if args.quick else FULL
    groups: dict[tuple[int, int], list[list[dict[str, Any]]]] = {s: [] for s in MESHES}
    loads: dict[tuple[int, int], list[float]] = {s: [] for s in MESHES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(sizes.rounds):
            for shape in MESHES if r % 2 == 0 else MESHES[::-1]:  # ABC CBA: drift evens out
                loads[shape].append(round(os.getloadavg()[0], 2))
                procs = run_group(shape, sizes, Path(tmp), f"{mesh_name(shape)}-{r}")
                groups[shape].append(procs)
                rate = sizes.steps / statistics.median(procs[0]["window_s"])
                print(f"round {r + 1}: mesh {mesh_name(shape)} {rate:.3f} steps/s", flush=True)
    rows = [{**figures(s, sizes, groups[s]), "loadavg_1min_before": loads[s]} for s in MESHES]
    for row in rows:
        row["vs_4x1"] = round(row["steps_per_s"] / rows[0]["steps_per_s"], 3)
    print(table(rows))
    results = {
        "quick": args.quick,
        **groups[MESHES[0]][0][0]["versions"],
        "processes": PROCESSES,
        "devices_per_process": DEVICES_PER_PROCESS,
        "sizes": dataclasses.asdict(sizes),
        "meshes": rows,
        "run": benchrun.finish(run, started),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""hack/gpu/check.sh, step 4: a sharded model on this machine's devices, one process.

mnist-mlp (the built-in, its layout from kerasjob_trainer) under keras.distribution.ModelParallel
over mesh batch=1 x model=<devices>; checks that its kernels are sharded and prints steps/s.
One device cannot shard: then it says so and exits 0. On CPU:
XLA_FLAGS=--xla_force_host_platform_device_count=2 python hack/gpu/sharded.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax
import numpy as np

from kerasjob_contract.mesh import parse_mesh
from kerasjob_trainer.runtimes.keras3 import mesh as k3mesh
from kerasjob_trainer.runtimes.keras3.models import builtin


def main() -> None:
    devices = jax.device_count()
    if devices < 2:
        print(f"sharded: {devices} device: a sharded model needs 2 or more; skipped")
        return
    mesh = parse_mesh([{"name": "batch", "size": 1}, {"name": "model", "size": devices}])
    assert mesh is not None
    sharding = k3mesh.Sharding.setup(mesh, None, elastic=False)
    sharding.shard(k3mesh.builtin_layout("mnist-mlp", mesh, sharding.device_mesh))
    model = builtin("mnist-mlp", 1e-3)
    sharded = k3mesh.sharded_paths(model.variables, mesh)
    assert sharded, "nothing sharded"
    rng = np.random.default_rng(0)
    x = rng.random((64 * 60, 784), dtype=np.float32)
    y = rng.integers(0, 10, 64 * 60)
    model.fit(x[:640], y[:640], batch_size=64, epochs=1, verbose=0)  # compile
    start = time.perf_counter()
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    rate = 60 / (time.perf_counter() - start)
    print(
        f"sharded: mesh {mesh.describe()} on {jax.devices()[0].platform}, {len(sharded)} "
        f"kernels sharded ({', '.join(sharded)}), {rate:.0f} steps/s"
    )


if __name__ == "__main__":
    main()

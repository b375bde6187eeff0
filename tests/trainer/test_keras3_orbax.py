"""The Keras 3 runtime's Orbax backup in one process with 2 CPU devices (a child Python with
KERAS_BACKEND=jax: this pytest process may hold TensorFlow's Keras): a restore is bit for bit
into a model rebuilt in the same process under other names and in a fresh process (keras
#23251's shape: a rebuilt Sequential), the metrics' totals and the data position come back,
a model of another shape is refused naming the variable, a backup of kernels sharded over 2
devices restores into a replicated model (Orbax reshards to the live sharding), an npz
backup of the trainer before Orbax is restored once, arrays are stored uncompressed, and a
backup of the trainer before that (zstd, Orbax's StandardSave) still restores."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

PRELUDE = """
import os, sys
import numpy as np
import keras
from kerasjob_trainer.runtimes.keras3 import checkpoint, legacy, state

def build():
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dropout(0.3, seed=1), keras.layers.Dense(3)])
    m.compile(optimizer="adam", metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m

def trained():
    rng = np.random.default_rng(0)
    x = rng.random((64, 6), dtype=np.float32); y = rng.integers(0, 3, 64)
    m = build(); m.fit(x, y, batch_size=16, epochs=1, verbose=0)
    return m

def values(m):
    return [np.asarray(v.numpy()) for v in state.variables(m)]

def same(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()

backup = sys.argv[1]
"""

SAVE = """
m = trained()
b = checkpoint.Backups(backup)
b.save(m, checkpoint.Header(step=4, processes=1, global_batch=16, data={"examples": 64}))
b.close()
np.savez(os.path.join(backup, "expected.npz"), *values(m))
again = build()  # the #23251 shape: a Sequential rebuilt in the same process (other names)
assert [v.path for v in state.variables(again)] != [v.path for v in state.variables(m)]
r = checkpoint.Backups(backup).restore(again)
assert r.matched_by == "position" and r.header.step == 4, r
assert r.header.data == {"examples": 64}
same(values(again), values(m))
assert r.metric_totals and set(r.metric_totals) == set(state.metric_totals(m))
print("SAVED")
"""

FRESH = """
m = build()  # a fresh process: the same automatic names as the saving one
assert checkpoint.read_header(backup).step == 4
r = checkpoint.Backups(backup).restore(m)
assert r.matched_by == "path", r
with np.load(os.path.join(backup, "expected.npz")) as f:
    same(values(m), [f[k] for k in f.files])
print("RESTORED")
"""

OTHER_SHAPE = """
m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(9, activation="relu"),
                      keras.layers.Dropout(0.3, seed=1), keras.layers.Dense(3)])
m.compile(optimizer="adam", loss="mse")  # the same variables, one of another shape
try:
    checkpoint.Backups(backup).restore(m)
except ValueError as e:
    print("REFUSED", e)
"""

NPZ = """
m = trained()
variables = state.variables(m)
np.savez(os.path.join(backup, legacy.FILE),
         header=np.array('{"step": 7, "processes": 1, "global_batch": 16, "format": 1}'),
         paths=np.array([v.path for v in variables]),
         **{f"v{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(variables)})
assert checkpoint.read_header(backup).step == 7
fresh = build()
r = checkpoint.Backups(backup).restore(fresh)
assert r.matched_by == "npz" and r.header.step == 7 and r.header.format == 1, r
same(values(fresh), values(m))
b = checkpoint.Backups(backup)
b.save(fresh, checkpoint.Header(step=9, processes=1))
b.close()
assert checkpoint.read_header(backup).step == 9  # the next save is an Orbax step
print("NPZ")
"""


SHARDED_SAVE = """
dist = keras.distribution
mesh = dist.DeviceMesh((1, 2), ("batch", "model"), dist.list_devices())
layout = dist.LayoutMap(mesh)
layout["sequential/dense/kernel"] = (None, "model")  # 8 units: 2 shards
dist.set_distribution(dist.ModelParallel(layout_map=layout, batch_dim_name="batch"))
m = trained()
kernel = state.variables(m)[0].value
assert not kernel.sharding.is_fully_replicated and len(kernel.addressable_shards) == 2
b = checkpoint.Backups(backup)
b.save(m, checkpoint.Header(step=3, processes=1))
b.close()
np.savez(os.path.join(backup, "expected.npz"), *values(m))
print("SHARDED")
"""

RESHARD = """
dist = keras.distribution
dist.set_distribution(dist.DataParallel(devices=dist.list_devices()))
m = build()  # replicated on both devices now: Orbax reshards the saved kernels
r = checkpoint.Backups(backup).restore(m)
assert r.matched_by == "path" and r.header.step == 3, r
assert all(v.value.sharding.is_fully_replicated for v in state.variables(m))
with np.load(os.path.join(backup, "expected.npz")) as f:
    same(values(m), [f[k] for k in f.files])
print("RESHARDED")
"""

UNCOMPRESSED = """
m = keras.Sequential([keras.Input((512,)), keras.layers.Dense(512, kernel_initializer="zeros")])
m.compile(optimizer="adam", loss="mse")
m.optimizer.build(m.trainable_variables)  # zeros everywhere: zstd would shrink them ~1000x
b = checkpoint.Backups(backup)
b.save(m, checkpoint.Header(step=1, processes=1))
b.close()
raw = sum(np.asarray(v.numpy()).nbytes for v in state.variables(m))
stored = os.path.join(backup, "orbax", "1", "state")
disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(stored) for f in fs)
print("RAW", raw, "DISK", disk)
"""

ZSTD_BACKUP = """
import dataclasses
import orbax.checkpoint as ocp
m = trained()
arrays, totals = state.tree(m), state.metric_totals(m)
header = checkpoint.Header(step=6, processes=1, global_batch=16, data={"examples": 96})
meta = {"header": dataclasses.asdict(header),
        "variables": [[k, list(a.shape), str(a.dtype)] for k, a in arrays.items()],
        "metrics": [[k, list(a.shape), str(a.dtype)] for k, a in totals.items()]}
old = ocp.CheckpointManager(os.path.join(backup, "orbax"), item_names=("state", "totals", "meta"))
old.save(6, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays),
         totals=ocp.args.StandardSave(totals), meta=ocp.args.JsonSave(meta)))
old.wait_until_finished(); old.close()  # the trainer's backup until 2026-11-29 (zstd)
fresh = build()  # in the same process: other names, matched by position
r = checkpoint.Backups(backup).restore(fresh)
assert r.matched_by == "position" and r.header == header, r
same(values(fresh), values(m))
assert set(r.metric_totals) == set(totals)
print("ZSTD")
"""


def _run(code: str, backup: Path) -> str:
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "TF_USE_LEGACY_KERAS": "0",
    }
    script = textwrap.dedent(PRELUDE) + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script, str(backup)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_rebuilt_sequential_restores_bit_for_bit_in_the_same_and_a_fresh_process(
    tmp_path: Path,
) -> None:
    assert "SAVED" in _run(SAVE, tmp_path)
    assert (tmp_path / "orbax" / "4" / "state").is_dir()
    assert "RESTORED" in _run(FRESH, tmp_path)
    out = _run(OTHER_SHAPE, tmp_path)
    assert "REFUSED backup variable sequential/dense/kernel: float32[6, 8]" in out, out


def test_an_npz_backup_from_before_orbax_is_restored_once(tmp_path: Path) -> None:
    assert "NPZ" in _run(NPZ, tmp_path)


def test_a_sharded_backup_restores_into_a_replicated_model_by_resharding(tmp_path: Path) -> None:
    """Saved with the Dense kernels split over 2 devices (ModelParallel), restored in a fresh
    process into the same model replicated on both (DataParallel): bit for bit."""
    assert "SHARDED" in _run(SHARDED_SAVE, tmp_path)
    assert "RESHARDED" in _run(RESHARD, tmp_path)


def test_a_backup_stores_its_arrays_uncompressed(tmp_path: Path) -> None:
    """zstd costs ~4x a save's CPU (checkpoint's docstring): all-zero arrays, which zstd
    would shrink to almost nothing, take at least their own bytes on disk."""
    out = _run(UNCOMPRESSED, tmp_path)
    raw, disk = (int(w) for w in out.split()[1::2])
    assert raw > 2_000_000 and disk >= raw, out


def test_a_zstd_backup_from_before_2026_11_29_still_restores(tmp_path: Path) -> None:
    assert "ZSTD" in _run(ZSTD_BACKUP, tmp_path)

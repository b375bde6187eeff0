"""Keras 3 backups in a bucket (KERASJOB_CHECKPOINT_LOCATION=gs://...) with real JAX
processes and a real GCS server (fake-gcs-server): no shared directory at all, each process
gets an empty checkpoint directory of its own in every generation (a new Pod each time),
Orbax writes every process's shards straight to the bucket (runtimes/keras3/bucket.py).

The coordinator's name does not resolve ("no-such-host.invalid"): the group forms only
through the address process 0 publishes in the bucket. A SIGTERM makes both processes save
at one agreed step and exit 42; a half-written step (no commit file) is planted past it;
the next generation resumes at the agreed step, removes the half-written one, outlasts 30 s
with the store down (training waits at the next backup until the store is back: nothing
fails), and ends with the exact step count and the weights of the same job run
undisturbed on a shared volume, bit for bit. s3:// and a store that cannot be reached at
start are exit 78 with their one-line reason."""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerasjob_contract as contract
from kerasjob_contract import Env, ExitCode
from kerasjob_dev import objectstores
from kerasjob_dev.trainer_procs import (
    PREEMPTED_LINE,
    RESUMED_LINE,
    Group,
    Trainer,
    free_ports,
    jax_identity,
    own_keras3_script,
)
from kerasjob_trainer.shared.objectstore import Location, ObjectStore, open_store

pytestmark = [pytest.mark.tf, pytest.mark.slow]

TIMEOUT = 240.0
TOTAL = 200
SAVE_FREQ = 20
#: How long the store is down mid-run (issue 44: 30 s).
OUTAGE_S = 30
ORBAX = "backup/orbax"

SCRIPT = """
import os
from kerasjob_trainer.shared import rendezvous

rendezvous.own_addresses = lambda: {"127.0.0.2"}
for name in ("JAX_COORDINATOR_ADDRESS", "KERAS_DISTRIBUTION_JOB_ADDRESSES"):
    os.environ[name] = os.environ[name].replace("127.0.0.1:", "no-such-host.invalid:")
""" + own_keras3_script(2, TOTAL // 2).replace(
    "job = session.start()\n",
    "job = session.start()\nprint(f'test: restored_step={job.restored_step()}', flush=True)\n",
)


class BucketGroup(Group):
    """Every process of every generation gets a new, empty checkpoint directory (a Pod's
    emptyDir); only the chief's output directory is shared (model.keras, progress.json)."""

    def checkpoint_dir(self, role: str, index: int) -> Path:
        return self.tmp / "local" / f"g{self.generation}-{role}{index}"


def g_output(tmp: Path) -> Path:
    """The chief's output directory, shared by its generations (where `Group` reads it)."""
    return tmp / "ckpt" / "output"


def _config(tmp: Path) -> dict[str, Any]:
    script = tmp / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return {"command": [sys.executable, str(script)], "saveFreq": SAVE_FREQ}


def _gs_env(stores: objectstores.Stores, prefix: str) -> dict[str, str]:
    return {
        Env.CHECKPOINT_LOCATION.value: f"gs://{stores.bucket}/{prefix}",
        Env.CHECKPOINT_ENDPOINT.value: stores.gcs_endpoint,
    }


def _store(stores: objectstores.Stores, g: Group) -> tuple[ObjectStore, Location]:
    location = Location.parse(g.env[Env.CHECKPOINT_LOCATION.value])
    return open_store(location, endpoint=stores.gcs_endpoint), location


def _matches(pattern: re.Pattern[str], t: Trainer) -> list[int]:
    return [int(m.group(1)) for line in t.lines() if (m := pattern.match(line))]


def _plant_half_written(store: ObjectStore, location: Location, step: int, at: int) -> str:
    """A copy of committed `step` as step `at` of the same generation, all but its commit
    file: what a save cut off before its commit leaves. Returns its key prefix."""
    base = location.key(ORBAX) + "/"
    keys = [k for k in store.list(base) if k[len(base) :].split("/")[1:2] == [str(step)]]
    assert keys, store.list(base)
    generation = keys[0][len(base) :].split("/")[0]
    planted = f"{base}{generation}/{at}/"
    for key in keys:
        name = key[len(f"{base}{generation}/{step}/") :]
        if name != "commit_success.txt":
            store.put(planted + name, store.get(key) or b"")
    return planted


def _run_undisturbed(tmp: Path) -> list[Any]:
    tmp.mkdir()
    base = Group(tmp, _config(tmp), backend="jax")
    try:
        base.start()
        assert base.wait_all(TIMEOUT) == [0, 0], base.logs()
    finally:
        base.stop()
    return base.final_weights()


@pytest.mark.timeout(900)
def test_a_keras3_job_in_gs_forms_through_the_bucket_and_resumes_bit_for_bit(
    tmp_path: Path, stores: objectstores.Stores
) -> None:
    undisturbed = _run_undisturbed(tmp_path / "volume")
    tmp = tmp_path / "bucket"
    tmp.mkdir()
    outage = objectstores.Outage(stores.gcs_endpoint)  # the trainers reach the store through it
    env = {
        **_gs_env(stores, f"jobs/{tmp_path.name}"),
        Env.CHECKPOINT_ENDPOINT.value: outage.endpoint,
        Env.OUTPUT_DIR.value: str(g_output(tmp)),
    }
    g = BucketGroup(tmp, _config(tmp), backend="jax", env=env)
    store, location = _store(stores, g)
    try:
        # 1. SIGTERM to worker 1: one agreed step, saved by both straight to the bucket.
        chief, worker = g.start()
        dirs = {t.env[Env.CHECKPOINT_DIR.value] for t in (chief, worker)}
        assert len(dirs) == 2, dirs  # no directory shared between the processes
        chief.wait_for_step(10, TIMEOUT)
        worker.signal(signal.SIGTERM)
        assert g.wait_all(TIMEOUT) == [ExitCode.PREEMPTED_SAVED] * 2, g.logs()
        saved = [_matches(PREEMPTED_LINE, t) for t in (chief, worker)]
        assert len(saved[0]) == 1 and saved[0] == saved[1], g.logs()
        step = saved[0][0]
        assert "test: restored_step=0" in chief.text(), chief.tail()
        published = json.loads(store.get(location.key("coordinator.json")) or b"{}")
        assert published["address"].startswith("127.0.0.2:"), published
        committed = store.list(location.key(ORBAX) + "/")
        mine = [k for k in committed if f"/g0000000001/{step}/" in k]
        assert any(k.endswith(f"/{step}/commit_success.txt") for k in mine), committed
        assert {"ocdbt.process_0", "ocdbt.process_1"} <= {
            part for k in mine for part in k.split("/") if part.startswith("ocdbt.process_")
        }, mine
        assert not list((tmp / "local").glob("*/backup/orbax")), "a backup written locally"
        planted = _plant_half_written(store, location, step, step + 40)

        # 2. Fresh local directories: the group forms through the bucket, resumes at the
        # agreed step (not the half-written one past it); the store is down for OUTAGE_S
        # (training waits at the next backup, nothing fails), and it trains to the exact end.
        chief, _ = g.start()
        chief.wait_for_step(step + 10, TIMEOUT)
        outage.down()
        down_at = max(chief.steps())
        time.sleep(OUTAGE_S)
        up_at = max(chief.steps())
        outage.up()
        assert g.wait_all(TIMEOUT) == [0, 0], g.logs()
        resumed = [_matches(RESUMED_LINE, t) for t in g.trainers]
        assert resumed == [[step], [step]], g.logs()
        assert f"generation 2, restoring step {step} of generation 1" in g.trainers[0].text()
        assert f"test: restored_step={step}" in g.trainers[1].text(), g.logs()
        assert not store.list(planted), "the half-written step was not removed"
        done = json.loads((g_output(tmp) / "progress.json").read_text())
        assert done["step"] == TOTAL and done["done"] is True, done
        disrupted = g.final_weights()
    finally:
        g.stop()
        outage.close()
    print(
        f"\nSIGTERM saved at step {step}; resumed there from gs://, half-written ignored; "
        f"store down {OUTAGE_S}s from step {down_at} (step {up_at} when it came back)"
    )
    assert len(undisturbed) == len(disrupted) > 0
    for x, y in zip(undisturbed, disrupted, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def _lone_trainer(tmp: Path, env: dict[str, str]) -> Trainer:
    (port,) = free_ports(1)
    full = {
        **jax_identity(f"127.0.0.1:{port}", 1, 0),
        **env,
        Env.TRAINER_CONFIG.value: json.dumps({"backend": "jax", "epochs": 1, "stepsPerEpoch": 5}),
        Env.CHECKPOINT_DIR.value: str(tmp / "ckpt"),
    }
    return Trainer("lone", tmp, full)


def _reason(t: Trainer) -> str:
    assert t.wait(60) == ExitCode.INVALID_CONFIG, t.text()
    reason = contract.invalid_config_reason(t.termination_message())
    assert reason is not None, t.termination_message()
    return reason


def test_a_gs_store_that_cannot_be_reached_at_start_is_exit_78_with_its_reason(
    tmp_path: Path,
) -> None:
    (dead,) = free_ports(1)
    env = {
        Env.CHECKPOINT_LOCATION.value: "gs://kerasjob/jobs/unreachable",
        Env.CHECKPOINT_ENDPOINT.value: f"http://127.0.0.1:{dead}",
    }
    started = time.monotonic()
    reason = _reason(_lone_trainer(tmp_path, env))
    print(f"\nexit 78 after {time.monotonic() - started:.1f}s: {reason}")
    assert reason.startswith(
        f"checkpoint location gs://kerasjob/jobs/unreachable at http://127.0.0.1:{dead}: "
        "the store cannot be reached"
    ), reason


def test_a_missing_gs_bucket_is_exit_78_with_its_reason(
    tmp_path: Path, stores: objectstores.Stores
) -> None:
    env = {
        Env.CHECKPOINT_LOCATION.value: "gs://no-such-bucket/jobs/x",
        Env.CHECKPOINT_ENDPOINT.value: stores.gcs_endpoint,
    }
    reason = _reason(_lone_trainer(tmp_path, env))
    assert reason.startswith(
        f"checkpoint location gs://no-such-bucket/jobs/x at {stores.gcs_endpoint}: "
        "the bucket does not exist"
    ), reason


def test_s3_is_refused_for_keras3_with_exit_78(tmp_path: Path) -> None:
    env = {Env.CHECKPOINT_LOCATION.value: "s3://kerasjob/jobs/x"}
    reason = _reason(_lone_trainer(tmp_path, env))
    assert reason == (
        "checkpoint location s3://kerasjob/jobs/x: Keras 3 backups need gs:// or a volume: "
        "Orbax cannot write s3:// (orbax #2739)"
    ), reason


def test_a_zombie_commit_and_a_half_written_step_never_count(
    stores: objectstores.Stores,
) -> None:
    """Generation 1 committed step 10 and left step 20 half-written; generation 2 claimed,
    restoring 10; then a zombie of generation 1 committed step 30: void, since generation 2
    restored below it. Generation 3 restores step 10 of generation 1, and its start removes
    the half-written and the void step."""
    from kerasjob_trainer.runtimes.keras3 import bucket
    from kerasjob_trainer.shared.bucket_steps import BucketSteps, Committed
    from kerasjob_trainer.shared.bucket_sync import BucketConfig

    location = Location.parse(f"gs://{stores.bucket}/jobs/zombie-{time.time_ns()}")
    config = BucketConfig(location, stores.gcs_endpoint)
    store = open_store(location, endpoint=stores.gcs_endpoint)
    steps = BucketSteps(store, location)

    def write(generation: int, step: int, *, commit: bool) -> None:
        at = location.key(bucket.generation_dir(generation), str(step))
        store.put(f"{at}/state/ocdbt.process_0/manifest.ocdbt", b"x")
        if commit:
            store.put(f"{at}/commit_success.txt", b"ok")

    assert bucket.claim(steps, config) == (1, None)
    write(1, 10, commit=True)
    write(1, 20, commit=False)
    assert bucket.committed(steps, config) == [Committed(10, 1)]
    assert bucket.claim(steps, config) == (2, Committed(10, 1))
    write(1, 30, commit=True)  # the zombie, after generation 2's fence
    assert bucket.committed(steps, config) == [Committed(10, 1)]
    assert bucket.claim(steps, config) == (3, Committed(10, 1))
    assert bucket.clean(steps, config, 3) == 2
    base = location.key(ORBAX) + "/"
    left = {tuple(k[len(base) :].split("/")[:2]) for k in store.list(base)}
    assert left == {("g0000000001", "10")}, store.list(base)


def test_the_coordinator_object_is_fresh_while_touched_and_stale_after(
    stores: objectstores.Stores,
) -> None:
    """The object keeps the file's semantics: fresh while process 0 touches it (the time
    inside the JSON), stale FRESH_SECONDS after the last touch, and an object that was ever
    written counts as published (no name tried while it is fresh)."""
    from kerasjob_trainer.runtimes.keras3 import bucket
    from kerasjob_trainer.shared import rendezvous
    from kerasjob_trainer.shared.bucket_sync import BucketConfig

    location = Location.parse(f"gs://{stores.bucket}/jobs/board-{time.time_ns()}")
    board = bucket.board(BucketConfig(location, stores.gcs_endpoint))
    assert rendezvous.read_fresh(board) is None and not board.exists()
    published = rendezvous.publish(board, 1234, mine={"10.0.0.9"})
    assert published is not None
    first = board.read()
    assert first is not None and first[0] == "10.0.0.9:1234"
    deadline = time.monotonic() + 5 * rendezvous.TOUCH_SECONDS
    while (now := board.read()) is not None and now[1] == first[1]:
        assert time.monotonic() < deadline, "never touched"
        time.sleep(0.1)
    published.done()
    assert rendezvous.read_fresh(board) == "10.0.0.9:1234" and board.exists()
    later = time.time() + rendezvous.FRESH_SECONDS + 2  # a successor's reader, long after
    assert rendezvous.read_fresh(board, now=lambda: later) is None


RESHARD_PRELUDE = """
import json, os, sys
import numpy as np
import keras
from kerasjob_trainer.runtimes.keras3 import bucket, checkpoint, state

config = bucket.config_from(os.environ)
dist = keras.distribution

def build():
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(3)])
    m.compile(optimizer="adam", loss="mse")
    return m

def values(m):
    return [np.asarray(v.numpy()).tobytes().hex() for v in state.variables(m)]

place = bucket.open_place(config, 0, 1, os.environ)
print("PLACE", place.generation, place.chosen)
"""

SHARDED_TO_GS = """
mesh = dist.DeviceMesh((1, 2), ("batch", "model"), dist.list_devices())
layout = dist.LayoutMap(mesh)
layout["sequential/dense/kernel"] = (None, "model")
dist.set_distribution(dist.ModelParallel(layout_map=layout, batch_dim_name="batch"))
m = build()
rng = np.random.default_rng(0)
m.fit(rng.random((32, 6), dtype=np.float32), rng.random((32, 3), dtype=np.float32),
      batch_size=8, verbose=0)
assert not state.variables(m)[0].value.sharding.is_fully_replicated
b = checkpoint.Backups(sys.argv[1], place=place)
b.save(m, checkpoint.Header(step=3, processes=1))
b.close()
print("VALUES", json.dumps(values(m)))
"""

REPLICATED_FROM_GS = """
dist.set_distribution(dist.DataParallel(devices=dist.list_devices()))
m = build()
r = checkpoint.Backups(sys.argv[1], place=place).restore(m)
assert r.header.step == 3 and r.matched_by == "path", r
assert all(v.value.sharding.is_fully_replicated for v in state.variables(m))
print("VALUES", json.dumps(values(m)))
"""


def _child(code: str, env: dict[str, str], tmp: Path) -> str:
    import os
    import subprocess

    full = {
        **os.environ,
        **env,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "TF_USE_LEGACY_KERAS": "0",
    }
    script = textwrap.dedent(RESHARD_PRELUDE) + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp / "backup")],
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_sharded_backup_in_gs_restores_resharded_in_the_next_generation(
    tmp_path: Path, stores: objectstores.Stores
) -> None:
    """Saved to gs:// with a kernel split over 2 devices by generation 1, restored by
    generation 2 into the same model replicated on both (Orbax reshards): bit for bit."""
    env = _gs_env(stores, f"jobs/reshard-{time.time_ns()}")
    from kerasjob_trainer.runtimes.keras3 import bucket

    bucket.orbax_env(bucket.config_from(env), env)  # type: ignore[arg-type]
    saved = _child(SHARDED_TO_GS, env, tmp_path)
    assert "PLACE 1 None" in saved, saved
    restored = _child(REPLICATED_FROM_GS, env, tmp_path)
    assert "PLACE 2 Committed(step=3, generation=1, parts=())" in restored, restored
    values = [json.loads(out.split("VALUES ", 1)[1]) for out in (saved, restored)]
    assert values[0] == values[1] and values[0]
    assert not (tmp_path / "backup").exists()  # nothing on the local disk

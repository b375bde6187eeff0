"""Sharded models (spec.trainer.mesh) in real multi-process JAX on CPU: 2 processes x 2 CPU
devices each (XLA_FLAGS), ModelParallel over the job's mesh, as the operator starts them."""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kerasjob_contract import (
    LOG_PREEMPTED_RE,
    LOG_RESUMED_RE,
    invalid_config_line,
    invalid_config_reason,
)
from kerasjob_dev.trainer_procs import group, progress

pytestmark = [pytest.mark.tf, pytest.mark.slow]

TIMEOUT = 300.0
TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
MESH_2X2 = [{"name": "batch", "size": 2}, {"name": "model", "size": 2}]

SCRIPT = """
import json, os, sys
import numpy as np
from kerasjob_trainer.keras3 import session

job = session.start()
import keras

layout = keras.distribution.LayoutMap(job.device_mesh)
for key, axes in json.loads(sys.argv[1]).items():
    layout[key] = tuple(axes)
job.shard(layout)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="d1"),
                          keras.layers.Dense(2, name="d2")])
model.compile(optimizer="adam", metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
os.makedirs(job.output_dir, exist_ok=True)
specs = {v.path: [a for a in v.value.sharding.spec] for v in model.trainable_variables}
with open(os.path.join(job.output_dir, f"specs-{job.index}.json"), "w") as f:
    json.dump(specs, f)
rng = np.random.default_rng(0)
x = rng.random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype(np.int64)
job.fit(model, (x, y), epochs=2, steps_per_epoch=20, global_batch_size=job.global_batch_size(16))
job.finish(model)
"""


def _script(tmp_path: Path, layout: dict[str, list[str | None]]) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return {
        "command": [sys.executable, str(script), json.dumps(layout)],
        "saveFreq": 10,
        "mesh": MESH_2X2,
        "devicesPerProcess": 2,
    }


def test_a_sharded_mlp_trains_with_its_kernels_sharded(tmp_path: Path) -> None:
    layout = {"sequential/d1/kernel": [None, "model"], "sequential/d2/kernel": ["model", None]}
    with group(tmp_path, _script(tmp_path, layout), backend="jax", env=TWO_DEVICES) as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [0, 0], g.logs()
        for i in (0, 1):
            specs = json.loads((g.output / f"specs-{i}.json").read_text())
            assert specs["sequential/d1/kernel"] == [None, "model"], specs
            assert specs["sequential/d2/kernel"] == ["model", None], specs
            assert specs["sequential/d1/bias"] == [None], specs  # not in the layout: replicated
        chief = g.trainers[0].text()
        assert "mesh batch=2 x model=2 (ModelParallel, batch axis 'batch')" in chief, chief
        assert "part 1 of 2 of each global batch" in chief
        assert "part 2 of 2 of each global batch" in g.trainers[1].text()
        assert "global batch 32" in chief  # 16 per replica x 2 replicas (the batch axis)
        assert progress(g)["step"] == 40 and progress(g)["done"] is True
        assert (g.output / "model.keras").is_file()


def test_a_layout_that_shards_nothing_exits_78_naming_the_paths(tmp_path: Path) -> None:
    """'d1/kernel' is re.fullmatch'ed against 'sequential/d1/kernel': it matches nothing."""
    layout = {"d1/kernel": [None, "model"]}
    with group(tmp_path, _script(tmp_path, layout), backend="jax", env=TWO_DEVICES) as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [78, 78], g.logs()
        text = g.trainers[0].text()
        line = next(x for x in text.splitlines() if "invalid configuration" in x)
        assert "the layout shards no variable of the model" in line, line
        assert "'d1/kernel'" in line and "sequential/d1/kernel" in line, line
        assert not (g.ckpt / "backup").exists() or not any((g.ckpt / "backup").iterdir())


MESH_2X4 = [{"name": "batch", "size": 2}, {"name": "model", "size": 4}]
NOT_FIT = (
    "kerasjob: invalid configuration: mesh batch=2 x model=4 needs 8 devices, but the "
    "job has 2 process(es) x 2 device(s) = 4"
)

#: Process 1 reaches the mesh check 5 s after process 0 (which serves JAX's coordination
#: service): process 0 must not take the service down under it before it finds the same.
SLOW_PEER = """
import time
from kerasjob_trainer.runtimes.keras3 import mesh

setup = mesh.Sharding.setup.__func__

def slow(cls, *args, **kwargs):
    import jax
    if jax.process_index() == 1:
        time.sleep(5)
    return setup(cls, *args, **kwargs)

mesh.Sharding.setup = classmethod(slow)
from kerasjob_trainer.keras3 import session
session.start()
"""


def test_a_mesh_that_does_not_fit_exits_78(tmp_path: Path) -> None:
    config = {"model": "mnist-mlp", "mesh": MESH_2X4}
    with group(tmp_path, config, backend="jax", env=TWO_DEVICES) as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [78, 78], g.logs()
        assert NOT_FIT in g.trainers[0].text(), g.logs()


def test_a_mesh_needing_more_devices_than_the_job_has_leaves_the_reason_for_the_operator(
    tmp_path: Path,
) -> None:
    """One process with one device, mesh batch=1 x model=4: exit 78, and the container's
    termination message (after the chief's last metrics) holds the reason the operator puts
    in the job's Failed condition and event."""
    mesh = [{"name": "batch", "size": 1}, {"name": "model", "size": 4}]
    with group(tmp_path, {"model": "mnist-mlp", "mesh": mesh}, workers=1, backend="jax") as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [78], g.logs()
        reason = (
            "mesh batch=1 x model=4 needs 4 devices, but the job has 1 process(es) x "
            "1 device(s) = 1"
        )
        assert invalid_config_line(reason) in g.trainers[0].lines(), g.logs()
        message = g.trainers[0].termination_message()
        assert invalid_config_reason(message) == reason, message
        assert message.splitlines()[-1] == invalid_config_line(reason), message


def test_mesh_axes_the_keras_hub_layout_cannot_use_exit_78_naming_them(tmp_path: Path) -> None:
    """The KerasHub example on mesh data=2 x tensor=2 (one process, 4 CPU devices): its
    backbone's get_layout_map shards on axes named batch and model, and KerasHub's own check
    fails with AttributeError ('DeviceMesh' object has no attribute 'axis_name'): an exit 1,
    retried until backoffLimit, before. Now exit 78, the reason naming both sets of axes."""
    mesh = [{"name": "data", "size": 2}, {"name": "tensor", "size": 2}]
    config = {"model": "kerasjob_trainer.examples.keras_hub_lora:build", "mesh": mesh}
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    with group(tmp_path, config, workers=1, backend="jax", env=env) as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [78], g.logs()
        reason = invalid_config_reason(g.trainers[0].termination_message())
        assert reason is not None, g.logs()
        assert reason.startswith("mesh data=2 x tensor=2:"), reason
        assert "'batch'" in reason and "'model'" in reason, reason
        assert "'data'" in reason and "'tensor'" in reason, reason
        assert invalid_config_line(reason) in g.trainers[0].lines(), g.logs()


def test_every_process_exits_78_when_a_peer_reaches_the_check_late(tmp_path: Path) -> None:
    """CI once saw [78, 43]: process 0 exited at its check while process 1 was still on its
    way to the same one, and JAX's runtime aborted process 1 (a lost peer)."""
    script = tmp_path / "slow_peer.py"
    script.write_text(SLOW_PEER)
    config = {"command": [sys.executable, str(script)], "mesh": MESH_2X4}
    with group(tmp_path, config, backend="jax", env=TWO_DEVICES) as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [78, 78], g.logs()
        for t in g.trainers:
            assert NOT_FIT in t.text(), g.logs()


BUILTIN = {"model": "mnist-mlp", "epochs": 1, "stepsPerEpoch": 30, "saveFreq": 10, "seed": 7}


def test_a_batch_axis_smaller_than_the_devices_keeps_the_global_batch(tmp_path: Path) -> None:
    """mnist-mlp on mesh batch=1 x model=4 (its kernels sharded over all 4 devices of both
    processes): one model replica, so the global batch is batchSizePerReplica x 1 and both
    processes feed all of it; the weights end as DataParallel's on the same global batches
    (same examples, another summation order)."""
    from kerasjob_trainer.runtimes.keras3.data import global_batch_indices
    from kerasjob_trainer.shared.data import MNIST_SAMPLE_TRAIN

    runs = {
        "mesh": {
            **BUILTIN,
            "batchSizePerReplica": 64,
            "mesh": [{"name": "batch", "size": 1}, {"name": "model", "size": 4}],
        },
        "dp": {**BUILTIN, "batchSizePerReplica": 16},  # 16 x 4 devices = 64
    }
    weights = {}
    for name, config in runs.items():
        (tmp_path / name).mkdir()
        env = {**TWO_DEVICES, "KERASJOB_AUDIT_DIR": str(tmp_path / name / "audit")}
        with group(tmp_path / name, config, backend="jax", env=env) as g:
            g.start()
            assert g.wait_all(TIMEOUT) == [0, 0], g.logs()
            weights[name] = g.final_weights()
            if name == "mesh":
                assert "global batch 64" in g.trainers[0].text(), g.logs()
                # the kernels split across both processes were read whole for the save
                gathered = "variable(s) split across processes gathered whole"
                assert all(gathered in t.text() for t in g.trainers), g.logs()
                for worker in ("worker0", "worker1"):
                    got = {r["step"]: r["indices"] for r in g.audit_records(f"data-{worker}.jsonl")}
                    for step in (0, 17, 29):
                        want = global_batch_indices(step, 64, MNIST_SAMPLE_TRAIN, 7).tolist()
                        assert got[step] == want, (worker, step)
    assert len(weights["mesh"]) == len(weights["dp"]) > 0
    for a, b in zip(weights["mesh"], weights["dp"], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-4)


def _steps(pattern: str, text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := re.match(pattern, line))]


def test_an_elastic_mesh_shrinks_its_batch_axis_and_keeps_the_global_batch(
    tmp_path: Path,
) -> None:
    """An elastic job on mesh batch=2 x model=2 (2 processes x 2 devices, mnist-mlp's kernels
    on model) is stopped at step 15 and resumed on 1 process: its mesh becomes batch=1 x
    model=2, Orbax restores the backup into that layout, and the one process trains on the
    same global batches (32 per replica x 2 replicas at the preferred size) from the saved
    step on, feeding both processes' shares."""
    from kerasjob_trainer.runtimes.keras3.data import global_batch_indices
    from kerasjob_trainer.shared.data import MNIST_SAMPLE_TRAIN

    config = {
        **BUILTIN,
        "epochs": 2,
        "stepsPerEpoch": 50,
        "batchSizePerReplica": 32,
        "logEverySteps": 1,
        "mesh": MESH_2X2,
        "devicesPerProcess": 2,
        "elastic": {"preferredWorkers": 2},
    }
    env = {**TWO_DEVICES, "KERASJOB_AUDIT_DIR": str(tmp_path / "audit")}
    with group(tmp_path, config, backend="jax", env=env) as g:
        trainers = g.start()
        trainers[0].wait_for_step(15, TIMEOUT)
        trainers[1].signal(signal.SIGTERM)
        assert g.wait_all(TIMEOUT) == [42, 42], g.logs()
        saved = _steps(LOG_PREEMPTED_RE, g.trainers[0].text())[0]
        g.start(1)
        assert g.wait_all(TIMEOUT) == [0], g.logs()
        text = g.trainers[0].text()
        assert "mesh batch=1 x model=2 (ModelParallel" in text, text
        assert "elastic: 1 of 2 preferred workers; global batch 64 kept" in text, text
        assert _steps(LOG_RESUMED_RE, text) == [saved], text
        assert progress(g)["step"] == 100
        w0 = {r["step"]: r["indices"] for r in g.audit_records("data-worker0.jsonl")}
        w1 = {r["step"]: r["indices"] for r in g.audit_records("data-worker1.jsonl")}
        for step in (0, saved - 1, saved, 99):
            expected = global_batch_indices(step, 64, MNIST_SAMPLE_TRAIN, BUILTIN["seed"])
            mine = w0[step] + w1[step] if step < saved else w0[step]
            assert mine == expected.tolist(), step


def test_the_keras_hub_lora_example_trains_sharded_from_arrayrecord_files(tmp_path: Path) -> None:
    """kerasjob_trainer.examples.keras_hub_lora on mesh batch=2 x model=2 (its backbone's own
    layout) with spec.trainer.dataset naming ArrayRecord files: the model function returns
    the model alone and the trainer reads the files through Grain (64 windows there, 4096 in
    the example's own arrays: every index the processes fed is below 64)."""
    from kerasjob_trainer.examples import keras_hub_lora
    from kerasjob_trainer.runtimes.keras3 import records

    x, y = keras_hub_lora.byte_windows(keras_hub_lora.SEQUENCE, limit=64)
    records.write_split(str(tmp_path / "data"), "train", x, y, shards=2)
    config = {
        "model": "kerasjob_trainer.examples.keras_hub_lora:build",
        "mesh": MESH_2X2,
        "devicesPerProcess": 2,
        "epochs": 1,
        "stepsPerEpoch": 6,
        "batchSizePerReplica": 4,
        "saveFreq": 3,
        "dataset": {"source": "path", "path": str(tmp_path / "data"), "format": "arrayrecord"},
    }
    env = {**TWO_DEVICES, "KERASJOB_AUDIT_DIR": str(tmp_path / "audit")}
    with group(tmp_path, config, backend="jax", env=env) as g:
        g.start()
        assert g.wait_all(TIMEOUT) == [0, 0], g.logs()
        chief = g.trainers[0].text()
        assert "mesh batch=2 x model=2" in chief and "global batch 8" in chief, chief
        assert f"dataset {tmp_path / 'data'}: 64 examples in ArrayRecord files (Grain)" in chief
        assert progress(g)["step"] == 6 and progress(g)["done"] is True
        for worker in ("worker0", "worker1"):
            fed = {r["step"]: r["indices"] for r in g.audit_records(f"data-{worker}.jsonl")}
            assert sorted(fed) == list(range(6)), (worker, fed)
            # half of each global batch of 8, from the 64 examples in the files
            assert all(len(i) == 4 and max(i) < 64 for i in fed.values()), (worker, fed)
        assert (g.output / "model.keras").is_file()

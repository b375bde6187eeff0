"""Backups in a bucket (KERASJOB_CHECKPOINT_LOCATION=s3://...) with real TensorFlow on 2
worker processes and a real S3 server (versitygw): no shared directory at all, each process
gets an empty checkpoint directory of its own in every generation (a new Pod each time).

The job runs through the agreed save on SIGTERM (both exit 42) and a SIGKILL of worker 1
(the chief exits 43), each generation resuming at the step the bucket had committed, and
ends with the exact step count and (deterministic) the same final weights as the same job
run undisturbed on a shared volume. A store that cannot be reached at start is exit 78
with a one-line reason before TensorFlow starts."""

from __future__ import annotations

import json
import signal
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
    tf_config,
)
from kerasjob_trainer.shared.bucket_steps import BucketSteps
from kerasjob_trainer.shared.objectstore import Location, open_store

pytestmark = [pytest.mark.tf, pytest.mark.slow]

SAVE_FREQ = 5
CONFIG = {
    "model": "dropmodel:build",
    "epochs": 2,
    "stepsPerEpoch": 20,
    "saveFreq": SAVE_FREQ,
    "logEverySteps": 1,
    "batchSizePerReplica": 16,
    "deterministic": True,
}
TOTAL = 40
GEN_TIMEOUT = 150

# Dropout: its random state is in every backup (deterministic), so it is in the bucket too.
USER_MODULE = """
import tf_keras as keras


def build(config):
    model = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10),
    ])
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model
"""


class BucketGroup(Group):
    """Every process of every generation gets a new, empty checkpoint directory (a Pod's
    emptyDir); only the chief's output directory is shared (model.keras, progress.json)."""

    def checkpoint_dir(self, role: str, index: int) -> Path:
        return self.tmp / "local" / f"g{self.generation}-{role}{index}"


def _env(stores: objectstores.Stores, prefix: str, scheme: str = "s3") -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": stores.env["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": stores.env["AWS_SECRET_ACCESS_KEY"],
        Env.CHECKPOINT_LOCATION.value: f"{scheme}://{stores.bucket}/{prefix}",
        Env.CHECKPOINT_ENDPOINT.value: stores.s3_endpoint
        if scheme == "s3"
        else stores.gcs_endpoint,
        Env.CHECKPOINT_PATH_STYLE.value: "true",
    }


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The final weights of the job run once, undisturbed, on a shared volume."""
    tmp = tmp_path_factory.mktemp("undisturbed")
    (tmp / "dropmodel.py").write_text(USER_MODULE)
    base = Group(tmp, CONFIG, env={"PYTHONPATH": str(tmp)})
    try:
        base.start()
        assert base.wait_all(GEN_TIMEOUT) == [0, 0], base.logs()
    finally:
        base.stop()
    return base.final_weights()


def _bucket_group(
    tmp: Path, stores: objectstores.Stores, endpoint: str | None = None, scheme: str = "s3"
) -> BucketGroup:
    (tmp / "dropmodel.py").write_text(USER_MODULE)
    env = {
        **_env(stores, f"jobs/{tmp.name}", scheme),
        **({Env.CHECKPOINT_ENDPOINT.value: endpoint} if endpoint else {}),
        "PYTHONPATH": str(tmp),
        Env.OUTPUT_DIR.value: str(tmp / "ckpt" / "output"),
    }
    return BucketGroup(tmp, CONFIG, env=env)


def _same_weights(undisturbed: list[Any], g: Group) -> None:
    done = json.loads((g.ckpt / "output" / "progress.json").read_text())
    assert done["step"] == TOTAL and done["done"], done
    got = g.final_weights()
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(undisturbed, got, strict=True))
    print(f"max |volume - bucket| final weight difference: {diff}")
    assert diff == 0.0


def _committed(stores: objectstores.Stores, g: Group) -> int:
    """The newest committed step in the job's bucket location (0: none)."""
    location = Location.parse(g.env[Env.CHECKPOINT_LOCATION.value])
    endpoint = stores.s3_endpoint if location.scheme == "s3" else stores.gcs_endpoint
    store = open_store(location, endpoint=endpoint, path_style=True, env=stores.env)
    latest = BucketSteps(store, location).latest()
    return latest.step if latest else 0


def _first(lines: list[str], pattern: Any) -> int:
    found = [int(m.group(1)) for line in lines if (m := pattern.match(line))]
    assert found, "\n".join(lines[-30:])
    return found[0]


@pytest.mark.timeout(600)
def test_two_workers_without_a_shared_directory_resume_exactly_from_the_bucket(
    tmp_path: Path, stores: objectstores.Stores, undisturbed: list[Any]
) -> None:
    hit = _bucket_group(tmp_path, stores)
    try:
        # 1. SIGTERM to the chief: the group saves at one agreed step, the chief commits it.
        chief, worker = hit.start()
        chief.wait_for_step(8, GEN_TIMEOUT)
        chief.signal(signal.SIGTERM)
        assert [chief.wait(60), worker.wait(60)] == [ExitCode.PREEMPTED_SAVED] * 2, hit.logs()
        saved = _first(chief.lines(), PREEMPTED_LINE)
        assert _committed(stores, hit) == saved, chief.tail()
        assert f"kerasjob: backup of step {saved} committed to" in chief.text()

        # 2. Resumed there from empty local directories; SIGKILL worker 1 past a backup.
        chief, worker = hit.start()
        worker.wait_for_step(saved + SAVE_FREQ + 3, GEN_TIMEOUT)
        worker.signal(signal.SIGKILL)
        assert chief.wait(30) == ExitCode.PEER_LOST, chief.tail()
        resumed = [_first(t.lines(), RESUMED_LINE) for t in (chief, worker)]
        assert resumed == [saved, saved], hit.logs()
        killed_at, committed = max(worker.steps()), _committed(stores, hit)
        # The backups count from the resumed step: saved + 5, saved + 10, ...
        assert saved < committed <= killed_at and (committed - saved) % SAVE_FREQ == 0

        # 3. Resumed at the committed step; runs to the end.
        hit.start()
        assert hit.wait_all(GEN_TIMEOUT) == [0, 0], hit.logs()
        resumed = [_first(t.lines(), RESUMED_LINE) for t in hit.trainers]
        assert resumed == [committed, committed], hit.logs()
    finally:
        hit.stop()
    print(f"\nSIGTERM saved at {saved}; SIGKILL at {killed_at}, resumed at {committed}")
    _same_weights(undisturbed, hit)


@pytest.mark.timeout(600)
def test_the_store_down_mid_run_and_at_sigterm_loses_only_uncommitted_steps(
    tmp_path: Path, stores: objectstores.Stores, undisturbed: list[Any]
) -> None:
    """The store goes away after the first backup is committed: training goes on, the
    pushes fail (one line each), and the agreed SIGTERM save cannot be committed; both exit
    42, and with the store back the job resumes at the last committed step, exactly."""
    outage = objectstores.Outage(stores.s3_endpoint)
    hit = _bucket_group(tmp_path, stores, outage.endpoint)
    try:
        chief, worker = hit.start()
        chief.wait_for_step(1, GEN_TIMEOUT)
        deadline = time.monotonic() + 30
        while (committed := _committed(stores, hit)) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert committed == SAVE_FREQ, chief.tail()
        outage.down()
        began, at = time.monotonic(), max(chief.steps())
        chief.wait_for_step(at + 2 * SAVE_FREQ, GEN_TIMEOUT)  # trains on while it is down
        chief.signal(signal.SIGTERM)
        termed = time.monotonic()
        assert [chief.wait(60), worker.wait(60)] == [ExitCode.PREEMPTED_SAVED] * 2, hit.logs()
        saved = _first(chief.lines(), PREEMPTED_LINE)
        down_for, exit_s = time.monotonic() - began, time.monotonic() - termed
        assert f"kerasjob: backup of step {saved} not committed to" in chief.text(), chief.tail()
        assert _committed(stores, hit) == committed
        assert f"backup of step {committed} not committed" not in chief.text()

        outage.up()
        hit.start()
        assert hit.wait_all(GEN_TIMEOUT) == [0, 0], hit.logs()
        resumed = [_first(t.lines(), RESUMED_LINE) for t in hit.trainers]
        assert resumed == [committed, committed], hit.logs()
    finally:
        hit.stop()
        outage.close()
    print(
        f"\nstore down {down_for:.1f}s from step {at}; SIGTERM saved at {saved} (not "
        f"committed; the chief exited 42 {exit_s:.1f}s after SIGTERM); resumed at {committed}"
    )
    _same_weights(undisturbed, hit)


@pytest.mark.timeout(300)
def test_gcs_sigterm_save_resumes_exactly(
    tmp_path: Path, stores: objectstores.Stores, undisturbed: list[Any]
) -> None:
    """The same on gs:// (fake-gcs-server): the agreed save committed, resumed there."""
    hit = _bucket_group(tmp_path, stores, scheme="gs")
    try:
        chief, worker = hit.start()
        worker.wait_for_step(8, GEN_TIMEOUT)
        worker.signal(signal.SIGTERM)  # an eviction of a non-chief
        assert [chief.wait(60), worker.wait(60)] == [ExitCode.PREEMPTED_SAVED] * 2, hit.logs()
        saved = _first(chief.lines(), PREEMPTED_LINE)
        assert _committed(stores, hit) == saved, chief.tail()
        hit.start()
        assert hit.wait_all(GEN_TIMEOUT) == [0, 0], hit.logs()
        resumed = [_first(t.lines(), RESUMED_LINE) for t in hit.trainers]
        assert resumed == [saved, saved], hit.logs()
    finally:
        hit.stop()
    _same_weights(undisturbed, hit)


def test_a_store_that_cannot_be_reached_at_start_is_exit_78_with_its_reason(
    tmp_path: Path, stores: objectstores.Stores
) -> None:
    (dead,) = free_ports(1)
    env = {
        **_env(stores, "jobs/unreachable"),
        Env.CHECKPOINT_ENDPOINT.value: f"http://127.0.0.1:{dead}",
        Env.TRAINER_CONFIG.value: json.dumps({"epochs": 1, "stepsPerEpoch": 10}),
        Env.CHECKPOINT_DIR.value: str(tmp_path / "ckpt"),
        Env.TF_CONFIG.value: "",
    }
    started = time.monotonic()
    t = Trainer("unreachable", tmp_path, env)
    assert t.wait(60) == ExitCode.INVALID_CONFIG, t.text()
    took = time.monotonic() - started
    reason = contract.invalid_config_reason(t.termination_message())
    print(f"\nexit 78 after {took:.1f}s: {reason}")
    assert reason is not None, t.termination_message()
    assert reason.startswith(
        f"checkpoint location s3://{stores.bucket}/jobs/unreachable at http://127.0.0.1:{dead}: "
        "the store cannot be reached"
    ), reason
    assert took < 40


def test_a_sidecar_evaluator_with_a_bucket_is_exit_78(
    tmp_path: Path, stores: objectstores.Stores
) -> None:
    """It reads the chief's backups from a shared directory, which a bucket job lacks: a
    reason at once rather than an evaluator that waits for ever."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    env = {
        **_env(stores, "jobs/evaluator"),
        Env.TRAINER_CONFIG.value: json.dumps({"epochs": 1, "stepsPerEpoch": 10}),
        Env.CHECKPOINT_DIR.value: str(tmp_path / "ckpt"),
        Env.TF_CONFIG.value: tf_config(cluster, "evaluator", 0),
    }
    t = Trainer("evaluator", tmp_path, env)
    assert t.wait(60) == ExitCode.INVALID_CONFIG, t.text()
    reason = contract.invalid_config_reason(t.termination_message())
    assert reason is not None and reason.startswith("the sidecar evaluator reads"), reason

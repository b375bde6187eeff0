"""The parameter-server runtime with real TensorFlow: a chief, 2 workers and 1 ps as local
processes (`trainer_procs`), this test playing the operator (no in-place restarts).

What holds, and is checked here: exactly epochs x stepsPerEpoch steps; a lost worker stops
nobody (the chief's `fit` goes on, the worker rejoins); a lost ps restarts the group from
the last backup at exactly its step; a SIGTERM to the ps makes the chief save at a step
boundary, and the group resumes there. Not bit-identical weights (asynchronous updates)."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

from kerasjob_contract import Env
from kerasjob_dev import objectstores
from kerasjob_dev.trainer_procs import (
    RESUMED_LINE,
    Group,
    Trainer,
    group,
    private_directory,
    progress,
)
from kerasjob_trainer.runtimes.tf_ps.backup import latest_step

CONFIG = {"epochs": 3, "stepsPerEpoch": 100, "saveFreq": 50, "batchSizePerReplica": 32}
TOTAL = 300
TIMEOUT = 600.0


def _ps_group(tmp: Path, **config: int):  # type: ignore[no-untyped-def]
    return group(tmp, {**CONFIG, **config}, workers=2, chief=True, ps=1)


def _by_role(g: Group) -> dict[str, Trainer]:
    return {t.name.split("-", 1)[1]: t for t in g.trainers}


def _restart(g: Group, t: Trainer) -> Trainer:
    """The same task again at the same address (the operator's re-created Pod)."""
    new = Trainer(f"{t.name}b", g.tmp, t.env)
    g.trainers[g.trainers.index(t)] = new
    return new


def _resumed_at(t: Trainer) -> list[int]:
    return [int(m.group(1)) for line in t.lines() if (m := RESUMED_LINE.match(line))]


def _run_until(g: Group, step: int) -> dict[str, Trainer]:
    """A generation started, its chief past `step`."""
    g.start()
    tasks = _by_role(g)
    tasks["chief0"].wait_for_step(step, TIMEOUT)
    return tasks


def _resumes_at(g: Group, step: int) -> Trainer:
    """The next generation resumes at exactly `step` and trains to the end; its chief."""
    g.start()
    chief = _by_role(g)["chief0"]
    _finishes(g)
    assert _resumed_at(chief) == [step]
    return chief


def _finishes(g: Group, total: int = TOTAL, test_accuracy: bool = True) -> None:
    codes = g.wait_all(TIMEOUT)
    assert codes == [0, 0, 0, 0], g.logs()
    p = progress(g)
    assert p["done"] and p["step"] == total and p["totalSteps"] == total
    assert not test_accuracy or p["metrics"]["test_accuracy"] > 0.5
    assert (g.output / "model.keras").exists()


def test_a_lost_worker_stops_nobody_and_rejoins(tmp_path: Path) -> None:
    # Long enough for the worker to start again (TensorFlow's import: 20-30 s here) and
    # rejoin while the chief still trains.
    with _ps_group(tmp_path, epochs=5, stepsPerEpoch=600) as g:
        tasks = _run_until(g, 60)
        chief, worker = tasks["chief0"], tasks["worker1"]
        worker.signal(signal.SIGKILL)
        assert worker.wait(30) != 0
        at_loss = max(chief.steps())
        chief.wait_for_step(at_loss + 30, TIMEOUT)  # trains on with one worker
        back = _restart(g, worker)
        _finishes(g, total=3000)
        # One chief process throughout: never restarted, never resumed.
        assert chief.proc.returncode == 0 and _resumed_at(chief) == []
        assert "done: the chief finished training" in back.text()
        # Its cost in goodput: one disruption, nothing redone, the speed lost while gone.
        (line,) = [x for x in chief.lines() if x.startswith("kerasjob: disruption ")]
        assert "cause=worker-lost:worker1 " in line and "steps_redone=0 " in line, line
        times = dict(re.findall(r" (at|first_step_at)=([0-9.]+)", line))
        gap = float(times["first_step_at"]) - float(times["at"])
        good = progress(g)["goodput"]
        assert good["disruptions"] == 1 and good["stepsRedone"] == 0
        # At most the gap (the steps the other worker trained in it count as done; on this
        # CPU-bound machine one worker can be as fast as two, and then nothing is lost).
        assert gap > 0 and 0 <= good["lostSeconds"] <= gap


def test_a_lost_ps_restarts_the_group_at_the_backups_exact_step(tmp_path: Path) -> None:
    with _ps_group(tmp_path) as g:
        tasks = _run_until(g, 120)
        tasks["ps0"].signal(signal.SIGKILL)
        # The chief (its coordinator) and the workers (their watch) leave: 43.
        codes = [t.wait(120) for t in g.trainers]
        assert codes[:3] == [43, 43, 43], g.logs()
        saved = latest_step(str(g.ckpt / "backup"))
        assert saved >= 100 and saved % 50 == 0
        chief = _resumes_at(g, saved)
        assert "disruption 1 cause=" in chief.text()


def _sigterm_the_ps(tasks: dict[str, Trainer]) -> int:
    """SIGTERM to ps0: it and the chief exit 42; the step the chief saved at, as ps0 says."""
    tasks["ps0"].signal(signal.SIGTERM)
    assert tasks["ps0"].wait(60) == 42, tasks["ps0"].tail()
    assert tasks["chief0"].wait(60) == 42, tasks["chief0"].tail()
    line = next(x for x in tasks["ps0"].lines() if "state saved at step" in x)
    return int(line.split("state saved at step ")[1].split(";")[0])


def test_sigterm_to_the_ps_saves_at_a_step_boundary_and_resumes_there(tmp_path: Path) -> None:
    with _ps_group(tmp_path) as g:
        tasks = _run_until(g, 70)
        step = _sigterm_the_ps(tasks)
        assert step > 70 and step % 10 == 0  # an execution's boundary, past the last backup
        assert latest_step(str(g.ckpt / "backup")) == step
        assert f"state saved at step {step}" in tasks["chief0"].text()
        for t in g.trainers:
            t.wait(60)
        chief = _resumes_at(g, step)
        assert "cause=preempted" in chief.text()


class _BucketGroup(Group):
    """Every process of every generation its own empty checkpoint directory (a Pod's
    emptyDir): the backups and the group's notes live in the bucket alone. The ps and the
    workers do not even see the chief's directory (a mount namespace each, `local/` an
    empty tmpfs there): a ps that wrote its variables' shards into the chief's backup path,
    as TensorFlow does by default, fails here as it did on the real node."""

    def checkpoint_dir(self, role: str, index: int) -> Path:
        return self.tmp / "local" / f"g{self.generation}-{role}{index}"

    def prefix(self, role: str, index: int) -> list[str]:
        return [] if role == "chief" else private_directory(self.tmp / "local")


def test_on_s3_a_sigterm_to_the_ps_commits_the_save_and_the_group_resumes_there(
    tmp_path: Path, stores: objectstores.Stores
) -> None:
    """No shared directory: the ps's request, the chief's answer and its done go through
    the bucket, the backups are committed there, and the next generation resumes at the
    step the SIGTERM saved."""
    env = {
        "AWS_ACCESS_KEY_ID": stores.env["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": stores.env["AWS_SECRET_ACCESS_KEY"],
        Env.CHECKPOINT_LOCATION.value: f"s3://{stores.bucket}/jobs/{tmp_path.name}",
        Env.CHECKPOINT_ENDPOINT.value: stores.s3_endpoint,
        Env.CHECKPOINT_PATH_STYLE.value: "true",
        Env.OUTPUT_DIR.value: str(tmp_path / "ckpt" / "output"),  # read back here only
    }
    g = _BucketGroup(tmp_path, CONFIG, workers=1, chief=True, ps=1, env=env)
    try:
        tasks = _run_until(g, 70)
        step = _sigterm_the_ps(tasks)
        assert f"backup of step {step} committed to s3://" in tasks["chief0"].text()
        for t in g.trainers:
            t.wait(60)
        g.start()
        chief = _by_role(g)["chief0"]
        codes = g.wait_all(TIMEOUT)
        assert codes == [0, 0, 0], g.logs()
        assert _resumed_at(chief) == [step]
        assert f"backup of step {step} pulled from s3://" in chief.text()
        p = progress(g)
        assert p["done"] and p["step"] == TOTAL
    finally:
        g.stop()


OWN_SCRIPT = """
import numpy as np
import tf_keras

from kerasjob_trainer.runtimes.tf_ps import session

job = session.start()  # a ps or a worker serves here, and never returns
with job.strategy.scope():
    model = tf_keras.Sequential([tf_keras.Input((8,)), tf_keras.layers.Dense(2)])
    model.compile(
        "adam",
        tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=10,
    )


def dataset_fn(context):
    import tensorflow as tf

    x = np.random.RandomState(context.input_pipeline_id).rand(512, 8).astype("float32")
    y = (x.sum(axis=1) > 4).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


job.fit(model, dataset_fn, epochs=2, steps_per_epoch=50)
job.finish(model)
"""


def test_an_own_script_runs_in_every_pod_and_the_chief_trains(tmp_path: Path) -> None:
    script = tmp_path / "train_ps.py"
    script.write_text(OWN_SCRIPT)
    with _ps_group(tmp_path) as g:
        g.config = {**g.config, "command": [sys.executable, str(script)]}
        g.start()
        _finishes(g, total=100, test_accuracy=False)
        servers = [t for t in g.trainers if "chief" not in t.name]
        assert all("serving for the chief" in t.text() for t in servers), g.logs()

"""The parameter-server runtime with real TensorFlow: a chief, 2 workers and 1 ps as local
processes (`trainer_procs`), this test playing the operator (no in-place restarts).

What holds, and is checked here: exactly epochs x stepsPerEpoch steps; a lost worker stops
nobody (the chief's `fit` goes on, the worker rejoins); a lost ps restarts the group from
the last backup at exactly its step; a SIGTERM to the ps makes the chief save at a step
boundary, and the group resumes there. Not bit-identical weights (asynchronous updates)."""

from __future__ import annotations

import signal
from pathlib import Path

from kerasjob_dev.trainer_procs import RESUMED_LINE, Group, Trainer, group, progress
from kerasjob_trainer.runtimes.tf_ps.backup import latest_step

CONFIG = {"epochs": 3, "stepsPerEpoch": 100, "saveFreq": 50, "batchSizePerReplica": 32}
TOTAL = 300
TIMEOUT = 600.0


def _ps_group(tmp: Path):  # type: ignore[no-untyped-def]
    return group(tmp, CONFIG, workers=2, chief=True, ps=1)


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


def _finishes(g: Group) -> None:
    codes = g.wait_all(TIMEOUT)
    assert codes == [0, 0, 0, 0], g.logs()
    p = progress(g)
    assert p["done"] and p["step"] == TOTAL and p["totalSteps"] == TOTAL
    assert p["metrics"]["test_accuracy"] > 0.5
    assert (g.output / "model.keras").exists()


def test_a_lost_worker_stops_nobody_and_rejoins(tmp_path: Path) -> None:
    with _ps_group(tmp_path) as g:
        tasks = _run_until(g, 60)
        chief, worker = tasks["chief0"], tasks["worker1"]
        worker.signal(signal.SIGKILL)
        assert worker.wait(30) != 0
        at_loss = max(chief.steps())
        chief.wait_for_step(at_loss + 30, TIMEOUT)  # trains on with one worker
        back = _restart(g, worker)
        _finishes(g)
        # One chief process throughout: never restarted, never resumed.
        assert chief.proc.returncode == 0 and _resumed_at(chief) == []
        assert "done: the chief finished training" in back.text()
        assert "disruption" not in chief.text()


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


def test_sigterm_to_the_ps_saves_at_a_step_boundary_and_resumes_there(tmp_path: Path) -> None:
    with _ps_group(tmp_path) as g:
        tasks = _run_until(g, 70)
        tasks["ps0"].signal(signal.SIGTERM)
        assert tasks["ps0"].wait(60) == 42, tasks["ps0"].tail()
        assert tasks["chief0"].wait(60) == 42, tasks["chief0"].tail()
        line = next(x for x in tasks["ps0"].lines() if "state saved at step" in x)
        step = int(line.split("state saved at step ")[1].split(";")[0])
        assert step > 70 and step % 10 == 0  # an execution's boundary, past the last backup
        assert latest_step(str(g.ckpt / "backup")) == step
        assert f"state saved at step {step}" in tasks["chief0"].text()
        for t in g.trainers:
            t.wait(60)
        chief = _resumes_at(g, step)
        assert "cause=preempted" in chief.text()

"""Goodput accounting (kerasjob_trainer/shared/goodput.py) with a fake clock, no TensorFlow: three
generations of a 2-worker job on one checkpoint directory, as the trainer drives it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kerasjob_contract as contract
from kerasjob_trainer.shared import goodput
from kerasjob_trainer.shared.metrics import Progress, render_prometheus


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _generation(
    ckpt: Path, clock: Clock, steps: range, step_s: float = 0.1
) -> tuple[goodput.Recorder, goodput.Recorder, list[goodput.Disruption]]:
    chief = goodput.Recorder(str(ckpt), "worker0", True, clock)
    worker = goodput.Recorder(str(ckpt), "worker1", False, clock)
    found = []
    for step in steps:
        clock.now += step_s
        if d := chief.step_done(step):
            found.append(d)
        assert worker.step_done(step) is None  # only the chief keeps the ledger
    return chief, worker, found


def test_three_generations(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    # generation 1: steps 1..45, then worker1 is SIGKILLed (no exit record), the chief
    # exits 43 at once
    chief, worker, found = _generation(tmp_path, clock, range(1, 46))
    assert found == []
    chief.exiting(int(contract.ExitCode.PEER_LOST))
    last_at = clock.now  # 1004.5
    # generation 2 resumes at the backup of step 30, first step 16 s later
    clock.now += 16.0 - 0.1
    chief, worker, found = _generation(tmp_path, clock, range(31, 51))
    (d,) = found
    assert d.cause == "killed:worker1" and d.last_step == 45 and d.resumed_step == 30
    assert d.at == pytest.approx(last_at) and d.first_step_at == pytest.approx(last_at + 16)
    assert d.steps_redone == 15 and d.downtime_s == pytest.approx(16.0)
    assert d.lost_s == pytest.approx(16.0 + 15 * 0.1)
    assert d.exited_at == pytest.approx(last_at)  # the chief's exit 43 (worker1 left none)
    line = "kerasjob: " + goodput.log_line(1, d, chief.ledger.goodput)
    m = re.match(contract.LOG_DISRUPTION_RE, line)
    assert m and m.group(2) == "killed:worker1" and m.group(7) == "15", line
    # SIGTERM: both save at step 50 and exit 42; generation 3 resumes there 8 s later
    chief.exiting(int(contract.ExitCode.PREEMPTED_SAVED))
    clock.now += 1.5  # the save took 1.5 s on worker1
    worker.exiting(int(contract.ExitCode.PREEMPTED_SAVED))
    saved_at = clock.now
    clock.now += 8.0 - 0.1 - 1.5
    chief, worker, found = _generation(tmp_path, clock, range(51, 61))
    (d,) = found
    assert (d.cause, d.last_step, d.resumed_step, d.steps_redone) == ("preempted", 50, 50, 0)
    assert d.lost_s == pytest.approx(8.0) and d.exited_at == pytest.approx(saved_at)
    chief.exiting(0)

    raw = json.loads((tmp_path / contract.GOODPUT_SUBDIR / "ledger.json").read_text())
    ledger = raw["totals"]
    span = clock.now - 1000.1  # first step of the job -> latest step
    assert ledger["disruptions"] == 2 and ledger["stepsRedone"] == 15
    assert ledger["lostSeconds"] == pytest.approx(17.5 + 8.0)
    assert ledger["productiveSeconds"] == pytest.approx(span - 25.5, abs=1e-3)
    assert ledger["goodput"] == pytest.approx((span - 25.5) / span, abs=1e-4)
    assert [d["cause"] for d in raw["events"]] == ["killed:worker1", "preempted"]


def test_heartbeats_are_throttled_but_exits_are_exact(tmp_path: Path) -> None:
    clock = Clock(0.0)
    worker = goodput.Recorder(str(tmp_path), "worker1", False, clock)
    path = tmp_path / contract.GOODPUT_SUBDIR / "last-worker1.json"
    for step in range(1, 6):  # 5 steps in 0.5 s: only the first is written at once
        clock.now += 0.1
        worker.step_done(step)
    assert json.loads(path.read_text())["step"] == 1
    worker.exiting(43)
    saved = json.loads(path.read_text())
    assert (saved["step"], saved["exit_code"], saved["at"]) == (5, 43, pytest.approx(0.5))


def test_peer_lost_and_no_records() -> None:
    rec = goodput.WorkerRecord
    assert (
        goodput.cause_of([rec("worker0", 1, 0, 9, 1, 43), rec("worker1", 1, 0, 9, 1, 43)])
        == "peer-lost"
    )
    d = goodput.disruption([], 30, 100.0)
    assert (d.cause, d.steps_redone, d.lost_s) == ("unknown", 0, 0.0)


def test_a_resize_is_named() -> None:
    rec = goodput.WorkerRecord
    three = [rec(f"worker{i}", 1, 0, 9, 1, 42, workers=3) for i in range(3)]
    assert goodput.disruption(three, 9, 5.0, workers=2).cause == "resized:3->2"
    assert goodput.disruption(three, 9, 5.0, workers=3).cause == "preempted"
    # Grown back: worker2's record is from the generation before the shrink.
    two = [rec(f"worker{i}", 10, 2, 20, 3, 42, workers=2) for i in range(2)]
    assert goodput.disruption([*two, three[2]], 20, 9.0, workers=3).cause == "resized:2->3"
    old = [rec("worker0", 1, 0, 9, 1, 42)]  # records of a trainer that did not say its size
    assert goodput.disruption(old, 9, 5.0, workers=2).cause == "preempted"


def test_goodput_metrics() -> None:
    text = render_prometheus(Progress(step=3))
    assert f"# TYPE {contract.METRIC_DISRUPTIONS} counter" in text
    assert f"{contract.METRIC_DISRUPTIONS} 0.0" in text.splitlines()
    assert contract.METRIC_GOODPUT_RATIO not in text  # no ratio before there is a figure
    text = render_prometheus(
        Progress(
            goodput={
                "disruptions": 2,
                "lostSeconds": 25.5,
                "productiveSeconds": 100.0,
                "goodput": 0.7968,
                "stepsRedone": 15,
            }
        )
    )
    lines = text.splitlines()
    assert f"{contract.METRIC_LOST_SECONDS} 25.5" in lines
    assert f"{contract.METRIC_STEPS_REDONE} 15.0" in lines
    assert f"{contract.METRIC_GOODPUT_RATIO} 0.7968" in lines


def test_startup_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from kerasjob_trainer.shared import startup

    marks = {"python": 100.5, "tensorflow": 103.0, "cluster": 103.75, "restore": 105.0}
    monkeypatch.setattr(startup, "_marks", dict(marks))
    monkeypatch.setattr(startup, "process_started_at", lambda: 100.0)
    startup.mark("first_step")
    startup.mark("tensorflow")  # a second mark of a milestone does not move it
    line = "kerasjob: " + startup.line()
    m = re.match(contract.LOG_STARTUP_RE, line)
    assert m, line
    started, *phases, total = m.groups()
    assert float(started) == 100.0 and phases[:4] == ["0.50", "2.50", "0.75", "1.25"]
    assert float(total) == pytest.approx(startup._marks["first_step"] - 100.0, abs=0.01)
    # The real process start comes from /proc: before any mark of this process.
    monkeypatch.undo()
    assert startup.process_started_at() <= min(startup._marks.values())


def test_process_start_is_read_to_the_tick() -> None:
    """A new interpreter's start, from /proc, is within a few ticks of when it was run."""
    code = "from kerasjob_trainer.shared import startup; print(startup.process_started_at())"
    before = time.time()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    started = float(out.stdout)
    assert before - 0.05 <= started <= time.time(), (before, started)

"""Your own script (examples/own-script.yaml, the script exactly as shipped) with real
TensorFlow in two processes: run through spec.trainer.command by the trainer entrypoint,
preempted by a SIGTERM to one worker, resumed at exactly the saved step, finished."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import yaml

from kerasjob_contract import ExitCode
from kerasjob_dev.cluster import REPO_ROOT
from kerasjob_dev.trainer_procs import FINAL_LINE, PREEMPTED_LINE, RESUMED_LINE, group, progress

pytestmark = pytest.mark.tf

EXAMPLE = REPO_ROOT / "examples" / "own-script.yaml"
GEN_TIMEOUT = 180


def _script(tmp_path: Path) -> Path:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    path = tmp_path / "train.py"
    path.write_text(cm["data"]["train.py"])
    return path


def _matches(lines: list[str], regex) -> list[int]:
    return [int(m.group(1)) for ln in lines if (m := regex.match(ln))]


@pytest.mark.timeout(420)
def test_own_script_is_preemption_safe_and_resumes_exactly(tmp_path: Path) -> None:
    command = [sys.executable, str(_script(tmp_path)), "--epochs=2", "--steps-per-epoch=60"]
    config = {"command": command, "saveFreq": 20, "logEverySteps": 1}
    with group(tmp_path, config) as g:
        chief, worker = g.start()
        chief.wait_for_step(25, GEN_TIMEOUT)
        worker.signal(signal.SIGTERM)  # to ONE worker: the group saves at one agreed step
        assert [chief.wait(30), worker.wait(30)] == [ExitCode.PREEMPTED_SAVED] * 2, g.logs()
        saved = [_matches(t.lines(), PREEMPTED_LINE) for t in (chief, worker)]
        assert saved[0] == saved[1] and len(saved[0]) == 1, g.logs()
        step = saved[0][0]
        assert 25 <= step < 120

        g.start()
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
        resumed = [_matches(t.lines(), RESUMED_LINE) for t in g.trainers]
        assert resumed == [[step], [step]], g.logs()  # exactly the saved step: nothing redone
        final = [m for ln in g.trainers[0].lines() if (m := FINAL_LINE.match(ln))]
        assert final and int(final[0].group(2)) == 120, g.logs()
        assert float(final[0].group(1)) > 0.5  # it learned (1,000 sample digits)
        done = progress(g)
        assert done["done"] and done["step"] == 120 and done["totalSteps"] == 120
        assert (g.output / "model.keras").is_file()
        assert not (g.ckpt / "backup").exists()  # deleted once the model is safe


def test_missing_script_is_an_invalid_configuration(tmp_path: Path) -> None:
    config = {"command": [sys.executable, str(tmp_path / "absent.py")]}
    with group(tmp_path, config, workers=1) as g:
        (t,) = g.start()
        assert t.wait(60) == ExitCode.INVALID_CONFIG
        assert "kerasjob: invalid configuration: command: script" in t.text()

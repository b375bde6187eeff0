"""examples/from-horovod.yaml: Horovod's Keras MNIST script ported to a KerasJob, both ports
(tf-keras under MultiWorkerMirroredStrategy, Keras 3 on JAX) exactly as shipped, in two real
processes through a SIGTERM to one worker: both save at one agreed step (exit 42), the next
generation resumes at exactly that step and trains to the end (docs/from-horovod.md)."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest
import yaml

from kerasjob_contract import ExitCode
from kerasjob_dev.cluster import REPO_ROOT
from kerasjob_dev.trainer_procs import FINAL_LINE, PREEMPTED_LINE, RESUMED_LINE, group, progress

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = REPO_ROOT / "examples" / "from-horovod.yaml"
GEN_TIMEOUT = 240
#: The jobs' --epochs=3 x the scripts' default 40 steps per epoch.
TOTAL = 120


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def _command(tmp_path: Path, job: str) -> tuple[list[str], str]:
    """The job's command with its script (from the ConfigMap) written under tmp_path, and the
    job's backend."""
    docs = _docs()
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (spec,) = [d["spec"] for d in docs if d["kind"] == "KerasJob" and d["metadata"]["name"] == job]
    command = list(spec["trainer"]["command"])
    name = Path(command[1]).name
    (tmp_path / name).write_text(cm["data"][name])
    return [sys.executable, str(tmp_path / name), *command[2:]], spec["trainer"].get(
        "backend", "tensorflow"
    )


def _matches(lines: list[str], regex: re.Pattern[str]) -> list[int]:
    return [int(m.group(1)) for ln in lines if (m := regex.match(ln))]


def test_the_example_ships_both_ports() -> None:
    jobs = {d["metadata"]["name"]: d["spec"] for d in _docs() if d["kind"] == "KerasJob"}
    assert set(jobs) == {"from-horovod", "from-horovod-keras3"}
    assert jobs["from-horovod-keras3"]["trainer"]["backend"] == "jax"
    assert "backend" not in jobs["from-horovod"]["trainer"]


@pytest.mark.parametrize("job", ["from-horovod", "from-horovod-keras3"])
def test_the_port_is_preemption_safe_and_resumes_exactly(tmp_path: Path, job: str) -> None:
    command, backend = _command(tmp_path, job)
    config = {"command": command, "saveFreq": 20, "logEverySteps": 1}
    with group(tmp_path, config, backend=backend) as g:
        chief, worker = g.start()
        chief.wait_for_step(25, GEN_TIMEOUT)
        worker.signal(signal.SIGTERM)  # to ONE worker: the group saves at one agreed step
        codes = [chief.wait(60), worker.wait(60)]
        assert codes == [ExitCode.PREEMPTED_SAVED] * 2, g.logs()
        saved = [_matches(t.lines(), PREEMPTED_LINE) for t in (chief, worker)]
        assert saved[0] == saved[1] and len(saved[0]) == 1, g.logs()
        step = saved[0][0]
        assert 25 <= step < TOTAL

        g.start()
        assert g.wait_all(GEN_TIMEOUT) == [0, 0], g.logs()
        resumed = _matches(g.trainers[0].lines(), RESUMED_LINE)
        assert resumed == [step], g.logs()  # exactly the saved step: nothing redone
        final = [m for ln in g.trainers[0].lines() if (m := FINAL_LINE.match(ln))]
        assert final and int(final[0].group(2)) == TOTAL, g.logs()
        assert float(final[0].group(1)) > 0.5, g.logs()  # it learned (4,000 sample digits)
        done = progress(g)
        assert done["done"] and done["step"] == TOTAL
        assert (g.output / "model.keras").is_file()

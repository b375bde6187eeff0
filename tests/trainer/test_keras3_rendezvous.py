"""A Keras 3 group forms through the coordinator's address on the shared volume, with no
DNS on the path (shared/rendezvous.py), in real multi-process JAX on CPU.

The coordinator's name in the identity env does not resolve at all ("no-such-host.invalid"):
the group can only form through the published address. Each process's own address is
127.0.0.2 (this machine's host name has none: the scripts say so before the session starts,
as /etc/hosts says a Pod's IP).
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kerasjob_dev.trainer_procs import group, own_keras3_script, progress
from kerasjob_trainer.runtimes.keras3.checkpoint import committed_steps

pytestmark = [pytest.mark.tf, pytest.mark.slow]

TIMEOUT = 300.0

SCRIPT = """
import os
from kerasjob_trainer.shared import rendezvous

rendezvous.own_addresses = lambda: {"127.0.0.2"}
for name in ("JAX_COORDINATOR_ADDRESS", "KERAS_DISTRIBUTION_JOB_ADDRESSES"):
    os.environ[name] = os.environ[name].replace("127.0.0.1:", "no-such-host.invalid:")
""" + own_keras3_script(2, 100)


def _wait_for_a_backup(backup: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not committed_steps(str(backup)):
        assert time.monotonic() < deadline, "no backup committed"
        time.sleep(0.2)


def test_a_group_forms_and_re_forms_after_losing_process_0_without_dns(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    config = {"command": [sys.executable, str(script)], "saveFreq": 5}
    with group(tmp_path, config, backend="jax") as g:
        chief, _ = g.start()
        chief.wait_for_step(10, TIMEOUT)
        _wait_for_a_backup(g.ckpt / "backup")
        first = json.loads((g.ckpt / "coordinator.json").read_text())["address"]
        assert first.startswith("127.0.0.2:"), first
        # Process 0 is lost: its successor serves on another port, while the file still
        # names the dead one (touched seconds ago): the others must not take that one.
        chief.signal(signal.SIGKILL)
        codes = g.wait_all(TIMEOUT)
        assert codes[1] == 43, g.logs()
        g.start()
        assert g.wait_all(TIMEOUT) == [0, 0], g.logs()
        second = json.loads((g.ckpt / "coordinator.json").read_text())["address"]
        assert second.startswith("127.0.0.2:") and second != first, (first, second)
        assert "resumed at step" in g.trainers[0].text(), g.logs()
        assert progress(g)["step"] == 200 and progress(g)["done"] is True

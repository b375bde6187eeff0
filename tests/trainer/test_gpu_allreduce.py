"""gpu_info --allreduce, the GPU smoke job's all-reduce timing: NCCL over a Pod's GPUs there;
here, without a GPU, the same code over the CPU (so it cannot rot unseen)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tf


def test_allreduce_times_a_sum_over_the_devices_there_are() -> None:
    from kerasjob_trainer.gpu_info import allreduce_time

    r = allreduce_time(megabytes=4, rounds=3)
    assert r["via"] == "cpu" and r["devices"] == 1 and r["megabytes"] == 4
    assert r["median_s"] > 0 and r["gb_per_s"] > 0


def test_the_cli_adds_it_to_its_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kerasjob_trainer.gpu_info", "--allreduce"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    info = json.loads(out)
    assert info["allreduce"]["via"] == "cpu" and info["gpus"] == []

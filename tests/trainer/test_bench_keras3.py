"""The Keras 3 benchmarks run (their quick modes): figures are `make bench`'s; this only checks
that each bench completes and writes its JSON, so the benches cannot rot unnoticed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _quick(script: str, out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_keras3_bench_quick(tmp_path: Path) -> None:
    result = _quick("keras3.py", tmp_path / "keras3.json")
    assert result["quick"] and {r["processes"] for r in result["throughput"]} == {1, 2}
    assert all(r["steps_per_s"] > 0 for r in result["throughput"])
    for r in result["recovery"]:
        assert r["downtime_s"] and r["steps_redone"] == [0], r  # saved at SIGTERM
        assert r["startup"]["total_s"] > 0


def test_keras3_device_bench_quick(tmp_path: Path) -> None:
    result = _quick("keras3_device.py", tmp_path / "device.json")
    assert [m["model"] for m in result["models"]] == ["mnist-cnn", "resnet"]
    assert all(m["restore_bit_exact"] and m["steps_per_s"] > 0 for m in result["models"])

"""The Keras 3 benchmarks run (their quick modes): figures are `make bench`'s; this only checks
that each bench completes and writes its JSON, so the benches cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kerasjob_dev import benchpage

pytestmark = [
    pytest.mark.bench,  # make test-bench, not make test
    pytest.mark.tf,
    pytest.mark.slow,
]

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
    # --quick: jax's recovery only, one disruption (no throughput, no tensorflow)
    assert result["quick"] and result["throughput"] == []
    (r,) = result["recovery"]
    assert r["backend"] == "jax" and len(r["downtime_s"]) == 1 and r["downtime_s"][0] > 0, r
    assert r["median_downtime_s"] == r["downtime_s"][0], r
    assert r["steps_redone"] == [0], r  # saved at SIGTERM: nothing redone
    assert 0 < r["startup"]["framework_import_s"] <= r["startup"]["total_s"], r
    # the benchmarks page's table is written from exactly this JSON (make bench-docs)
    page = benchpage.render_keras3(result)
    assert "| jax |" in page and "| tensorflow |" not in page


def test_keras3_orbax_bench_quick(tmp_path: Path) -> None:
    result = _quick("keras3_orbax.py", tmp_path / "keras3_orbax.json")
    assert result["quick"] and [r["model"] for r in result["overhead"]] == [
        "mnist-mlp",
        "transformer",
    ]
    for r in result["overhead"]:
        assert r["step_s"] > 0 and "orbax_overhead_pct_at_10" in r and "npz_save_cost_s" in r
        assert "plain_overhead_pct_at_100" in r and "orbax_isolated_save_cost_s" in r
    assert len(result["restore"]) == 2 and all(r["restore_s"] > 0 for r in result["restore"])
    assert {(r["source"], r["workers"]) for r in result["grain"]} == {
        ("memory", 0),
        ("arrayrecord", 0),
        ("arrayrecord", 1),
    }
    assert all(r["examples_per_s"] > 0 for r in result["grain"])
    assert result["run"]["cpus"] >= 1


def test_keras3_mesh_bench_quick(tmp_path: Path) -> None:
    result = _quick("keras3_mesh.py", tmp_path / "keras3_mesh.json")
    sizes, rows = result["sizes"], result["meshes"]
    assert result["quick"] and result["processes"] == 2 and result["devices_per_process"] == 2
    assert [(r["mesh"], r["batch"], r["model"]) for r in rows] == [
        ("4x1", 4, 1),
        ("2x2", 2, 2),
        ("1x4", 1, 4),
    ]
    # the layout shards 6 kernels per block, the embedding and the head; nothing on 4x1
    layout = 6 * sizes["blocks"] + 2
    assert [r["sharded_variables"] for r in rows] == [0, layout, layout]
    # each process feeds its devices' rows of the same global batch (all of it on 1x4)
    half = sizes["global_batch"] // 2
    assert [r["local_batch"] for r in rows] == [[half, half], [half, half], [2 * half] * 2]
    windows = sizes["windows"] * sizes["rounds"]
    for r in rows:
        assert r["step_s"] > 0 and len(r["window_steps_per_s"]) == windows, r
        assert len(r["round_steps_per_s"]) == len(r["loadavg_1min_before"]) == sizes["rounds"]
        assert r["steps_per_s"] == pytest.approx(1 / r["step_s"], rel=0.01), r
        assert r["examples_per_s"] == pytest.approx(
            sizes["global_batch"] * r["steps_per_s"], rel=0.01
        ), r
        assert r["vs_4x1"] == pytest.approx(r["steps_per_s"] / rows[0]["steps_per_s"], rel=0.01)
        assert len(r["peak_rss_mib"]) == 2 and all(m > 0 for m in r["peak_rss_mib"]), r
        # the same model, initial weights and batches: a mesh changes the layout, not the maths
        for key in ("loss_first", "loss_last"):
            assert r[key] == pytest.approx([rows[0][key][0]] * sizes["rounds"], rel=1e-3), r
    assert rows[0]["vs_4x1"] == 1.0
    assert result["jax"] and result["keras"].startswith("3.")
    run = result["run"]
    assert run["cpus"] >= 1 and len(run["loadavg_start"]) == len(run["loadavg_end"]) == 3
    assert run["wall_s"] > 0


def _bare_python(venv: Path) -> str:
    """An interpreter with this venv's JAX, NumPy, SciPy and pip and nothing else (a venv whose
    site-packages links those few), as on a GPU machine: Keras, Orbax, grain, ... come from
    .whl/ alone. Made in milliseconds, without network."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    (theirs,) = venv.glob("lib/python3.*/site-packages")
    for name in ("jax", "jaxlib", "numpy", "scipy", "ml_dtypes", "opt_einsum", "pip"):
        for path in [ours / name, *ours.glob(f"{name}.libs"), *ours.glob(f"{name}-*.dist-info")]:
            (theirs / path.name).symlink_to(path)
    return str(venv / "bin" / "python")


def test_gpu_check_runs_on_cpu_in_its_dry_mode(tmp_path: Path) -> None:
    """hack/gpu/prepare.sh + check.sh as on a GPU machine (wheels from .whl/, no network, the
    interpreter's own JAX and nothing else), here on 2 CPU devices (KERASJOB_GPU_CHECK_ALLOW_CPU=1)
    at quick sizes."""
    python = _bare_python(tmp_path / "venv")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**os.environ, "PYTHON": python, "GPU_PYTHON_VERSIONS": version}
    prepare = subprocess.run(  # downloads with this venv's pip
        ["bash", str(ROOT / "hack/gpu/prepare.sh")],
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert prepare.returncode == 0, prepare.stdout[-2000:] + prepare.stderr[-2000:]
    cpus = {"KERASJOB_GPU_CHECK_ALLOW_CPU": "1"}
    cpus["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"  # step 4 has 2 to shard
    check = subprocess.run(
        ["bash", str(ROOT / "hack/gpu/check.sh"), "--quick", "--out", str(tmp_path / "d.json")],
        env={**env, **cpus},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert "sharded: mesh batch=1 x model=2 on cpu, 3 kernels sharded" in check.stdout, check.stdout
    result = json.loads((tmp_path / "d.json").read_text())
    assert [m["model"] for m in result["models"]] == ["mnist-cnn", "resnet"]
    assert all(m["restore_bit_exact"] and m["steps_per_s"] > 0 for m in result["models"])
    d = result["disruption"]  # SIGTERM -> 42 -> resumed at the saved step, from the ledger
    assert d["cause"] == "preempted" and d["steps_redone"] == 0 and 0 < d["goodput"] <= 1
    # without the override, a CPU is refused: CPU figures are not GPU figures
    refused = subprocess.run(
        ["bash", str(ROOT / "hack/gpu/check.sh"), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert refused.returncode != 0 and "sees no GPU" in refused.stderr

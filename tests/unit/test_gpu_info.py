"""kerasjob_trainer.gpu_info's pure parts: which libraries a CUDA build loads, where they are
found, and what makes an image's TensorFlow unusable on GPUs. The image's build runs the
whole module (tests/gpu_image reads its record from the built archive)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kerasjob_trainer import gpu_info

BUILD = {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"}


def test_required_libraries_follow_the_build_info() -> None:
    libs = gpu_info.required_libraries(BUILD)
    sonames = [lib.soname for lib in libs]
    assert {
        "libcudart.so.12",
        "libcublas.so.12",
        "libcublasLt.so.12",
        "libcudnn.so.9",
        "libnccl.so.2",
    } <= set(sonames)
    # dependencies before their users: cuBLASLt before cuBLAS, nvJitLink before cuSPARSE
    assert sonames.index("libcublasLt.so.12") < sonames.index("libcublas.so.12")
    assert sonames.index("libnvJitLink.so.12") < sonames.index("libcusparse.so.12")
    assert "libcudnn.so.8" in [
        lib.soname for lib in gpu_info.required_libraries({**BUILD, "cudnn_version": "8.9"})
    ]
    with pytest.raises(ValueError, match="no CUDA"):
        gpu_info.required_libraries({"is_cuda_build": False})
    with pytest.raises(ValueError, match="CUDA 13"):
        gpu_info.required_libraries({**BUILD, "cuda_version": "13.0"})


def test_libraries_are_found_in_the_nvidia_wheels(tmp_path: Path) -> None:
    lib_dir = tmp_path / "nvidia" / "nccl" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libnccl.so.2").write_bytes(b"not an ELF file")
    nccl = gpu_info.Library("nccl", "nccl", "libnccl.so.2")
    assert gpu_info.find_library(nccl, [str(tmp_path)]) == str(lib_dir / "libnccl.so.2")
    (entry,) = gpu_info.load_libraries([nccl], [str(tmp_path)])
    assert entry["path"] == str(lib_dir / "libnccl.so.2") and entry["size"] == 15
    assert entry["loaded"] is False and entry["error"]  # found, but ctypes cannot load it
    missing = gpu_info.Library("x", "nope", "libkerasjob-nope.so.1")
    (entry,) = gpu_info.load_libraries([missing], [str(tmp_path)])
    assert entry == {
        "name": "x",
        "soname": "libkerasjob-nope.so.1",
        "path": None,
        "loaded": False,
        "error": "not found",
    }


def test_problems_name_every_reason() -> None:
    good = {
        "build_info": BUILD,
        "distributions": {"tensorflow": "2.21.0"},
        "libraries": [{"soname": "libcudart.so.12", "loaded": True}],
    }
    assert gpu_info.problems(good) == []
    bad = {
        "build_info": {"is_cuda_build": False},
        "distributions": {"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"},
        "libraries": [{"soname": "libcudnn.so.9", "loaded": False, "error": "not found"}],
        "error": "build info names no CUDA/cuDNN version",
    }
    found = gpu_info.problems(bad)
    assert len(found) == 4
    assert any("not a CUDA build" in p for p in found)
    assert "libcudnn.so.9: not found" in found
    assert any("tensorflow-cpu" in p for p in found)


def test_the_dev_venv_reports_its_cpu_tensorflow() -> None:
    """The dev venv has tensorflow-cpu: listed, and a problem for a GPU image."""
    dists = gpu_info.tensorflow_distributions()
    assert "tensorflow-cpu" in dists

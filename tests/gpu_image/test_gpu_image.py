"""The GPU trainer image (`kerasjob/trainer:dev-gpu`), read from its `docker save` archive.

Opt-in: `make test-gpu-image` builds the image (6.3 GB to build, save and read, so not in
`make test`, whose local deployment builds cpu and jax-cpu only; `make test` passes
``--ignore=tests/gpu_image``) and runs this module. Run by hand, it fails -- it does not
skip -- when the archive is missing.

What it checks, with no GPU:

* TensorFlow is a CUDA build: the record ``python -m kerasjob_trainer.gpu_info`` wrote into
  the image at build time (/etc/kerasjob/gpu-info.json: ``tf.sysconfig.get_build_info()``,
  the libraries found and loaded in the image);
* the CUDA/cuDNN/NCCL libraries that build names are in the image's layers, from the
  ``nvidia-*`` wheels whose major versions match the build info, and load with ``ctypes``
  here, extracted from the archive;
* one TensorFlow: ``tensorflow`` of the pinned version and no ``tensorflow-cpu`` dist-info;
  no operator, dev or mlxtend-dependency packages (as for the cpu image);
* its size, written with the rest to ``$KERASJOB_RUN/images/trainer-gpu.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib

from kerasjob_contract.images import DEV_TAG, trainer_image
from kerasjob_dev import REPO_ROOT, localdeploy

ARCHIVE_NAME = "trainer-gpu.tar"
RECORD = "etc/kerasjob/gpu-info.json"
#: Far above the 6.3 GB measured (2026-11-26); a second TensorFlow or a CUDA toolkit would cross it.
MAX_IMAGE_BYTES = 16e9

_SITE = re.compile(r"/(?:site|dist)-packages/([A-Za-z_][A-Za-z0-9_]*)(?:/|\.py$)")
_DIST = re.compile(r"/(?:site|dist)-packages/([A-Za-z0-9_.]+)-([^/-]+)\.dist-info/")
#: The libraries kerasjob_trainer.gpu_info loads (any major): extracted to be loaded here.
_LOADED = re.compile(
    r"lib(cudart|nvJitLink|cublasLt|cublas|cufft|cusparse|cusolver|cudnn|nccl)"
    r"\.so\.\d+"
)


def archive_path() -> Path:
    d = os.environ.get("IMAGES_EXPORT_DIR")
    return (Path(d) if d else localdeploy.export_dir()) / ARCHIVE_NAME


@dataclass
class Image:
    archive: Path
    #: where the libraries named by _LOADED were extracted (their image paths below it)
    extracted: Path
    packages: set[str] = field(default_factory=set)
    #: normalised distribution name -> version (from *.dist-info directories)
    dists: dict[str, str] = field(default_factory=dict)
    #: path in the image -> size, for files under site-packages/nvidia/*/lib/
    nvidia_libs: dict[str, int] = field(default_factory=dict)
    record: dict | None = None
    #: the archive's layers, uncompressed, in bytes (what the image takes on a node)
    layer_bytes: int = 0


def _read(archive: Path, extract_to: Path) -> Image:
    """One pass over the layers: packages, dist-infos, NVIDIA libraries (extracted to
    ``extract_to``, the last layer's version of each wins) and the build-time record."""
    img = Image(archive, extract_to)
    removed: set[str] = set()
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer_name in manifest[0]["Layers"]:
            member = outer.getmember(layer_name)
            img.layer_bytes += member.size
            layer_file = outer.extractfile(member)
            assert layer_file is not None, layer_name
            with tarfile.open(fileobj=layer_file, mode="r|*") as layer:
                for m in layer:
                    path = "/" + m.name
                    base = path.rsplit("/", 1)[-1]
                    if (s := _SITE.search(path.replace("/.wh.", "/"))) is not None:
                        if base.startswith(".wh."):
                            removed.add(s.group(1))
                        else:
                            img.packages.add(s.group(1))
                            removed.discard(s.group(1))
                    if (d := _DIST.search(path)) is not None:
                        img.dists[d.group(1).lower().replace("_", "-")] = d.group(2)
                    if m.name == RECORD and m.isfile():
                        img.record = json.load(layer.extractfile(m))  # type: ignore[arg-type]
                    elif (
                        "-packages/nvidia/" in path
                        and "/lib/" in path
                        and ".so" in base
                        and (m.isfile() or m.issym())
                    ):
                        img.nvidia_libs[path] = m.size
                        if not _LOADED.fullmatch(base):
                            continue
                        target = extract_to / path.lstrip("/")
                        target.parent.mkdir(parents=True, exist_ok=True)
                        if target.exists() or target.is_symlink():
                            target.unlink()
                        if m.issym():
                            target.symlink_to(m.linkname)
                        else:
                            with layer.extractfile(m) as src, open(target, "wb") as dst:  # type: ignore[union-attr]
                                while chunk := src.read(1 << 20):
                                    dst.write(chunk)
    img.packages -= removed
    return img


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    archive = archive_path()
    if not archive.is_file():
        pytest.fail(
            f"{archive} does not exist: `make test-gpu-image` builds and exports it "
            "(IMAGE_VARIANTS=gpu hack/images/build.sh --export DIR)"
        )
    return _read(archive, tmp_path_factory.mktemp("gpu-image"))


def _pinned_tf() -> str:
    project = tomllib.loads((REPO_ROOT / "trainer_image/pyproject.toml").read_text())
    (pin,) = [r for r in project["project"]["dependencies"] if r.startswith("tensorflow-cpu==")]
    return pin.split("==")[1].split(";")[0].strip()


def test_tensorflow_is_a_cuda_build(image: Image) -> None:
    rec = image.record
    assert rec is not None, f"no /{RECORD} in the image (written by its build)"
    info = rec["build_info"]
    assert info["is_cuda_build"] is True, info
    assert info.get("is_rocm_build") is not True
    assert re.fullmatch(r"12(\.\d+)*", info["cuda_version"]), info
    assert re.fullmatch(r"\d+(\.\d+)*", info["cudnn_version"]), info
    assert rec["tensorflow"] == _pinned_tf()
    assert rec["problems"] == []
    assert rec["gpus"] == []  # built on a machine without a GPU


def test_one_tensorflow_the_cuda_one(image: Image) -> None:
    assert image.dists.get("tensorflow") == _pinned_tf()
    assert "tensorflow-cpu" not in image.dists, "tensorflow_cpu-*.dist-info in the gpu image"
    assert image.record is not None
    assert image.record["distributions"] == {"tensorflow": _pinned_tf()}
    assert {
        "tensorflow",
        "tf_keras",
        "kerasjob_trainer",
        "kerasjob_contract",
        "mlxtend",
        "nvidia",
    } <= image.packages
    shipped_by_mistake = image.packages & {
        "kopf",
        "kubernetes",
        "pydantic",
        "kerasjob",
        "kerasjob_dev",
        "pytest",
        "tests",
        "jax",
    }
    assert not shipped_by_mistake, sorted(shipped_by_mistake)
    slow_to_import = image.packages & {"pandas", "sklearn", "matplotlib", "scipy"}
    assert not slow_to_import, sorted(slow_to_import)


def test_the_nvidia_wheels_match_the_build(image: Image) -> None:
    assert image.record is not None
    info = image.record["build_info"]
    cuda_major = info["cuda_version"].split(".")[0]
    cudnn_major = info["cudnn_version"].split(".")[0]
    assert image.dists["nvidia-cuda-runtime-cu12"].split(".")[0] == cuda_major
    assert image.dists["nvidia-cudnn-cu12"].split(".")[0] == cudnn_major
    for wheel in (
        "nvidia-cublas-cu12",
        "nvidia-cufft-cu12",
        "nvidia-cusolver-cu12",
        "nvidia-cusparse-cu12",
        "nvidia-nccl-cu12",
        "nvidia-nvjitlink-cu12",
    ):
        assert wheel in image.dists, wheel


def test_the_libraries_it_names_are_in_the_image_and_load(image: Image) -> None:
    assert image.record is not None
    libs = image.record["libraries"]
    assert {lib["name"] for lib in libs} >= {"cudart", "cublas", "cublaslt", "cudnn", "nccl"}
    for lib in libs:
        assert lib["loaded"] is True, lib
        assert lib["path"] in image.nvidia_libs, f"{lib['path']} not in the archive's layers"
    # Load them here, from the archive, in the record's order (dependencies first), in a
    # fresh interpreter: present, complete, and loadable without a GPU or the driver.
    paths = [str(image.extracted / lib["path"].lstrip("/")) for lib in libs]
    code = (
        "import ctypes, sys\n"
        "for p in sys.argv[1:]:\n"
        "    ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)\n"
        "print(len(sys.argv) - 1)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *paths],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(len(paths))


def test_size_is_recorded(image: Image) -> None:
    assert image.record is not None
    nvidia = sum(image.nvidia_libs.values())
    report = {
        "image": trainer_image("gpu", DEV_TAG),
        "archive": str(image.archive),
        "archive_bytes": image.archive.stat().st_size,
        "layer_bytes": image.layer_bytes,
        "nvidia_lib_bytes": nvidia,
        "tensorflow": image.record["tensorflow"],
        "build_info": image.record["build_info"],
        "libraries": {lib["soname"]: lib["path"] for lib in image.record["libraries"]},
        "nvidia_wheels": {k: v for k, v in sorted(image.dists.items()) if k.startswith("nvidia-")},
    }
    out = Path(os.environ.get("KERASJOB_RUN", REPO_ROOT / ".run")) / "images" / "trainer-gpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\n{report['image']}: {image.layer_bytes / 1e9:.2f} GB in layers "
        f"({nvidia / 1e9:.2f} GB NVIDIA libraries); report: {out}"
    )
    assert 1e9 < image.layer_bytes < MAX_IMAGE_BYTES

"""`python -m kerasjob_trainer.gpu_info`: what CUDA build of TensorFlow an image carries.

Prints (and with ``--out FILE`` writes) one JSON object:

* ``build_info``: ``tf.sysconfig.get_build_info()`` (``is_cuda_build``, ``cuda_version``,
  ``cudnn_version``, ...);
* ``libraries``: the CUDA libraries that build loads at run time (CUDA runtime, cuBLAS,
  cuFFT, cuSOLVER, cuSPARSE, cuDNN, NCCL), each with the file found in the ``nvidia-*``
  wheels (``site-packages/nvidia/<name>/lib``) or the system's library path, its size, and
  whether ``ctypes`` loaded it. None of them needs a GPU or the driver to load (the driver's
  ``libcuda.so.1`` is mounted by the NVIDIA container runtime and is not in the image);
* ``distributions``: the TensorFlow distributions installed (a CPU-only ``tensorflow-cpu``
  beside the CUDA build would be a second TensorFlow);
* ``gpus``: ``tf.config.list_physical_devices('GPU')`` (empty without a GPU).

With ``--require-cuda`` it exits 1, saying why, unless TensorFlow is a CUDA build whose
libraries are all present and load, with no ``tensorflow-cpu`` beside it. The GPU trainer
image runs it at build time and keeps the result in ``/etc/kerasjob/gpu-info.json``; on a
GPU node the same command is the smoke test (``gpus`` then lists the devices), and
``--allreduce`` adds the time of a 64 MB NCCL all-reduce over the Pod's GPUs.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib.metadata
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from typing import Any

#: Where the GPU trainer image records this module's output at build time.
IMAGE_RECORD = "/etc/kerasjob/gpu-info.json"


@dataclass(frozen=True)
class Library:
    """One CUDA library TensorFlow dlopens: its wheel directory and its soname."""

    name: str
    wheel_dir: str  # site-packages/nvidia/<wheel_dir>/lib
    soname: str


def required_libraries(build_info: dict[str, Any]) -> list[Library]:
    """The libraries a CUDA build of TensorFlow loads, with the major versions its build
    info names (CUDA runtime: ``cuda_version``'s major; cuDNN: ``cudnn_version``'s). The
    math libraries' majors are those of the CUDA 12 toolkit; NCCL's is 2. Dependencies
    first: a library's own DT_NEEDED (cuBLASLt for cuBLAS, nvJitLink for cuSPARSE) is then
    resolved by soname from what is already loaded."""
    cuda = str(build_info.get("cuda_version") or "")
    cudnn = str(build_info.get("cudnn_version") or "")
    if not cuda or not cudnn:
        raise ValueError(f"build info names no CUDA/cuDNN version: {build_info!r}")
    cuda_major, cudnn_major = cuda.split(".")[0], cudnn.split(".")[0]
    if cuda_major != "12":
        raise ValueError(f"CUDA {cuda}: only the CUDA 12 library names are known here")
    return [
        Library("cudart", "cuda_runtime", f"libcudart.so.{cuda_major}"),
        Library("nvjitlink", "nvjitlink", "libnvJitLink.so.12"),
        Library("cublaslt", "cublas", "libcublasLt.so.12"),
        Library("cublas", "cublas", "libcublas.so.12"),
        Library("cufft", "cufft", "libcufft.so.11"),
        Library("cusparse", "cusparse", "libcusparse.so.12"),
        Library("cusolver", "cusolver", "libcusolver.so.11"),
        Library("cudnn", "cudnn", f"libcudnn.so.{cudnn_major}"),
        Library("nccl", "nccl", "libnccl.so.2"),
    ]


def find_library(lib: Library, site_packages: list[str]) -> str | None:
    """The file of ``lib`` in an ``nvidia-*`` wheel, else its soname if the system's
    library path has it (the official TensorFlow GPU image installs CUDA there)."""
    for site in site_packages:
        path = os.path.join(site, "nvidia", lib.wheel_dir, "lib", lib.soname)
        if os.path.exists(path):
            return path
    for pattern in ("/usr/local/cuda*/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"):
        for d in sorted(glob.glob(pattern)):
            if os.path.exists(os.path.join(d, lib.soname)):
                return os.path.join(d, lib.soname)
    return None


def load_libraries(libs: list[Library], site_packages: list[str]) -> list[dict[str, Any]]:
    """Find and ``ctypes``-load each library (RTLD_GLOBAL, in order)."""
    out = []
    for lib in libs:
        path = find_library(lib, site_packages)
        entry: dict[str, Any] = {"name": lib.name, "soname": lib.soname, "path": path}
        if path is None:
            entry.update(loaded=False, error="not found")
        else:
            real = os.path.realpath(path)
            entry["size"] = os.path.getsize(real)
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                entry["loaded"] = True
            except OSError as e:
                entry.update(loaded=False, error=str(e))
        out.append(entry)
    return out


def tensorflow_distributions() -> dict[str, str]:
    """Installed distributions named tensorflow*, name -> version."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "tensorflow" or name.startswith("tensorflow-"):
            found[name] = dist.version
    return found


def problems(info: dict[str, Any]) -> list[str]:
    """Why ``info`` is not a usable CUDA build of TensorFlow (empty: it is)."""
    found = []
    if not info["build_info"].get("is_cuda_build"):
        found.append("TensorFlow is not a CUDA build (is_cuda_build is not True)")
    for lib in info["libraries"]:
        if not lib["loaded"]:
            found.append(f"{lib['soname']}: {lib.get('error', 'not loaded')}")
    if "tensorflow-cpu" in info["distributions"]:
        found.append("tensorflow-cpu is installed beside the CUDA build")
    if info.get("error"):
        found.append(info["error"])
    return found


def collect() -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    build_info = {
        k: v if isinstance(v, bool | int | float) else str(v)
        for k, v in tf.sysconfig.get_build_info().items()
    }
    site = [p for p in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")} if p]
    info: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "build_info": build_info,
        "distributions": tensorflow_distributions(),
        "libraries": [],
    }
    try:
        info["libraries"] = load_libraries(required_libraries(build_info), site)
    except ValueError as e:
        info["error"] = str(e)
    info["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
    return info


ALLREDUCE_MB = 64
ALLREDUCE_ROUNDS = 10


def allreduce_time(megabytes: int = ALLREDUCE_MB, rounds: int = ALLREDUCE_ROUNDS) -> dict[str, Any]:
    """Seconds of one all-reduce (SUM) of `megabytes` of float32 over this Pod's devices, the
    median of `rounds` after a warm-up: NCCL over every local GPU
    (MirroredStrategy + NcclAllReduce); without a GPU, TensorFlow's default reduction on the
    CPU, so the same code runs (and is tested) on machines without one."""
    import statistics
    import time

    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        strategy = tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.NcclAllReduce())
        via = "nccl"
    else:
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
        via = "cpu"
    n = megabytes * 1024 * 1024 // 4
    values = strategy.run(lambda: tf.ones([n], tf.float32))

    @tf.function
    def once() -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)

    once().numpy()  # warm-up: tracing, NCCL communicators
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        once().numpy()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {
        "via": via,
        "devices": strategy.num_replicas_in_sync,
        "megabytes": megabytes,
        "median_s": round(median, 5),
        "gb_per_s": round(megabytes / 1024 / median, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kerasjob_trainer.gpu_info", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument(
        "--require-cuda",
        action="store_true",
        help="exit 1 unless a CUDA build with all its libraries loading",
    )
    parser.add_argument(
        "--allreduce",
        action="store_true",
        help=f"also time an all-reduce of {ALLREDUCE_MB} MB over this Pod's GPUs (NCCL)",
    )
    args = parser.parse_args(argv)
    info = collect()
    info["problems"] = problems(info)
    if args.allreduce:
        info["allreduce"] = allreduce_time()
    text = json.dumps(info, indent=2, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.require_cuda and info["problems"]:
        for p in info["problems"]:
            print(f"gpu_info: {p}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

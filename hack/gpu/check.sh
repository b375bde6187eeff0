#!/usr/bin/env bash
# On the GPU machine (CUDA + JAX installed, no TensorFlow, no network), from the repository
# root with .whl/ carried along (hack/gpu/prepare.sh): the Keras 3 trainer on the GPU.
#   1. JAX sees a GPU (else it says so in one line and stops, before installing anything:
#      CPU figures are not GPU figures);
#   2. the carried wheels into a private --target folder (no network, no venv: the machine's
#      own CUDA build of JAX is what runs, with Keras, orbax-checkpoint, grain, tensorboardX,
#      mlxtend, their dependencies and our two packages on PYTHONPATH, ahead of its own);
#   3. bench/keras3_device.py: MNIST CNN and a ResNet-style model, steps/s, backup overhead
#      at saveFreq 100, save/restore seconds and a bit-exact restore check -> $OUT or
#      bench/results/keras3_device.json.
#   4. hack/gpu/sharded.py: mnist-mlp sharded over the device mesh (ModelParallel, one
#      process), its kernels checked sharded, steps/s (one device: skipped, it says so).
# Minutes: about 3-6 on an H100 (compiles included).
#   PYTHON=...                          the interpreter that has JAX (default python3)
#   KERASJOB_GPU_CHECK_ALLOW_CPU=1      run it on CPU anyway (the dry mode tests use, --quick)
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
[ -f .whl/requirements.txt ] || { echo "gpu check: no .whl/requirements.txt (run hack/gpu/prepare.sh where PyPI is reachable)" >&2; exit 2; }
"$python" -c "import jax" 2>/dev/null || { echo "gpu check: $python has no JAX" >&2; exit 2; }
# The machine's own JAX alone (nothing installed yet): a GPU, or one line and exit 1.
"$python" - <<'PY'
import os, sys, jax
gpus = [d for d in jax.devices() if d.platform == "gpu"]
print("jax", jax.__version__, "devices", jax.devices())
if not gpus and os.environ.get("KERASJOB_GPU_CHECK_ALLOW_CPU") != "1":
    sys.exit("gpu check: JAX sees no GPU here (KERASJOB_GPU_CHECK_ALLOW_CPU=1 to try the script on CPU)")
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
target=$(mktemp -d "${TMPDIR:-/tmp}/kerasjob-gpu-check.XXXXXX")
trap 'rm -rf "$target"' EXIT
# What prepare.sh listed (the compiled wheels only for the GPU_PYTHON_VERSIONS it was given)
"$python" -m pip install -q --no-index --no-deps --find-links .whl --target "$target" \
  -r .whl/requirements.txt || {
  echo "gpu check: .whl/ lacks a wheel for $("$python" -V) (GPU_PYTHON_VERSIONS for prepare.sh)" >&2
  exit 2
}
export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" KERAS_BACKEND=jax
out=${OUT:+$OUT/keras3_device.json}
# -P: bench/ not on sys.path (bench/operator.py would shadow the standard library's operator
# in an interpreter that has not imported it before the script starts)
"$python" -P bench/keras3_device.py ${out:+--out "$out"} "$@"
# 4. a sharded model (ModelParallel over this machine's devices, one process): hack/gpu/sharded.py
"$python" hack/gpu/sharded.py

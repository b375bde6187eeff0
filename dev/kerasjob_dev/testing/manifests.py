"""KerasJob bodies for the tests of `kerasjob.manifests` (children, validation, runtimes) and
readers of the Pods built from them."""

from __future__ import annotations

from typing import Any

#: The default image the tests build Pods with.
IMAGE = "kerasjob/trainer:test"
#: The operator's /tmp volume of every trainer Pod.
TMP = {"name": "kerasjob-tmp", "emptyDir": {}}
#: A shared checkpoint volume.
PVC = {"persistentVolumeClaim": {"claimName": "ckpt"}}
#: Worker 0's address in `jax_job` (the JAX coordinator).
JAX_COORDINATOR = "mnist-worker-0.mnist.ml.svc:2222"


def job(spec: dict[str, Any] | None = None, name: str = "mnist", **meta: Any) -> dict[str, Any]:
    """A KerasJob body (two workers on `PVC` unless ``spec`` says otherwise) in namespace ml."""
    spec = {"workers": 2, "checkpoint": {"volume": PVC}} if spec is None else spec
    return {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": name, "namespace": "ml", "uid": "uid-1", "generation": 1, **meta},
        "spec": spec,
    }


def jax_job(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A three-worker Keras 3 (backend jax) job, ``spec`` merged over it."""
    return job(
        {"workers": 3, "checkpoint": {"volume": PVC}, "trainer": {"backend": "jax"}, **(spec or {})}
    )


def env_of(pod: dict[str, Any], container: str = "trainer") -> dict[str, str]:
    """A container's env as a dict."""
    c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def trainer(pod: dict[str, Any]) -> dict[str, Any]:
    """The Pod's container named trainer."""
    return next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")

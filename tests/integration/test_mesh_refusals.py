"""spec.trainer.mesh at apply time: the API server (the CRD's CEL rules) refuses a mesh that
cannot fit the job's devices, or that a built-in model cannot shard on, in one line; a mesh
that fits is accepted. The API server alone: no operator, no Pod."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster
from kerasjob_dev.harness import GROUP, PLURAL, VERSION, custom, install_crds, job_manifest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]

MESH = [{"name": "batch", "size": 2}, {"name": "model", "size": 2}]


def _job(name: str, workers: int = 2, **trainer: Any) -> dict[str, Any]:
    body = job_manifest(name, workers=workers)
    body["spec"]["trainer"] = {"backend": "jax", **trainer}
    return body


def _refusal(kube: Any, ns: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as refused:
        custom(kube).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, body, field_validation="Strict"
        )
    assert refused.value.status == 422, refused.value.body
    message = str(json.loads(refused.value.body)["message"])
    assert "\n" not in message and len(message) < 600, message
    return message


@pytest.mark.parametrize(
    ("workers", "trainer", "words"),
    [
        (
            2,
            {"mesh": [*MESH[:1], {"name": "model", "size": 4}], "devicesPerProcess": 2},
            "the product of its axis sizes must equal workers x trainer.devicesPerProcess",
        ),
        (3, {"mesh": MESH}, "the product of its axis sizes must be a multiple of workers"),
        (
            2,
            {"mesh": [{"name": "batch", "size": 4}], "devicesPerProcess": 2},
            "the built-in models shard their kernels on an axis named model",
        ),
        (
            2,
            {"mesh": [{"name": "model", "size": 2}, {"name": "batch", "size": 2}]},
            "which must not be the first (batch) axis",
        ),
    ],
    ids=["product-vs-devices", "not-a-multiple-of-workers", "builtin-no-model-axis", "model-first"],
)
def test_a_mesh_that_cannot_work_is_refused_at_apply(
    cluster: Cluster, kube: Any, namespace: str, workers: int, trainer: dict[str, Any], words: str
) -> None:
    install_crds(cluster)
    message = _refusal(kube, namespace, _job("bad-mesh", workers, **trainer))
    assert words in message, message


def test_a_mesh_needs_backend_jax_and_with_elastic_whole_replicas_per_process(
    cluster: Cluster, kube: Any, namespace: str
) -> None:
    install_crds(cluster)
    tf = _job("mesh-tf", mesh=MESH)
    tf["spec"]["trainer"]["backend"] = "tensorflow"
    assert "trainer.mesh needs trainer.backend jax" in _refusal(kube, namespace, tf)
    # the batch axis follows the workers: a replica on 4 devices cannot live on 2 per process
    wide = [{"name": "batch", "size": 1}, {"name": "model", "size": 4}]
    elastic = _job("mesh-elastic", mesh=wide, devicesPerProcess=2)
    elastic["spec"]["elastic"] = {"minWorkers": 1}
    message = _refusal(kube, namespace, elastic)
    assert "trainer.mesh with elastic: the batch axis follows the workers" in message, message


def test_a_mesh_that_fits_is_accepted(cluster: Cluster, kube: Any, namespace: str) -> None:
    install_crds(cluster)
    for name, trainer in (
        ("fits", {"mesh": MESH, "devicesPerProcess": 2}),
        ("fits-unknown-devices", {"mesh": MESH}),  # 4 devices over 2 workers: the trainer checks
        ("user-model", {"mesh": [{"name": "batch", "size": 4}], "model": "pkg.mod:build"}),
        ("elastic", {"mesh": MESH, "devicesPerProcess": 2}),
    ):
        body = _job(name, **trainer)
        if name == "elastic":
            body["spec"]["elastic"] = {"minWorkers": 1}
        created = custom(kube).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict"
        )
        assert created["spec"]["trainer"]["mesh"] == trainer["mesh"]

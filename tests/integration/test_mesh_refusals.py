"""spec.trainer.mesh at apply time, over the one table of mesh cases
(`kerasjob_dev.testing.mesh_cases`, the contract's rules and messages): the API server (the
CRD's schema and CEL rules) refuses each invalid mesh in one line, a job's rule in the
contract's very words, and accepts each valid one. The operator's validation, the contract
and the trainer run the same table in tests/unit/test_mesh_rules.py. The API server alone: no
operator, no Pod."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster
from kerasjob_dev.harness import GROUP, PLURAL, VERSION, custom, install_crds, job_manifest
from kerasjob_dev.testing.mesh_cases import MESH_CASES, MeshCase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]


def _job(case: MeshCase) -> dict[str, Any]:
    spec = case.spec()
    return job_manifest(f"mesh-{case.id}"[:50], workers=spec.pop("workers"), **spec)


def _create(kube: Any, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = custom(kube).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, body, field_validation="Strict"
    )
    return created


@pytest.mark.parametrize("case", MESH_CASES, ids=[c.id for c in MESH_CASES])
def test_the_api_server_gives_the_tables_verdict(
    cluster: Cluster, kube: Any, namespace: str, case: MeshCase
) -> None:
    install_crds(cluster)
    body = _job(case)
    if case.refused is None:
        created = _create(kube, namespace, body)
        assert created["spec"]["trainer"]["mesh"] == case.mesh
        return
    with pytest.raises(ApiException) as refused:
        _create(kube, namespace, body)
    assert refused.value.status == 422, refused.value.body
    message = str(json.loads(refused.value.body)["message"])
    assert "\n" not in message and len(message) < 800, message
    if case.schema:  # the OpenAPI schema's own words, naming the field
        assert "spec.trainer.mesh" in message, message
    else:
        assert case.refused in message, message

"""The one table of spec.trainer.mesh cases (issue 46): valid meshes and invalid ones with the
contract's message for each (`kerasjob_contract.mesh`, where the rules are written once).

Every case runs through every place that checks a mesh, so they cannot disagree: the API
server (the CRD's schema and CEL rules, tests/integration/test_mesh_refusals.py), the
pydantic model, the operator's validation, the contract's parsers and the trainer's mesh code
(tests/unit/test_mesh_rules.py).

A case's `refused` is the message of the rule it breaks (None: accepted everywhere). A
``schema`` case breaks a rule of one axis or of the list (the CRD's OpenAPI schema and the
contract's `parse_mesh`, each in its own words: `refused` is the contract's); the others break
one of the job's rules (the CEL rules and `job_problems`, one message each).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kerasjob_contract.mesh import (
    BUILTIN_LAYOUT,
    ELASTIC_WHOLE_REPLICAS,
    MAX_AXIS_SIZE,
    NEEDS_JAX,
    PRODUCT_IS_DEVICES,
    PRODUCT_PER_WORKER,
)

#: A shared checkpoint volume (a job of several Pods needs one).
PVC = {"persistentVolumeClaim": {"claimName": "ckpt"}}


def axes(**sizes: int) -> list[dict[str, Any]]:
    """The mesh list of ``batch=2, model=2`` (in that order)."""
    return [{"name": name, "size": size} for name, size in sizes.items()]


@dataclasses.dataclass(frozen=True)
class MeshCase:
    id: str
    #: spec.trainer, over backend jax.
    trainer: dict[str, Any]
    #: The rule's message (None: the mesh is accepted).
    refused: str | None = None
    workers: int = 2
    elastic: bool = False
    #: A rule of an axis or of the list (the schema), not of the job (CEL).
    schema: bool = False

    @property
    def mesh(self) -> list[dict[str, Any]]:
        return list(self.trainer["mesh"])

    def spec(self) -> dict[str, Any]:
        """The case's spec fields (merge them over a valid job)."""
        spec: dict[str, Any] = {
            "workers": self.workers,
            "trainer": {"backend": "jax", **self.trainer},
        }
        if self.elastic:
            spec["elastic"] = {"minWorkers": 1}
        return spec

    def job_spec(self) -> dict[str, Any]:
        """A whole spec: `spec` on a shared checkpoint volume."""
        return {**self.spec(), "checkpoint": {"volume": PVC}}


_C = MeshCase
MESH_CASES: tuple[MeshCase, ...] = (
    # accepted
    _C("fits", {"mesh": axes(batch=2, model=2), "devicesPerProcess": 2}),
    _C("fits-devices-unknown", {"mesh": axes(batch=2, model=2)}),
    _C("model-axis-4", {"mesh": axes(batch=1, model=4), "devicesPerProcess": 2}),
    _C("model-axis-16", {"mesh": axes(batch=1, model=16), "devicesPerProcess": 8}),
    _C("model-axis-last-of-three", {"mesh": axes(data=2, seq=1, model=2)}),
    _C("user-model-batch-only", {"mesh": axes(batch=4), "model": "pkg.mod:build"}),
    _C("user-model-model-3", {"mesh": axes(batch=2, model=3), "model": "pkg.mod:build"}),
    _C("command-batch-only", {"mesh": axes(batch=4), "command": ["python", "/opt/train.py"]}),
    _C("elastic", {"mesh": axes(batch=2, model=2), "devicesPerProcess": 2}, elastic=True),
    _C("elastic-devices-unknown", {"mesh": axes(batch=1, model=4)}, elastic=True),
    # the job's rules (CEL)
    _C(
        "builtin-model-3",
        {"mesh": axes(batch=2, model=3), "devicesPerProcess": 3},
        BUILTIN_LAYOUT,
    ),
    _C("builtin-model-3-devices-unknown", {"mesh": axes(batch=2, model=3)}, BUILTIN_LAYOUT),
    _C("builtin-model-1", {"mesh": axes(batch=4, model=1), "devicesPerProcess": 2}, BUILTIN_LAYOUT),
    _C(
        "builtin-model-32",
        {"mesh": axes(batch=1, model=32), "devicesPerProcess": 16},
        BUILTIN_LAYOUT,
    ),
    _C("builtin-no-model-axis", {"mesh": axes(batch=4), "devicesPerProcess": 2}, BUILTIN_LAYOUT),
    _C("builtin-model-first", {"mesh": axes(model=2, batch=2)}, BUILTIN_LAYOUT),
    _C(
        "builtin-cnn-model-6",
        {"mesh": axes(batch=1, model=6), "model": "mnist-cnn", "devicesPerProcess": 3},
        BUILTIN_LAYOUT,
    ),
    _C("tensorflow", {"mesh": axes(batch=2, model=2), "backend": "tensorflow"}, NEEDS_JAX),
    _C(
        "product-vs-devices",
        {"mesh": axes(batch=2, model=4), "devicesPerProcess": 2},
        PRODUCT_IS_DEVICES,
    ),
    _C("not-a-multiple-of-workers", {"mesh": axes(batch=2, model=2)}, PRODUCT_PER_WORKER, 3),
    _C(
        "elastic-replica-wider-than-a-process",
        {"mesh": axes(batch=1, model=4), "devicesPerProcess": 2},
        ELASTIC_WHOLE_REPLICAS,
        elastic=True,
    ),
    # one axis or the list (the schema)
    _C(
        "axis-name-uppercase",
        {"mesh": axes(Batch=2, model=2), "model": "pkg.mod:build"},
        "must match",
        schema=True,
    ),
    _C("axis-size-zero", {"mesh": axes(batch=0, model=2)}, "size must be an int", schema=True),
    _C(
        "axis-size-too-big",
        {"mesh": axes(batch=MAX_AXIS_SIZE + 1, model=2)},
        f"size must be an int from 1 to {MAX_AXIS_SIZE}",
        schema=True,
    ),
    _C(
        "five-axes",
        {"mesh": axes(batch=1, model=2, a=1, b=1, c=1)},
        "at most 4",
        schema=True,
    ),
    _C(
        "axis-names-repeated",
        {"mesh": [*axes(model=2), *axes(model=2)]},
        "must be unique",
        schema=True,
    ),
)

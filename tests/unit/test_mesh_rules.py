"""spec.trainer.mesh's rules, written once in the contract (`kerasjob_contract.mesh`), held to
one table of cases (`kerasjob_dev.testing.mesh_cases`) through every place that checks a mesh
here: the contract's definition, the CRD's CEL rules (their messages), the pydantic model, the
operator's validation, the trainer configuration's parser and the trainer's mesh code. The
API server runs the same table: tests/integration/test_mesh_refusals.py."""

from __future__ import annotations

import json
import os
from typing import Any

import pydantic
import pytest

from kerasjob.api import KerasJob
from kerasjob.api.trainer import MESH_RULES
from kerasjob.manifests import children
from kerasjob.manifests.validation import validate_job
from kerasjob_contract import mesh as contract
from kerasjob_contract.trainer_config import ConfigError, parse_config, shards_builtin
from kerasjob_dev.testing.manifests import job
from kerasjob_dev.testing.mesh_cases import MESH_CASES, MeshCase
from kerasjob_trainer.runtimes.keras3 import mesh as k3mesh

IDS = [c.id for c in MESH_CASES]
JOB_RULES = (
    contract.NEEDS_JAX,
    contract.ELASTIC_WHOLE_REPLICAS,
    contract.PRODUCT_IS_DEVICES,
    contract.PRODUCT_PER_WORKER,
    contract.BUILTIN_LAYOUT,
)
#: Devices a process may have, for a job that does not declare them (the trainer sees some).
DEVICE_COUNTS = range(1, 17)


def _body(case: MeshCase) -> dict[str, Any]:
    return job(case.job_spec(), name="sharded")


def test_the_table_covers_every_rule_and_the_cel_rules_say_the_contracts_words() -> None:
    assert [r["message"] for r in MESH_RULES] == list(JOB_RULES)
    assert {c.refused for c in MESH_CASES if not c.schema} == {None, *JOB_RULES}
    assert len({c.id for c in MESH_CASES}) == len(MESH_CASES)


@pytest.mark.parametrize("case", MESH_CASES, ids=IDS)
def test_the_contract_defines_the_verdict(case: MeshCase) -> None:
    if case.schema:
        with pytest.raises(contract.MeshError) as e:
            contract.parse_mesh(case.mesh)
        assert case.refused is not None and case.refused in str(e.value), e.value
        return
    mesh = contract.parse_mesh(case.mesh)
    assert mesh is not None
    trainer = case.spec()["trainer"]
    problems = contract.job_problems(
        mesh,
        backend=trainer["backend"],
        builtin_model=shards_builtin(trainer.get("model", "mnist-mlp"), trainer.get("command")),
        workers=case.workers,
        devices_per_process=trainer.get("devicesPerProcess"),
        elastic=case.elastic,
    )
    assert problems == ([] if case.refused is None else [case.refused])


@pytest.mark.parametrize("case", MESH_CASES, ids=IDS)
def test_the_pydantic_model_refuses_what_the_schema_refuses(case: MeshCase) -> None:
    if not case.schema:
        KerasJob.model_validate(_body(case))  # the job's rules are CEL's and validation's
        return
    with pytest.raises(pydantic.ValidationError) as e:
        KerasJob.model_validate(_body(case))
    assert all(err["loc"][:3] == ("spec", "trainer", "mesh") for err in e.value.errors())


@pytest.mark.parametrize("case", MESH_CASES, ids=IDS)
def test_the_operators_validation_repeats_the_rules(case: MeshCase) -> None:
    """For objects that never went through the API server: the CEL rules' very words."""
    problems = validate_job(_body(case))
    if case.refused is None:
        assert problems == []
    elif case.schema:
        assert problems and all(p.startswith("spec.trainer.mesh") for p in problems), problems
    else:
        assert problems == [case.refused]


def _trainer_config(case: MeshCase) -> dict[str, Any]:
    """KERASJOB_TRAINER_CONFIG as the operator passes it (spelled by hand where the model
    refuses the spec)."""
    if case.schema:
        return case.spec()["trainer"]
    return children.trainer_config(_body(case))


def _trainer_refusal(case: MeshCase) -> str | None:
    """What the trainer says of the case (None: it trains): its configuration parser (exit
    78 in milliseconds), then the mesh over the job's devices, then the built-in layout."""
    try:
        config = parse_config(json.dumps(_trainer_config(case)))
    except ConfigError as e:
        return str(e)
    mesh = config.mesh
    assert mesh is not None
    declared = config.devices_per_process
    refusals = []
    for local in [declared] if declared is not None else DEVICE_COUNTS:
        try:
            fitted = k3mesh.fitted(mesh, case.workers, local, declared, elastic=case.elastic)
        except ConfigError as e:
            refusals.append(str(e))
            continue
        if shards_builtin(config.model, config.command):
            return _builtin_layout(config.model, fitted)
        return None
    return refusals[0]


def _builtin_layout(model: str, mesh: contract.Mesh) -> str | None:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    devices = [f"cpu:{i}" for i in range(mesh.devices)]
    dmesh = keras.distribution.DeviceMesh(mesh.shape, list(mesh.names), devices)
    try:
        k3mesh.builtin_layout(model, mesh, dmesh)
    except ConfigError as e:
        return str(e)
    return None


@pytest.mark.parametrize("case", MESH_CASES, ids=IDS)
def test_the_trainer_refuses_what_the_api_refuses_and_trains_the_rest(case: MeshCase) -> None:
    """The same verdict; the rules the trainer checks without the job's devices in the same
    words (the device checks in their own, with the numbers JAX gives it)."""
    why = _trainer_refusal(case)
    if case.refused is None:
        assert why is None
        return
    assert why is not None and "\n" not in why
    if case.refused == contract.ELASTIC_WHOLE_REPLICAS:
        assert why.startswith("elastic with mesh") and "must divide the" in why, why
    elif case.refused in (contract.PRODUCT_IS_DEVICES, contract.PRODUCT_PER_WORKER):
        assert "devices, but the job has" in why, why
    else:
        assert case.refused in why, why


def test_model_3_on_a_built_in_says_what_it_needs_in_one_line() -> None:
    """Issue 46: accepted at apply, then exit 78; now refused at apply with these words."""
    (case,) = [c for c in MESH_CASES if c.id == "builtin-model-3"]
    assert validate_job(_body(case)) == [
        "trainer.mesh: the built-in models shard their kernels on an axis named model of size "
        "2, 4, 8 or 16, which must not be the first (batch) axis"
    ]
    assert _trainer_refusal(case) == f"{contract.BUILTIN_LAYOUT}; got batch=2 x model=3"

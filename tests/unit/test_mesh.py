"""spec.trainer.mesh: the contract's parser and fit check, the operator passing it through, and
the trainer's pure parts (each process's share of the batch, the layout guard). The sharded
training itself: tests/trainer/test_keras3_mesh.py; the apply-time refusals:
tests/integration/test_mesh_refusals.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kerasjob.manifests import children
from kerasjob_contract.mesh import (
    Mesh,
    MeshAxis,
    MeshError,
    elastic_error,
    fit_error,
    parse_mesh,
)
from kerasjob_contract.trainer_config import ConfigError, parse_config
from kerasjob_dev.testing.manifests import jax_job
from kerasjob_trainer.runtimes.keras3 import mesh as k3mesh

MESH = [{"name": "batch", "size": 2}, {"name": "model", "size": 2}]


def test_the_mesh_is_ordered_axes_the_first_one_the_batch_axis() -> None:
    mesh = parse_mesh(MESH)
    assert mesh == Mesh((MeshAxis("batch", 2), MeshAxis("model", 2)))
    assert mesh.shape == (2, 2) and mesh.devices == 4 and mesh.batch_axis.name == "batch"
    assert mesh.describe() == "batch=2 x model=2"
    # an object keeps its keys' order where JSON does (the trainer's own flags)
    assert parse_mesh({"model": 4, "data": 1}).names == ("model", "data")
    assert parse_mesh(None) is None and parse_mesh([]) is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ([{"name": "a", "size": 1}] * 2, "unique"),
        ([{"name": f"a{i}", "size": 1} for i in range(5)], "at most 4"),
        ([{"name": "Batch", "size": 2}], "must match"),
        ([{"name": "batch", "size": 0}], "size must be an int from 1 to 4096"),
        ([{"name": "batch", "size": True}], "size must be an int from 1 to 4096"),
        ([{"name": "batch", "size": 2, "x": 1}], "must be {name, size}"),
        ("batch=2", "must be a list"),
    ],
)
def test_a_bad_mesh_is_refused_in_one_line(raw: Any, words: str) -> None:
    with pytest.raises(MeshError) as e:
        parse_mesh(raw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_trainer_config_takes_a_mesh_for_backend_jax_only() -> None:
    cfg = parse_config(json.dumps({"backend": "jax", "mesh": MESH, "devicesPerProcess": 2}))
    assert cfg.mesh is not None and cfg.mesh.devices == 4 and cfg.devices_per_process == 2
    assert parse_config(json.dumps({"backend": "jax"})).mesh is None  # DataParallel
    elastic = {"backend": "jax", "mesh": MESH, "elastic": {"preferredWorkers": 2}}
    assert parse_config(json.dumps(elastic)).mesh == parse_mesh(MESH)  # the trainer checks it
    for bad, words in (
        ({"mesh": MESH}, "needs trainer.backend jax"),
        ({"backend": "jax", "mesh": [{"name": "b", "size": -1}]}, "size must be"),
        ({"backend": "jax", "devicesPerProcess": 0}, "devicesPerProcess must be >= 1"),
    ):
        with pytest.raises(ConfigError, match=words):
            parse_config(json.dumps(bad))


def test_the_fit_check_says_what_the_mesh_needs_and_what_the_job_has() -> None:
    mesh = parse_mesh(MESH)
    assert mesh is not None
    assert fit_error(mesh, 2, 2) is None and fit_error(mesh, 4, 1) is None
    assert fit_error(mesh, 2, 1) == (
        "mesh batch=2 x model=2 needs 4 devices, but the job has 2 process(es) x 1 device(s) = 2"
    )
    with pytest.raises(ConfigError, match="devicesPerProcess is 4, but JAX sees 2"):
        k3mesh.check_fits(mesh, 2, 2, 4)
    with pytest.raises(ConfigError, match="needs 4 devices"):
        k3mesh.check_fits(mesh, 1, 2, None)


def test_an_elastic_mesh_resizes_its_batch_axis_only() -> None:
    mesh = parse_mesh([{"name": "data", "size": 4}, {"name": "model", "size": 2},
                       {"name": "seq", "size": 1}])  # fmt: skip
    assert mesh is not None and mesh.model_devices == 2
    assert mesh.over(2) == Mesh((MeshAxis("data", 1), *mesh.axes[1:]))
    assert mesh.over(6) is not None and mesh.over(6).shape == (3, 2, 1)
    assert mesh.over(3) is None and mesh.over(0) is None
    # a replica's devices must fit whole processes, so every worker count fits
    assert elastic_error(mesh, 2) is None and elastic_error(mesh, 4) is None
    assert elastic_error(mesh, 1) == (
        "elastic with mesh data=4 x model=2 x seq=1: the batch axis follows the workers, so "
        "the axes after it (2 device(s) per model replica) must divide the 1 device(s) of a "
        "process"
    )


def test_the_operator_passes_the_mesh_through_as_spelled() -> None:
    body = jax_job({"trainer": {"backend": "jax", "mesh": MESH, "devicesPerProcess": 2}})
    cfg = children.trainer_config(body)
    assert cfg["mesh"] == MESH and cfg["devicesPerProcess"] == 2
    parsed = parse_config(json.dumps(cfg))
    assert parsed.mesh == parse_mesh(MESH) and parsed.devices_per_process == 2
    assert "mesh" not in children.trainer_config(jax_job())


@pytest.mark.parametrize(
    ("grid", "shares"),
    [
        # 2 processes x 2 devices; the last axis varies within a process first
        ([[0, 0], [1, 1]], {0: (0, 2), 1: (1, 2)}),  # batch=2 x model=2
        ([[0, 0, 1, 1]], {0: (0, 1), 1: (0, 1)}),  # batch=1 x model=4: both feed it all
        ([[0], [0], [1], [1]], {0: (0, 2), 1: (1, 2)}),  # batch=4 x model=1
        ([[0, 1], [2, 3]], {0: (0, 2), 1: (0, 2), 2: (1, 2), 3: (1, 2)}),  # 4 x 1 device
    ],
)
def test_each_process_feeds_the_rows_its_devices_hold(
    grid: list[list[int]], shares: dict[int, tuple[int, int]]
) -> None:
    for process, share in shares.items():
        assert k3mesh.data_shard(np.array(grid), process) == share


@pytest.mark.parametrize("grid", [[[0], [1], [0], [1]], [0, 0, 1]])
def test_a_batch_axis_cut_unevenly_through_processes_is_refused(grid: list[Any]) -> None:
    with pytest.raises(ConfigError, match="one equal, contiguous block"):
        k3mesh.data_shard(np.array(grid), 0)


@dataclass
class _Sharding:
    spec: tuple[Any, ...]


@dataclass
class _Value:
    sharding: _Sharding


@dataclass
class _Variable:
    path: str
    value: _Value


@dataclass
class _Model:
    variables: list[_Variable]


def _model(**specs: tuple[Any, ...]) -> _Model:
    return _Model([_Variable(p.replace("__", "/"), _Value(_Sharding(s))) for p, s in specs.items()])


def test_the_guard_refuses_a_layout_that_shards_nothing_naming_the_paths() -> None:
    mesh = parse_mesh(MESH)
    assert mesh is not None
    replicated = _model(sequential__d1__kernel=(None, None), sequential__d1__bias=(None,))
    with pytest.raises(ConfigError) as e:
        k3mesh.check_layout(replicated, mesh, ["d1/kernel"])
    message = str(e.value)
    assert "shards no variable" in message and "'d1/kernel'" in message and "\n" not in message
    assert "sequential/d1/kernel, sequential/d1/bias" in message
    # sharded on an axis of size 1 is not sharded
    one = parse_mesh([{"name": "batch", "size": 4}, {"name": "model", "size": 1}])
    assert one is not None
    with pytest.raises(ConfigError):
        k3mesh.check_layout(_model(a__kernel=(None, "model")), one, ["a/kernel"])


def test_the_guard_passes_a_sharded_model_and_names_keys_that_matched_nothing() -> None:
    mesh = parse_mesh(MESH)
    assert mesh is not None
    model = _model(s__d1__kernel=(None, "model"), s__d2__kernel=(("batch", "model"), None))
    assert k3mesh.sharded_paths(model.variables, mesh) == ["s/d1/kernel", "s/d2/kernel"]
    assert k3mesh.check_layout(model, mesh, ["s/d1/kernel", "d2/kernel"]) == ["d2/kernel"]


@dataclass
class _Array:
    is_fully_addressable: bool
    is_fully_replicated: bool


@dataclass
class _Optimizer:
    variables: list[_Variable]


@dataclass
class _Compiled:
    variables: list[_Variable]
    optimizer: _Optimizer | None
    metrics_variables: list[_Variable]


def test_only_a_value_split_across_processes_is_gathered_for_the_final_save() -> None:
    assert k3mesh.readable_here(np.zeros(2))  # a host array
    assert k3mesh.readable_here(_Array(is_fully_addressable=True, is_fully_replicated=False))
    assert k3mesh.readable_here(_Array(is_fully_addressable=False, is_fully_replicated=True))
    assert not k3mesh.readable_here(_Array(is_fully_addressable=False, is_fully_replicated=False))


def test_the_final_save_reads_the_layers_optimizer_and_metrics_variables_once_in_order() -> None:
    kernel, bias, momentum, total = _model(
        k=(None, "model"), b=(None,), m=("model",), t=()
    ).variables
    model = _Compiled([kernel, bias], _Optimizer([momentum, kernel]), [total, bias])
    assert [v.path for v in k3mesh.model_variables(model)] == ["k", "b", "m", "t"]
    assert [v.path for v in k3mesh.model_variables(_Compiled([bias], None, []))] == ["b"]


#: A model module whose layout fails over a mesh without its axes, as KerasHub's
#: GemmaBackbone.get_layout_map does (its own check's message names a missing attribute).
HUB_LIKE = """
def build(config):
    raise AssertionError("not called here")


def layout_map(device_mesh):
    if "model" not in device_mesh.axis_names:
        raise ValueError(f"model is not found in {device_mesh.axis_name=}")
    return "a layout"
"""


@dataclass
class _DeviceMesh:
    axis_names: list[str]


@dataclass
class _Sharded:
    mesh: Mesh
    device_mesh: _DeviceMesh


def test_a_layout_that_cannot_use_the_meshs_axes_is_refused_naming_them(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model function's layout_map that fails over the job's mesh (any error: the same
    every time) is a configuration error naming the mesh's axes and what it needs."""
    from kerasjob_trainer.runtimes.keras3 import models

    (tmp_path / "hub_like.py").write_text(HUB_LIKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mesh = parse_mesh([{"name": "data", "size": 2}, {"name": "tensor", "size": 2}])
    assert mesh is not None
    sharded = _Sharded(mesh, _DeviceMesh(["data", "tensor"]))
    with pytest.raises(ConfigError) as e:
        models.layout_for("hub_like:build", sharded, {})  # type: ignore[arg-type]
    message = str(e.value)
    assert message.startswith(
        "mesh data=2 x tensor=2: hub_like:layout_map cannot lay the model out over the axes "
        "'data', 'tensor': AttributeError: '_DeviceMesh' object has no attribute 'axis_name'"
    ), message
    assert "get_layout_map: 'batch' and 'model'" in message and "\n" not in message
    named = parse_mesh(MESH)
    assert named is not None
    fine = _Sharded(named, _DeviceMesh(["batch", "model"]))
    assert models.layout_for("hub_like:build", fine, {}) == "a layout"  # type: ignore[arg-type]

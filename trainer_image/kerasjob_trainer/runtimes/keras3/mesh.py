"""Sharded models (spec.trainer.mesh): the device mesh, ModelParallel, each process's share of
the global batch, the built-in models' layouts and the guard against a layout that shards
nothing.

Every device of the job is laid out row-major in the mesh's shape, in JAX's global device
order (process 0's devices first), so the last axis varies within a process first: on
2 processes x 2 devices, mesh batch=2 x model=2 puts each process's two devices on one row
(model-parallel collectives stay inside a process) and the two processes on the batch axis.
The first axis is the batch axis (`ModelParallel(batch_dim_name=...)`); with
`auto_shard_dataset=False` each process feeds the rows of the global batch its own devices
hold along that axis (`data_shard`): all of it when the batch axis has size 1, half of it on
the mesh above.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from kerasjob_contract.mesh import BUILTIN_AXIS, Mesh, builtin_error, elastic_error, fit_error
from kerasjob_contract.trainer_config import ConfigError

#: The built-in models' Sequential names (shared/models.py) and what their layouts shard:
#: every Dense kernel by rows (its input dimension), every Conv2D kernel by filters.
_BUILTIN_PREFIX = {"mnist-mlp": "mnist_mlp", "mnist-cnn": "mnist_cnn", "cifar10-cnn": "cifar10_cnn"}
#: How many variable paths the guard's message names at most.
_SHOWN = 12


def check_fits(mesh: Mesh, processes: int, local_devices: int, declared: int | None) -> None:
    """ConfigError (exit 78) unless the mesh covers exactly the job's devices."""
    if declared is not None and declared != local_devices:
        raise ConfigError(
            f"devicesPerProcess is {declared}, but JAX sees {local_devices} device(s) in this "
            "process (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N)"
        )
    why = fit_error(mesh, processes, local_devices)
    if why is not None:
        raise ConfigError(why)


def fitted(
    mesh: Mesh, processes: int, local_devices: int, declared: int | None, *, elastic: bool
) -> Mesh:
    """The mesh over the job's devices (`processes` x `local_devices`): as declared, or in an
    elastic job with its batch axis following the processes there are now (`Mesh.over`);
    ConfigError (exit 78) when it cannot cover them."""
    if elastic:
        why = elastic_error(mesh, local_devices)
        if why is not None:
            raise ConfigError(why)
        mesh = mesh.over(processes * local_devices) or mesh
    check_fits(mesh, processes, local_devices, declared)
    return mesh


def device_mesh(mesh: Mesh) -> Any:
    """The Keras DeviceMesh over every device of the job (JAX's global order)."""
    import keras

    return keras.distribution.DeviceMesh(
        shape=mesh.shape, axis_names=list(mesh.names), devices=keras.distribution.list_devices()
    )


def model_parallel(mesh: Mesh, dmesh: Any, layout_map: Any | None) -> Any:
    """ModelParallel over `dmesh` with `layout_map` (None: an empty one, nothing sharded)."""
    import keras

    layout = layout_map if layout_map is not None else keras.distribution.LayoutMap(dmesh)
    return keras.distribution.ModelParallel(
        layout_map=layout, batch_dim_name=mesh.batch_axis.name, auto_shard_dataset=False
    )


def process_grid(mesh: Mesh) -> Any:
    """The process index of every device, in the mesh's shape (a NumPy array)."""
    import jax
    import numpy as np

    return np.array([d.process_index for d in jax.devices()]).reshape(mesh.shape)


def data_shard(grid: Any, process: int) -> tuple[int, int]:
    """(index, count): `process` feeds part `index` of `count` equal parts of each global
    batch: the rows its devices hold along the batch axis (axis 0 of `grid`, the process
    index of every device in the mesh's shape). ConfigError when they are not one
    contiguous block of equal size (a mesh whose batch axis cuts through processes unevenly)."""
    rows = sorted({int(i) for i in range(len(grid)) if (grid[i] == process).any()})
    size = len(grid)
    per = len(rows)
    if not per or size % per or rows != list(range(rows[0], rows[0] + per)) or rows[0] % per:
        raise ConfigError(
            f"process {process} holds rows {rows} of the mesh's batch axis (size {size}): "
            "each process must hold one equal, contiguous block of it"
        )
    return rows[0] // per, size // per


def builtin_layout(name: str, mesh: Mesh, dmesh: Any) -> Any:
    """The layout of built-in model `name`: Dense kernels by rows and Conv2D kernels by
    filters on the axis named model (the contract's rule, `builtin_error`; else ConfigError)."""
    why = builtin_error(mesh)
    if why is not None:
        raise ConfigError(why)
    import keras

    prefix = _BUILTIN_PREFIX[name]
    layout = keras.distribution.LayoutMap(dmesh)
    layout[rf"{prefix}/dense(_\d+)?/kernel"] = (BUILTIN_AXIS, None)
    if name != "mnist-mlp":
        layout[rf"{prefix}/conv2d(_\d+)?/kernel"] = (None, None, None, BUILTIN_AXIS)
    return layout


def sharded_paths(variables: Iterable[Any], mesh: Mesh) -> list[str]:
    """Paths of the variables whose value is split over a mesh axis of size > 1."""
    sizes = {a.name: a.size for a in mesh.axes}
    out = []
    for v in variables:
        spec = getattr(getattr(v.value, "sharding", None), "spec", None) or ()
        axes = [a for entry in spec for a in (entry if isinstance(entry, tuple) else (entry,))]
        if any(a is not None and sizes.get(a, 1) > 1 for a in axes):
            out.append(v.path)
    return out


def unmatched_keys(keys: Sequence[str], paths: Sequence[str]) -> list[str]:
    """The layout keys that `re.fullmatch` no variable path (what LayoutMap does)."""
    return [k for k in keys if not any(re.fullmatch(k, p) for p in paths)]


def check_layout(model: Any, mesh: Mesh, layout_keys: Sequence[str]) -> list[str]:
    """The guard: ConfigError (exit 78) when the model's layout shards none of its variables,
    naming the paths its keys could have matched; else the keys that matched nothing (to warn
    about)."""
    variables = list(model.variables)
    paths = [v.path for v in variables]
    unmatched = unmatched_keys(layout_keys, paths)
    if sharded_paths(variables, mesh):
        return unmatched
    shown = ", ".join(paths[:_SHOWN]) + (
        f" ... ({len(paths)} in all)" if len(paths) > _SHOWN else ""
    )
    keys = ", ".join(repr(k) for k in layout_keys) or "none"
    raise ConfigError(
        f"mesh {mesh.describe()}: the layout shards no variable of the model (its keys {keys} "
        f"are re.fullmatch'ed against variable paths and shard nothing on an axis of size > 1); "
        f"the paths are: {shown}"
    )


def readable_here(value: Any) -> bool:
    """Whether this process can read `value` whole (`numpy()`): a host array, a jax.Array on
    this process's devices only, or one replicated on every device. A value split across
    processes is not: JAX raises "Fetching value for `jax.Array` that spans non-addressable
    devices". Both properties are the sharding's, the same in every process."""
    if getattr(value, "is_fully_addressable", True):
        return True
    return bool(getattr(value, "is_fully_replicated", False))


def gather_to_host(model: Any) -> list[str]:
    """Every process, before it reads the model's values (the final `model.save`): each
    variable of `model` (its layers', its optimizer's, its compiled metrics') whose value is
    split across processes is gathered whole into this process's host memory and held there
    (the job is over: nothing lays it out again). Each gather is a collective (JAX's
    `process_allgather`: one variable replicated at a time, then copied off the devices), so
    every process calls this in the same variable order; the decision is the sharding's, the
    same everywhere. Returns the gathered variables' paths."""
    from jax.experimental import multihost_utils

    gathered = []
    for v in model_variables(model):
        if readable_here(v.value):
            continue
        whole = multihost_utils.process_allgather(v.value, tiled=True)
        # Keras keeps a variable's value in `_value` and reads it through `value` (numpy(),
        # model.save); `assign` would lay it out on the devices again (a collective, and the
        # whole model on each device). A host array read through `value` is what the save needs.
        v._value = whole
        gathered.append(v.path)
    return gathered


def model_variables(model: Any) -> list[Any]:
    """The model's, its optimizer's and its compiled metrics' variables, once each, in one
    order (the same in every process)."""
    optimizer = getattr(model, "optimizer", None)
    found = [
        *model.variables,
        *(optimizer.variables if optimizer is not None else []),
        *getattr(model, "metrics_variables", []),
    ]
    return list({id(v): v for v in found}.values())  # dicts keep the first insertion order


class Sharding:
    """A job's mesh in one process: set up by `setup` (ModelParallel with an empty layout
    until `shard` gives it one), its data share and the layout guard."""

    def __init__(self, mesh: Mesh, dmesh: Any, data: tuple[int, int], local: int) -> None:
        self.mesh = mesh
        self.device_mesh = dmesh
        self.data = data
        self.local_devices = local
        self.layout_keys: list[str] = []

    @classmethod
    def setup(cls, mesh: Mesh, declared_devices: int | None, *, elastic: bool) -> Sharding:
        """Check the mesh against JAX's devices (ConfigError), build it, set ModelParallel.
        In an elastic job the batch axis follows the processes there are now (`Mesh.over`)."""
        import jax
        import keras

        processes, local = jax.process_count(), jax.local_device_count()
        mesh = fitted(mesh, processes, local, declared_devices, elastic=elastic)
        dmesh = device_mesh(mesh)
        made = cls(mesh, dmesh, data_shard(process_grid(mesh), jax.process_index()), local)
        keras.distribution.set_distribution(model_parallel(mesh, dmesh, None))
        return made

    @property
    def replicas(self) -> int:
        """Model replicas: the size of the batch axis (the global batch is per-replica x it)."""
        return self.mesh.batch_axis.size

    def replicas_at(self, processes: int) -> int:
        """The model replicas of this job with `processes` processes (an elastic job's
        preferred size): the batch axis over their devices."""
        return processes * self.local_devices // self.mesh.model_devices

    def shard(self, layout_map: Any) -> None:
        """ModelParallel with `layout_map` (a keras LayoutMap over `device_mesh`): call it
        before the model is built (Keras lays a variable out when it is made)."""
        import keras

        if not isinstance(layout_map, keras.distribution.LayoutMap):
            raise ConfigError(
                f"a layout must be a keras.distribution.LayoutMap, got {layout_map!r}"
            )
        self.layout_keys = list(layout_map.keys())
        keras.distribution.set_distribution(model_parallel(self.mesh, self.device_mesh, layout_map))

    def guard(self, model: Any) -> list[str]:
        """`check_layout` for `model` (ConfigError when nothing is sharded)."""
        return check_layout(model, self.mesh, self.layout_keys)

    def describe(self) -> str:
        index, count = self.data
        return (
            f"mesh {self.mesh.describe()} (ModelParallel, batch axis "
            f"{self.mesh.batch_axis.name!r}); "
            f"this process feeds part {index + 1} of {count} of each global batch"
        )

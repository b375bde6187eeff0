"""spec.trainer.mesh: a job's device mesh (backend jax), its parser and the fit check.

A mesh is an ordered list of named axes, e.g. ``[{"name": "batch", "size": 2},
{"name": "model", "size": 2}]``: the trainer lays every device of the job out in that shape
(row-major, processes in order, so the last axis varies fastest: within a process first) and
trains with `keras.distribution.ModelParallel`. The FIRST axis is the batch axis (the global
batch is split along it); the others shard variables through the model's layout. The JSON
object ``{"batch": 2, "model": 2}`` is accepted as a shorthand (its keys in order) where JSON
keeps the order (the trainer's own flags; the API server sorts an object's keys, so the API
takes the list).

Pure standard library: the operator's API and the trainer share it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

#: At most this many axes (the CRD's CEL rule spells out the product for each of them).
MAX_AXES = 4
#: An axis name: what Keras/JAX name mesh axes with (and LayoutMap values refer to).
AXIS_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
_AXIS_NAME = re.compile(AXIS_NAME_PATTERN)


class MeshError(ValueError):
    """The mesh cannot work (the trainer exits 78 with this one line)."""


@dataclasses.dataclass(frozen=True)
class MeshAxis:
    name: str
    size: int


@dataclasses.dataclass(frozen=True)
class Mesh:
    """Ordered axes; axes[0] is the batch axis."""

    axes: tuple[MeshAxis, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def devices(self) -> int:
        return math.prod(self.shape)

    @property
    def batch_axis(self) -> MeshAxis:
        return self.axes[0]

    @property
    def model_devices(self) -> int:
        """The devices of one model replica: the product of the axes after the batch axis."""
        return math.prod(self.shape[1:])

    def over(self, devices: int) -> Mesh | None:
        """This mesh over `devices` devices with only its batch axis resized (an elastic job
        at another worker count: the model axes stay, the replicas follow the workers);
        None when a replica's devices do not divide `devices`."""
        if devices < 1 or devices % self.model_devices:
            return None
        first = MeshAxis(self.batch_axis.name, devices // self.model_devices)
        return Mesh((first, *self.axes[1:]))

    def describe(self) -> str:
        """e.g. 'batch=2 x model=2'."""
        return " x ".join(f"{a.name}={a.size}" for a in self.axes)


def parse_mesh(raw: Any) -> Mesh | None:
    """The mesh from the trainer config (None or [] = no mesh: DataParallel)."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        raw = [{"name": k, "size": v} for k, v in raw.items()]
    if not isinstance(raw, list):
        raise MeshError(f"mesh must be a list of {{name, size}} axes, got {raw!r}")
    if not raw:
        return None
    if len(raw) > MAX_AXES:
        raise MeshError(f"mesh has {len(raw)} axes; at most {MAX_AXES}")
    axes = tuple(_axis(i, a) for i, a in enumerate(raw))
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise MeshError(f"mesh axis names must be unique, got {', '.join(names)}")
    return Mesh(axes)


def _axis(i: int, raw: Any) -> MeshAxis:
    if not isinstance(raw, dict) or set(raw) != {"name", "size"}:
        raise MeshError(f"mesh[{i}] must be {{name, size}}, got {raw!r}")
    name, size = raw["name"], raw["size"]
    if not isinstance(name, str) or not _AXIS_NAME.match(name):
        raise MeshError(f"mesh[{i}].name {name!r} must match {AXIS_NAME_PATTERN}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise MeshError(f"mesh axis {name!r}: size must be an int >= 1, got {size!r}")
    return MeshAxis(name, size)


def fit_error(mesh: Mesh, processes: int, devices_per_process: int) -> str | None:
    """Why `mesh` does not fit the job's devices, in one line (None: it fits)."""
    have = processes * devices_per_process
    if mesh.devices == have:
        return None
    return (
        f"mesh {mesh.describe()} needs {mesh.devices} devices, but the job has "
        f"{processes} process(es) x {devices_per_process} device(s) = {have}"
    )


def elastic_error(mesh: Mesh, devices_per_process: int) -> str | None:
    """Why `mesh` cannot follow an elastic job's worker count, in one line (None: it can).
    The batch axis grows and shrinks with the workers, so one replica's devices (the axes
    after the batch axis) must fit in whole processes: their product must divide the devices
    of a process."""
    if devices_per_process % mesh.model_devices == 0:
        return None
    return (
        f"elastic with mesh {mesh.describe()}: the batch axis follows the workers, so the "
        f"axes after it ({mesh.model_devices} device(s) per model replica) must divide the "
        f"{devices_per_process} device(s) of a process"
    )

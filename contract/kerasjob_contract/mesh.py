"""spec.trainer.mesh: a job's device mesh (backend jax), its parser and the fit check.

A mesh is an ordered list of named axes, e.g. ``[{"name": "batch", "size": 2},
{"name": "model", "size": 2}]``: the trainer lays every device of the job out in that shape
(row-major, processes in order, so the last axis varies fastest: within a process first) and
trains with `keras.distribution.ModelParallel`. The FIRST axis is the batch axis (the global
batch is split along it); the others shard variables through the model's layout. The JSON
object ``{"batch": 2, "model": 2}`` is accepted as a shorthand (its keys in order) where JSON
keeps the order (the trainer's own flags; the API server sorts an object's keys, so the API
takes the list).

The rules a job's mesh must satisfy are written here once (`job_problems`, one message each):
the CRD's CEL rules carry the same messages (`kerasjob.api.trainer.MESH_RULES`), the operator's
validation and the trainer's configuration parser call `job_problems` / `builtin_error`, and one
table of cases (`kerasjob_dev.testing.mesh_cases`) runs through all of them and the API server.

Pure standard library: the operator's API and the trainer share it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

#: At most this many axes (the CRD's CEL rule spells out the product for each of them).
MAX_AXES = 4
#: At most this many devices along one axis.
MAX_AXIS_SIZE = 4096
#: An axis name: what Keras/JAX name mesh axes with (and LayoutMap values refer to).
AXIS_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
_AXIS_NAME = re.compile(AXIS_NAME_PATTERN)


#: The axis the built-in models shard their kernels on, and the sizes it may have: those that
#: divide every sharded dimension of theirs (784, 256, 800, 2304, 64 rows; 16..64 filters).
BUILTIN_AXIS = "model"
BUILTIN_AXIS_SIZES = (2, 4, 8, 16)

# The rules of a job's mesh, one message each (the CRD's CEL rules, the operator's validation
# and the trainer say these words). Static: a CEL messageExpression printing the numbers is
# estimated beyond the API server's cost budget; the trainer's exit-78 line adds them.
NEEDS_JAX = "trainer.mesh needs trainer.backend jax (keras.distribution.ModelParallel)"
ELASTIC_WHOLE_REPLICAS = (
    "trainer.mesh with elastic: the batch axis follows the workers, so the product of the "
    "axes after it must divide trainer.devicesPerProcess"
)
PRODUCT_IS_DEVICES = (
    "trainer.mesh: the product of its axis sizes must equal workers x trainer.devicesPerProcess"
)
PRODUCT_PER_WORKER = (
    "trainer.mesh: the product of its axis sizes must be a multiple of workers (every "
    "process has the same number of devices)"
)
BUILTIN_LAYOUT = (
    f"trainer.mesh: the built-in models shard their kernels on an axis named {BUILTIN_AXIS} "
    f"of size {', '.join(map(str, BUILTIN_AXIS_SIZES[:-1]))} or {BUILTIN_AXIS_SIZES[-1]}, "
    "which must not be the first (batch) axis"
)


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
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_AXIS_SIZE:
        raise MeshError(
            f"mesh axis {name!r}: size must be an int from 1 to {MAX_AXIS_SIZE}, got {size!r}"
        )
    return MeshAxis(name, size)


def builtin_problem(mesh: Mesh) -> str | None:
    """Why a built-in model cannot shard on `mesh` (`BUILTIN_LAYOUT`; None: it can): its
    layout needs an axis named model, not the first, of a size in `BUILTIN_AXIS_SIZES`."""
    sizes = {a.name: a.size for a in mesh.axes[1:]}
    if mesh.batch_axis.name != BUILTIN_AXIS and sizes.get(BUILTIN_AXIS) in BUILTIN_AXIS_SIZES:
        return None
    return BUILTIN_LAYOUT


def builtin_error(mesh: Mesh) -> str | None:
    """`builtin_problem` as the trainer's exit-78 line says it (with the mesh)."""
    why = builtin_problem(mesh)
    return None if why is None else f"{why}; got {mesh.describe()}"


def job_problems(
    mesh: Mesh,
    *,
    backend: str,
    builtin_model: bool,
    workers: int,
    devices_per_process: int | None,
    elastic: bool,
) -> list[str]:
    """What is wrong with a job's mesh, in the CRD's CEL rules' order and words (the rules,
    written once: `kerasjob.api.trainer.MESH_RULES` are held to them by one table of cases).
    The checks against the devices need devicesPerProcess; without it the trainer makes them
    against the devices JAX sees (`fit_error`, `elastic_error`)."""
    dpp = devices_per_process
    rules = (
        (backend == "jax", NEEDS_JAX),
        (not elastic or dpp is None or dpp % mesh.model_devices == 0, ELASTIC_WHOLE_REPLICAS),
        (dpp is None or mesh.devices == workers * dpp, PRODUCT_IS_DEVICES),
        (dpp is not None or mesh.devices % workers == 0, PRODUCT_PER_WORKER),
        (not builtin_model or builtin_problem(mesh) is None, BUILTIN_LAYOUT),
    )
    return [message for ok, message in rules if not ok]


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

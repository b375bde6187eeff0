"""A Keras 3 model's training state by variable path, for the Orbax backup (`checkpoint`).

The state is every variable a resumed run needs: the model's trainable and non-trainable
variables (the latter include the random layers' SeedGenerator state) and the optimizer's
(its iteration counter is the global step), keyed by the variable's `path`; the compiled
metrics' running totals apart. A restore assigns each saved array to the live model's
variable of the same path (never through `keras.saving`: keras #23251, a rebuilt Sequential
restored with wrong weights), then reads every variable back and compares it bit for bit.

A model rebuilt in the same process gets other automatic names (`sequential_1/dense_2/...`):
when the paths differ but the saved variables and the live ones agree one to one in order,
shape and dtype, they are matched by position (the structure is the same model's), and the
restore says so. Anything else is refused, naming the first difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Orbax tree keys cannot hold "/": a variable path's separator in the saved tree.
SEP = "|"


def variables(model: Any) -> list[Any]:
    """The variables of the backup, in their fixed order (the optimizer built first)."""
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    found = [*model.trainable_variables, *model.non_trainable_variables]
    if optimizer is not None:
        found += list(optimizer.variables)
    return found


def sync(model: Any) -> None:
    """Inside `fit`, Keras on JAX holds the newest values off the variables: put them back."""
    step_sync = getattr(model, "jax_state_sync", None)
    if step_sync is not None:
        step_sync()


def key(path: str) -> str:
    return path.replace("/", SEP)


def path_of(saved_key: str) -> str:
    return saved_key.replace(SEP, "/")


def tree(model: Any) -> dict[str, Any]:
    """{key: the variable's current jax.Array} (sharded or replicated as it lives)."""
    return {key(v.path): v.value for v in variables(model)}


def metric_totals(model: Any) -> dict[str, np.ndarray]:
    """The compiled metrics' running totals, by key (host copies: they are small)."""
    return {key(v.path): np.asarray(v.numpy()) for v in getattr(model, "metrics_variables", [])}


Saved = list[tuple[str, tuple[int, ...], str]]
"""(key, shape, dtype) of each saved variable, in the saved order."""


def match(saved: Saved, live: list[Any]) -> tuple[dict[str, Any], str]:
    """{saved key: live variable} and how they were matched ("path" or "position").
    `saved`: (key, shape, dtype) in the saved order. Raises ValueError when they differ."""
    by_path = {key(v.path): v for v in live}
    if {k for k, _, _ in saved} == set(by_path) and len(saved) == len(live):
        pairs = {k: by_path[k] for k, _, _ in saved}
        how = "path"
    elif len(saved) == len(live):
        pairs = {k: v for (k, _, _), v in zip(saved, live, strict=True)}
        how = "position"
    else:
        first = _first_difference([path_of(k) for k, _, _ in saved], [v.path for v in live])
        raise ValueError(
            f"the backup holds {len(saved)} variables, this model {len(live)}; "
            f"first difference: {first}"
        )
    for k, shape, dtype in saved:
        v = pairs[k]
        if tuple(shape) != tuple(v.shape) or str(dtype) != _dtype(v):
            raise ValueError(
                f"backup variable {path_of(k)}: {dtype}{list(shape)}, model {v.path}: "
                f"{_dtype(v)}{list(v.shape)}"
            )
    return pairs, how


def assign(pairs: dict[str, Any], restored: dict[str, Any]) -> None:
    for k, v in pairs.items():
        v.assign(restored[k])


def check_bit_for_bit(pairs: dict[str, Any], restored: dict[str, Any]) -> None:
    """Every live variable holds exactly the restored value (each addressable shard, bytes
    compared); raises ValueError naming the first that does not."""
    for k, v in pairs.items():
        if not same_bits(v.value, restored[k]):
            raise ValueError(f"variable {v.path} does not hold the restored value bit for bit")


def same_bits(live: Any, expected: Any) -> bool:
    """Each of this process's shards of `live` equals the same piece of `expected` (a
    jax.Array of the same sharding, or a whole host array), dtype, shape and bytes."""
    for device, index, piece in _pieces(live):
        other = _piece_of(expected, device, index)
        if other is None or not _identical(piece, other):
            return False
    return True


def _pieces(a: Any) -> list[tuple[Any, Any, np.ndarray]]:
    shards = getattr(a, "addressable_shards", None)
    if shards is None:
        return [(None, (), np.asarray(a))]
    return [(s.device, s.index, np.asarray(s.data)) for s in shards]


def _piece_of(a: Any, device: Any, index: Any) -> np.ndarray | None:
    shards = getattr(a, "addressable_shards", None)
    if shards is None:
        return np.asarray(np.asarray(a)[index])
    for s in shards:
        if s.device == device:
            return np.asarray(s.data)
    return None


def _identical(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _dtype(v: Any) -> str:
    return str(np.dtype(v.dtype))


def _first_difference(a: list[str], b: list[str]) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"{x!r} vs {y!r}"
    return "lengths differ"

"""The Keras 3 backup: every variable a resumed run needs, bit for bit, in one atomic file.

`<CHECKPOINT_DIR>/backup/keras3-state.npz` holds, in a fixed order, the model's trainable and
non-trainable variables (the latter include the random layers' SeedGenerator state) and the
optimizer's variables (its iteration counter is the global step), plus their paths and a
JSON header (step, processes, global batch). Process 0 writes it (DataParallel variables are
replicated: its local copy is the whole value, no collective needed) to a temporary file,
fsyncs and renames it over the previous one: a reader sees the old backup or the new one,
never half of one. Every process reads it before `fit` and assigns the values.

The compiled metrics' running totals (loss and metric sums and counts of the epoch so far) are
in it too, apart: a run resumed in mid-epoch continues the epoch's logged averages where they
were (`metric_totals` / `restore_metric_totals`), so its step lines and status equal an
undisturbed run's.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

STATE_FILE = "keras3-state.npz"
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Header:
    step: int
    processes: int
    global_batch: int | None = None
    format: int = FORMAT


def state_variables(model: Any) -> list[Any]:
    """The variables of the backup, in their fixed order (optimizer built first)."""
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    found = [*model.trainable_variables, *model.non_trainable_variables]
    if optimizer is not None:
        found += list(optimizer.variables)
    return found


def path(backup_dir: str) -> str:
    return os.path.join(backup_dir, STATE_FILE)


def read_header(backup_dir: str) -> Header | None:
    """The backup's header without its arrays (cheap: before JAX starts); None: no backup."""
    try:
        with np.load(path(backup_dir), allow_pickle=False) as f:
            return Header(**json.loads(str(f["header"])))
    except FileNotFoundError:
        return None


def save(backup_dir: str, model: Any, header: Header) -> str:
    """Write the backup atomically (process 0 only)."""
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:  # inside fit, Keras on JAX holds the newest values off the variables
        sync()
    variables = state_variables(model)
    arrays = {f"v{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(variables)}
    metrics = list(getattr(model, "metrics_variables", []))
    arrays.update({f"m{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(metrics)})
    os.makedirs(backup_dir, exist_ok=True)
    final = path(backup_dir)
    tmp = f"{final}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        payload: dict[str, Any] = {
            "header": np.array(json.dumps(dataclasses.asdict(header))),
            "paths": np.array([v.path for v in variables]),
            "metric_paths": np.array([v.path for v in metrics], dtype=str),
            **arrays,
        }
        np.savez(f, **payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    return final


def restore(backup_dir: str, model: Any) -> Header | None:
    """Assign the backup's values to `model`'s variables; None when there is no backup.
    Raises ValueError when the backup does not belong to this model."""
    variables = state_variables(model)
    try:
        f = np.load(path(backup_dir), allow_pickle=False)
    except FileNotFoundError:
        return None
    with f:
        header = Header(**json.loads(str(f["header"])))
        paths = [str(p) for p in f["paths"]]
        mine = [v.path for v in variables]
        if paths != mine:
            raise ValueError(
                f"the backup in {backup_dir} holds other variables than this "
                f"model ({len(paths)} saved, {len(mine)} here; first difference: "
                f"{_first_difference(paths, mine)})"
            )
        for i, v in enumerate(variables):
            value = f[f"v{i:05d}"]
            if tuple(value.shape) != tuple(v.shape):
                raise ValueError(
                    f"backup variable {v.path}: shape {value.shape}, model {tuple(v.shape)}"
                )
            v.assign(value)
    return header


def metric_totals(backup_dir: str) -> dict[str, np.ndarray]:
    """The compiled metrics' running totals in the backup, by variable path ({}: none)."""
    try:
        with np.load(path(backup_dir), allow_pickle=False) as f:
            if "metric_paths" not in f:
                return {}
            return {str(p): f[f"m{i:05d}"] for i, p in enumerate(f["metric_paths"])}
    except FileNotFoundError:
        return {}


def restore_metric_totals(model: Any, totals: dict[str, np.ndarray]) -> bool:
    """Assign saved running totals to `model`'s compiled metrics (built by then); False when
    they do not match this model's metrics (then they start at zero, as at an epoch start)."""
    variables = list(getattr(model, "metrics_variables", []))
    if not totals or [v.path for v in variables] != list(totals):
        return False
    for v in variables:
        v.assign(totals[v.path])
    return True


def _first_difference(a: list[str], b: list[str]) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"{x!r} vs {y!r}"
    return "lengths differ"

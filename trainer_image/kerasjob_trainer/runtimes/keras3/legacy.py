"""The backup of the Keras 3 trainer before Orbax: `<backup>/keras3-state.npz`, written by
process 0 (format 1). Restored once, when no Orbax step exists: a job upgraded in the
middle of a run resumes where it was; its next save is an Orbax step (`checkpoint`). Its
variables are matched as the Orbax ones are (`state.match`), and checked bit for bit."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from kerasjob_trainer.runtimes.keras3 import state

FILE = "keras3-state.npz"


def read_header(backup_dir: str) -> dict[str, Any] | None:
    try:
        with np.load(os.path.join(backup_dir, FILE), allow_pickle=False) as f:
            header: dict[str, Any] = json.loads(str(f["header"]))
    except FileNotFoundError:
        return None
    return header


def restore(backup_dir: str, model: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(header, metric totals by key) after assigning the npz's values; None: no npz."""
    try:
        f = np.load(os.path.join(backup_dir, FILE), allow_pickle=False)
    except FileNotFoundError:
        return None
    with f:
        header: dict[str, Any] = json.loads(str(f["header"]))
        paths = [str(p) for p in f["paths"]]
        arrays = {state.key(p): f[f"v{i:05d}"] for i, p in enumerate(paths)}
        saved = [(k, tuple(a.shape), str(a.dtype)) for k, a in arrays.items()]
        pairs, _ = state.match(saved, state.variables(model))
        state.assign(pairs, arrays)
        state.check_bit_for_bit(pairs, arrays)
        names = [str(p) for p in f["metric_paths"]] if "metric_paths" in f else []
        totals = {state.key(p): f[f"m{i:05d}"] for i, p in enumerate(names)}
    header["format"] = 1
    return header, totals

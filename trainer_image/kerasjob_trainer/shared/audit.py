"""The data and step audit (debug): what every replica trained on, and the optimizer's
counters and learning rate, per global step, as JSON lines.

On when KERASJOB_AUDIT_DIR names a directory (e.g. on the shared checkpoint volume, set
through spec.template env); off by default, and then nothing of it is in the pipeline or the
training loop. Each process appends to two files named after its role and index:

- `data-<role><index>.jsonl`: {"step": g, "replica": r, "indices": [...]} for each
  per-replica batch the indexed pipeline *produces* (written by the pipeline, so batches
  prefetched but not trained before a disruption appear too: the same step may appear in
  several generations, and must then have the same indices);
- `steps-<role><index>.jsonl`: {"step": g, "epoch": e, "batch": k, "iterations": i,
  "lr": lr, "loss": loss, "logs": {name: value}, "pid": pid, "time": unix seconds} after
  each trained step g (0-based; `iterations` is optimizer.iterations after it, g + 1;
  `logs` what fit logged for it: the running loss and metrics of the epoch so far).

The audit adds a Python call per batch and per step: for debugging and tests, not for
production speed. This is the runtimes' shared writer; the tf-keras runtime's hooks into
tf.data and tf_keras are `runtimes/tf_keras/audit.py`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

AUDIT_ENV = "KERASJOB_AUDIT_DIR"


class Audit:
    def __init__(self, directory: str, name: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.Lock()
        self._data = open(  # noqa: SIM115  (open for the process's life)
            os.path.join(directory, f"data-{name}.jsonl"),
            "a",
            encoding="utf-8",
        )
        self._steps = open(  # noqa: SIM115
            os.path.join(directory, f"steps-{name}.jsonl"),
            "a",
            encoding="utf-8",
        )

    @classmethod
    def from_env(cls, name: str) -> Audit | None:
        directory = os.environ.get(AUDIT_ENV)
        return cls(directory, name) if directory else None

    def _write(self, f: Any, record: dict[str, Any]) -> None:
        with self._lock:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
            f.flush()

    def data(self, step: int, replica: int, indices: list[int]) -> None:
        """One per-replica batch as the pipeline produced it (the Keras 3 input's record)."""
        self._write(self._data, {"step": step, "replica": replica, "indices": indices})

    def trained(
        self, step: int, epoch: int, batch: int, logs: Any, lr: float | None = None
    ) -> None:
        """Trained step `step` (0-based; the optimizer counts step + 1 after it), `logs` what
        fit logged for it, `lr` the learning rate it used (when the runtime knows it)."""
        logs = logs or {}
        record = {
            "step": step,
            "epoch": epoch,
            "batch": int(batch),
            "iterations": step + 1,
            **({"lr": lr} if lr is not None else {}),
            "loss": float(logs.get("loss", float("nan"))),
            "logs": {k: float(v) for k, v in logs.items()},
            "pid": os.getpid(),
            "time": time.time(),
        }
        self._write(self._steps, record)

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

The audit adds a Python call per batch (tf.py_function) and per step: for debugging and
tests, not for production speed.
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

    def step(self, record: dict[str, Any]) -> None:
        """One trained step (the Keras 3 session's record; the keys of `callback`'s)."""
        self._write(self._steps, record)

    def pipeline_hook(self, steps: Any, replicas: Any, indices: Any) -> Any:
        """Inside tf.data: records each (step, replica, indices) row, returns the indices."""
        import tensorflow as tf

        def record(s: Any, r: Any, idx: Any) -> Any:
            for step, replica, row in zip(
                s.numpy().tolist(), r.numpy().tolist(), idx.numpy().tolist(), strict=True
            ):
                self._write(self._data, {"step": step, "replica": replica, "indices": row})
            return idx

        out = tf.py_function(record, [steps, replicas, indices], tf.int64)
        out.set_shape(indices.shape)
        return out

    def callback(self) -> Any:
        import tf_keras

        audit = self

        class StepAudit(tf_keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                self.epoch = int(epoch)  # a numpy int after a resume

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                optimizer = self.model.optimizer
                iterations = int(optimizer.iterations.numpy())
                audit._write(
                    audit._steps,
                    {
                        "step": iterations - 1,
                        "epoch": self.epoch,
                        "batch": int(batch),
                        "iterations": iterations,
                        "lr": learning_rate(optimizer, iterations - 1),
                        "loss": float((logs or {}).get("loss", float("nan"))),
                        "logs": {k: float(v) for k, v in (logs or {}).items()},
                        "pid": os.getpid(),
                        "time": time.time(),
                    },
                )

        return StepAudit()


def learning_rate(optimizer: Any, step: int) -> float:
    """The learning rate used at `step` (0-based), also when it is a schedule."""
    import tf_keras

    lr = getattr(optimizer, "_learning_rate", None)
    if isinstance(lr, tf_keras.optimizers.schedules.LearningRateSchedule):
        return float(lr(step))
    return float(
        optimizer.learning_rate.numpy()
        if hasattr(optimizer.learning_rate, "numpy")
        else optimizer.learning_rate
    )

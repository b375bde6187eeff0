"""The Keras 3 trainer's input through Grain: examples read by index from any random-access
source (ArrayRecord files on a mounted volume, `records.py`; an npz or mnist-sample in
memory), in the global order of `data.py`, each process its share of each global batch.

- **Order**: pass e visits the N examples in NumPy's permutation seeded by (seed, e, salt)
  (`data.Permutations`): the global order is a pure function of (seed, epoch), the same for
  every source and every process count; global batch g is stream positions [g*B, (g+1)*B)
  and process p of P takes [g*B + p*B/P, g*B + (p+1)*B/P).
- **Grain**: `MapDataset.range(start, end)` of global steps, mapped to this process's share
  of each (`_Share`: the indices, the examples read, stacked), then `to_iter_dataset` with
  Grain's read threads prefetching, and with `workers` > 0 `mp_prefetch`: that many worker
  processes read and decode batches in parallel (pays for ArrayRecord's npz decoding:
  measured in `bench/keras3_io.py`).
- **State**: the data position is (global step, global batch, seed, N); the backup records
  it (`StepSource.position`) and a resumed run builds the iterator at that step, so a run
  resumed at another process count continues at exactly the next example (each process
  takes its new share). A per-process Grain iterator state would not survive a resize;
  this does, and it is the whole state: nothing else decides what comes next.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from kerasjob_trainer.runtimes.keras3.data import Permutations, StepSource, process_indices

#: Worker processes for reading and decoding (0: Grain's threads in the trainer process).
WORKERS_ENV = "KERASJOB_DATA_WORKERS"


def workers_from_env() -> int:
    raw = os.environ.get(WORKERS_ENV, "0")
    try:
        return max(int(raw), 0)
    except ValueError:
        return 0


class _Share:
    """Global step -> (x, y, indices) of one process's share (picklable for workers)."""

    def __init__(
        self, source: Any, size: int, seed: int, global_batch: int, process: int, processes: int
    ) -> None:
        self.source, self.size, self.seed = source, size, seed
        self.global_batch, self.process, self.processes = global_batch, process, processes
        self._perms: Permutations | None = None

    def __call__(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._perms is None:
            self._perms = Permutations(self.size, self.seed)
        idx = process_indices(self._perms, step, self.process, self.processes, self.global_batch)
        take = getattr(self.source, "take", None)
        if take is not None:  # a batched read (arrays in memory: one fancy index)
            x, y = take(idx)
            return x, y, idx
        pairs = [self.source[int(i)] for i in idx]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs]), idx

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_perms": None}


class GrainReader:
    """Batches of one process in global-step order from a Grain iterator; a request for
    another step than the next (a new `fit` segment after a restore) starts a new one."""

    def __init__(
        self, source: Any, size: int, seed: int, global_batch: int, workers: int, audit: Any
    ) -> None:
        self.source, self.size, self.seed = source, size, seed
        self.global_batch, self.workers, self.audit = global_batch, workers, audit
        self._it: Any = None
        self._next = -1
        self._key: tuple[int, int] | None = None

    def batch(self, step: int, process: int, processes: int) -> tuple[Any, Any]:
        if self._it is None or step != self._next or self._key != (process, processes):
            self._start(step, process, processes)
        x, y, idx = next(self._it)
        self._next = step + 1
        if self.audit is not None:
            self.audit.data(step, process, idx.tolist())
        return x, y

    def _start(self, step: int, process: int, processes: int) -> None:
        import grain

        self.close()
        share = _Share(self.source, self.size, self.seed, self.global_batch, process, processes)
        ds = grain.MapDataset.range(step, sys.maxsize).map(share)
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
        if self.workers > 0:
            _absl_flags_parsed()
            it = it.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=self.workers, per_worker_buffer_size=2)
            )
        self._it = iter(it)
        self._key = (process, processes)

    def close(self) -> None:
        it, self._it = self._it, None
        closer = getattr(it, "close", None)
        if closer is not None:
            closer()


def _absl_flags_parsed() -> None:
    """Grain's worker processes read absl flags, which only an absl `app.run` parses: the
    defaults, then (a trainer has no absl command line)."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def grain_source(
    source: Any, global_batch: int, seed: int, *, workers: int = 0, audit: Any = None
) -> StepSource:
    """A StepSource reading `source` (len, [i] -> (x, y)) through Grain."""
    size = len(source)
    if size < 1:
        raise ValueError("the training set is empty")
    reader = GrainReader(source, size, seed, global_batch, workers, audit)
    return StepSource(reader.batch, size, global_batch, seed, "grain", close=reader.close)


class ArraySource:
    """In-memory (x, y) arrays as a Grain data source."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.x[index], self.y[index]

    def take(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[indices], self.y[indices]

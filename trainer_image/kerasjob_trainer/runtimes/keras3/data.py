"""The step-indexed input of the Keras 3 trainer: what process p trains on at global step g is
a pure function of (seed, g, p, processes), so a resumed run continues the data stream at the
exact example, whatever the number of processes.

As in the tf-keras runtime (`runtimes/tf_keras/pipeline.py`), the examples form one endless
stream of passes; pass e visits the N examples in a permutation seeded by (seed, e,
SEED_SALT); global batch g is stream positions [g*B, (g+1)*B); of the P processes, process p
takes positions [g*B + p*B/P, g*B + (p+1)*B/P). A job resized from P to P' processes trains
on the same global batches (each process takes a larger or smaller share). The permutation
is NumPy's (PCG64), not TensorFlow's RandomIndexShuffle: the two backends visit the examples
in different orders, each exactly reproducible. One permutation per pass is kept (O(N) once
per pass, then O(b) per batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from kerasjob_trainer.shared.data import SEED_SALT, Indexed

BatchFn = Callable[[int, int, int], tuple[Any, Any]]
"""(global step, process id, processes) -> (x, y) of this process's share of that batch."""


class Permutations:
    """The permutation of each pass over `size` examples (the latest one cached)."""

    def __init__(self, size: int, seed: int) -> None:
        if size < 1:
            raise ValueError("the training set is empty")
        self.size, self.seed = size, seed
        self._cached: tuple[int, np.ndarray] | None = None

    def of_pass(self, number: int) -> np.ndarray:
        if self._cached is None or self._cached[0] != number:
            rng = np.random.default_rng([self.seed, number, SEED_SALT])
            self._cached = (number, rng.permutation(self.size))
        return self._cached[1]

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The example index at each stream position."""
        out = np.empty(len(positions), dtype=np.int64)
        passes = positions // self.size
        for number in np.unique(passes):
            mask = passes == number
            out[mask] = self.of_pass(int(number))[positions[mask] % self.size]
        return out


def share(global_batch: int, processes: int) -> int:
    if global_batch % processes:
        raise ValueError(
            f"the global batch {global_batch} cannot be split evenly across {processes} processes"
        )
    return global_batch // processes


def process_indices(
    perms: Permutations, step: int, process: int, processes: int, global_batch: int
) -> np.ndarray:
    """The example indices of process `process`'s share of global batch `step`."""
    b = share(global_batch, processes)
    first = step * global_batch + process * b
    return perms.at(np.arange(first, first + b, dtype=np.int64))


def global_batch_indices(step: int, global_batch: int, size: int, seed: int) -> np.ndarray:
    """Every example index of global batch `step` (tests and audits)."""
    return process_indices(Permutations(size, seed), step, 0, 1, global_batch)


@dataclasses.dataclass
class StepSource:
    """Where batches come from: in-memory examples (indexed), files through Grain
    (`grain_source`), or the user's batch function."""

    batch: BatchFn
    size: int | None = None  # examples per pass (None: a user batch function)
    global_batch: int | None = None
    seed: int | None = None
    kind: str = "function"
    close: Callable[[], None] | None = None

    def position(self, step: int) -> dict[str, Any]:
        """The data position before global step `step` (the backup's record of it): the
        order is a pure function of (seed, pass), so this is the whole iterator state."""
        return {
            "kind": self.kind,
            "step": step,
            "examples": step * self.global_batch if self.global_batch else None,
            "globalBatch": self.global_batch,
            "seed": self.seed,
            "size": self.size,
        }

    def check(self, saved: dict[str, Any] | None, step: int) -> None:
        """Raise ValueError when a backup's data position is not where this source resumes."""
        if not saved or saved.get("examples") is None or self.global_batch is None:
            return
        mine = self.position(step)
        for field in ("examples", "seed", "size"):
            if saved.get(field) != mine[field]:
                raise ValueError(
                    f"data position: the backup was taken at {field}={saved.get(field)}, "
                    f"this run resumes at {mine[field]} (global batch, seed or dataset changed)"
                )


def indexed_source(
    examples: Indexed, global_batch: int, seed: int, audit: Any | None = None
) -> StepSource:
    perms = Permutations(examples.size, seed)

    def batch(step: int, process: int, processes: int) -> tuple[Any, Any]:
        idx = process_indices(perms, step, process, processes, global_batch)
        if audit is not None:
            audit.data(step, process, idx.tolist())
        return examples.x[idx], examples.y[idx]

    return StepSource(batch, examples.size, global_batch, seed, "arrays")


def step_input(
    source: StepSource, start_step: int, steps: int, process: int, processes: int
) -> Any:
    """A keras.utils.PyDataset of `steps` batches: item i is global step start_step + i
    (Keras asks for items in order, one epoch per `fit` call: see `session.fit`)."""
    import keras

    class StepInput(keras.utils.PyDataset):  # type: ignore[misc,name-defined]
        def __len__(self) -> int:
            return steps

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            if not 0 <= i < steps:
                raise IndexError(i)
            return source.batch(start_step + i, process, processes)

    return StepInput()

"""How many training steps this process has finished: what the SIGTERM fallback and the step
log need to know (`session`, `progress`, and the Keras 3 session alike)."""

from __future__ import annotations

_done = 0


def step_done() -> None:
    global _done
    _done += 1


def steps_this_process() -> int:
    return _done


def first_step() -> bool:
    """Whether the step just done is this process's first (logged, to time restarts)."""
    return _done == 1

"""TensorBoard scalars of the Keras 3 runtime, without TensorFlow: the chief writes the
step lines' scalars (loss, metrics, samples/s) to `<output>/tensorboard/` every log interval,
as the tf-keras runtime does, through tensorboardX's event writer (protobuf only;
`keras.callbacks.TensorBoard` needs TensorFlow). Each incarnation adds an event file; a
resumed run goes on from the step it resumed at."""

from __future__ import annotations

import os
from collections.abc import Callable

from kerasjob_trainer.shared.faults import say

SUBDIR = "tensorboard"

Write = Callable[[int, dict[str, float | None]], None]


class Scalars:
    """The chief's event file; `write(step, scalars)` flushes at once (a Pod may end any time)."""

    def __init__(self, output_dir: str) -> None:
        from tensorboardX import SummaryWriter

        self.logdir = os.path.join(output_dir, SUBDIR)
        self._writer = SummaryWriter(self.logdir)

    def write(self, step: int, scalars: dict[str, float | None]) -> None:
        for name, value in scalars.items():
            if value is not None:
                self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def open_scalars(output_dir: str) -> Scalars | None:
    """The writer, or None (a warning) when it cannot be made: logs never stop training."""
    try:
        return Scalars(output_dir)
    except (ImportError, OSError) as e:
        say(f"warning: no TensorBoard logs in {os.path.join(output_dir, SUBDIR)}: {e}")
        return None

"""TensorBoard scalars of the Keras 3 runtime, without TensorFlow: the chief writes the
step lines' scalars (loss, metrics, samples/s) to `<output>/tensorboard/` every log interval,
as the tf-keras runtime does, through tensorboardX's event file writer (protobuf only;
`keras.callbacks.TensorBoard` needs TensorFlow). Each incarnation adds an event file; a
resumed run goes on from the step it resumed at."""

from __future__ import annotations

import os
import time

from kerasjob_trainer.shared.faults import say

SUBDIR = "tensorboard"


class Scalars:
    """The chief's event file, written in the calling thread: `write(step, scalars)` is on
    disk when it returns (a trainer may end with os._exit at any step; SummaryWriter's own
    queue thread would lose what it still holds)."""

    def __init__(self, output_dir: str) -> None:
        from tensorboardX.event_file_writer import EventsWriter

        self.logdir = os.path.join(output_dir, SUBDIR)
        os.makedirs(self.logdir, exist_ok=True)
        self._writer = EventsWriter(os.path.join(self.logdir, "events"))

    def write(self, step: int, scalars: dict[str, float | None]) -> None:
        from tensorboardX.proto import event_pb2
        from tensorboardX.summary import scalar

        now = time.time()
        for name, value in scalars.items():
            if value is not None:
                summary = scalar(name, float(value))
                self._writer.write_event(event_pb2.Event(wall_time=now, step=step, summary=summary))
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

"""The chief's backup: a TF checkpoint of the model and the optimizer (their variables live
on the ps; the chief reads and writes them), numbered by the global step `fit` had reached
when it was taken, so a restart resumes at exactly that step.

With spec.checkpoint.location the directory is the chief's Pod-local copy of the bucket's
(`shared.bucket_sync`): at start the chief claims its incarnation's generation and pulls
the newest committed step; each backup is committed to the bucket after it is written (in
the background; a stop's at once, before exit 42).

Written whole by `tf.train.CheckpointManager` (the index file last), two kept: a chief
killed mid-write leaves the previous one. The step is the schedule's position (steps `fit`
handed to the workers, every one of them finished: the coordinator is joined first), which
after a lost worker can be below `optimizer.iterations` (see `session`).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from kerasjob_contract import ExitCode
from kerasjob_trainer.shared import bucket_sync, faults
from kerasjob_trainer.shared.bucket_sync import BucketSync
from kerasjob_trainer.shared.faults import say

KEEP = 2
PREFIX = "ckpt"
_NUMBER = re.compile(rf"{PREFIX}-(\d+)$")


#: The chief's CPU: where a backup on the chief's own disk is read and written.
CHIEF_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"


class Backup:
    """The model's and optimizer's state in `directory` (backup_dir). `local`: the directory
    is the chief's own (a Pod-local copy of the bucket's), so every variable is read and
    written through the chief's CPU; by default TensorFlow writes each variable's shard from
    the host that holds it, the ps, into the same path on its own file system (fine on a
    shared volume; on a Pod-local one the ps's save failed, NOT_FOUND `.../ckpt-50_temp`,
    on the real node, 2026-12-07)."""

    def __init__(self, directory: str, model: Any, *, local: bool = False) -> None:
        import tensorflow as tf

        self.directory = directory
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory, max_to_keep=KEEP, checkpoint_name=PREFIX
        )
        device = CHIEF_DEVICE if local else None
        self.options = tf.train.CheckpointOptions(experimental_io_device=device)

    def restore(self) -> int:
        """Restore the latest backup; the step it was taken at (0: none)."""
        latest = self.manager.latest_checkpoint
        if latest is None:
            return 0
        self.checkpoint.restore(latest, options=self.options)
        return step_of(latest)

    def save(self, step: int) -> str:
        return str(self.manager.save(checkpoint_number=step, options=self.options))


def step_of(path: str) -> int:
    match = _NUMBER.search(os.path.basename(path))
    if match is None:
        raise ValueError(f"not a backup of this runtime: {path}")
    return int(match.group(1))


def latest_step(directory: str) -> int:
    """The step of the latest backup in `directory` without TensorFlow's checkpoint reader
    (0: none): the `checkpoint` state file names it."""
    try:
        with open(os.path.join(directory, "checkpoint")) as f:
            first = f.readline()
    except FileNotFoundError:
        return 0
    match = re.search(r'model_checkpoint_path: "([^"]+)"', first)
    return step_of(match.group(1)) if match else 0


def claim_and_pull(bucket: BucketSync) -> None:
    """The chief, before the group forms: this incarnation's generation claimed and the
    newest committed step pulled (a store that fails here answered the start's check:
    exit 1)."""
    began = time.monotonic()
    try:
        committed = bucket.claim()
        size = bucket.pull(committed)
    except Exception as e:
        faults.exit_for(e, ExitCode.FAILURE)
    took = time.monotonic() - began
    say(
        f"{bucket_sync.describe_pull(committed, size, bucket.config)} in {took:.2f}s; "
        f"this incarnation is generation {bucket.generation}"
    )

"""`python -m kerasjob_trainer` (console script `kerasjob-trainer`): the container's process,
dispatched by the job's backend through the runtime registry (`core.main`)."""

from __future__ import annotations

import os
import sys

# Keras 3's fit fails under MultiWorkerMirroredStrategy: every `tf.keras` must be tf_keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from kerasjob_trainer.core.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())

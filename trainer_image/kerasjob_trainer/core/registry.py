"""Which runtime serves a job's spec.trainer.backend: the one place that names them.

Each entry is the module whose `RUNTIME` implements `core.runtime.Runtime`; it is imported
only for the backend asked for, so an image holds only its own framework. A new runtime is
a package under `runtimes/` and one line here.
"""

from __future__ import annotations

import importlib
from typing import cast

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core.runtime import Runtime

RUNTIMES = {
    "tensorflow": "kerasjob_trainer.runtimes.tf_keras.runtime",
    "jax": "kerasjob_trainer.runtimes.keras3.runtime",
}


def runtime_for(backend: str) -> Runtime:
    """The runtime of `backend` (ConfigError for one this trainer does not have)."""
    if backend not in RUNTIMES:
        raise ConfigError(f"backend {backend!r} has no runtime in this trainer")
    return cast(Runtime, importlib.import_module(RUNTIMES[backend]).RUNTIME)

"""Which runtime serves a job: the one place that names them.

The key is the trainer config's `runtime_key`: spec.trainer.backend, with the strategy the
operator sets for a topology that needs its own ("tensorflow/parameterServer": spec.ps).

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
    "tensorflow/parameterServer": "kerasjob_trainer.runtimes.tf_ps.runtime",
}


def runtime_for(key: str) -> Runtime:
    """The runtime of `key` (ConfigError for one this trainer does not have)."""
    if key not in RUNTIMES:
        raise ConfigError(f"backend {key!r} has no runtime in this trainer")
    return cast(Runtime, importlib.import_module(RUNTIMES[key]).RUNTIME)

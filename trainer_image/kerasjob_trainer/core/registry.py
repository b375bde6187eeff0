"""Which runtime serves a job: the one place that names them.

The key is the trainer config's `runtime_key`: spec.trainer.backend, with the strategy the
operator sets for a topology that needs its own ("tensorflow/parameterServer": spec.ps).

Each entry is the module whose `RUNTIME` implements `core.runtime.Runtime`; it is imported
only for the backend asked for, so an image holds only its own framework. A new runtime is
a package under `runtimes/` and one line here. A runtime is checked against the protocol
when it is loaded (`check_runtime`: a TypeError naming what it lacks), and
tests/unit/test_registry.py loads every one.
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

#: What the protocol asks of a runtime: its attributes and its methods.
ATTRIBUTES = tuple(Runtime.__annotations__)
METHODS = tuple(
    name for name, value in vars(Runtime).items() if callable(value) and not name.startswith("_")
)


def runtime_for(key: str) -> Runtime:
    """The runtime of `key` (ConfigError for one this trainer does not have)."""
    if key not in RUNTIMES:
        raise ConfigError(f"backend {key!r} has no runtime in this trainer")
    module = importlib.import_module(RUNTIMES[key])
    return check_runtime(key, getattr(module, "RUNTIME", None), f"{module.__name__}.RUNTIME")


def check_runtime(key: str, runtime: object, where: str) -> Runtime:
    """`runtime`, the one registered as `key` (found at `where`), as a `Runtime`: every
    attribute and method of the protocol present, the methods callable, its backend the
    key's. TypeError naming what is wrong."""
    if runtime is None:
        raise TypeError(f"runtime {key!r}: {where} does not exist")
    missing = [name for name in (*ATTRIBUTES, *METHODS) if not hasattr(runtime, name)]
    missing += [
        name for name in METHODS if name not in missing and not callable(getattr(runtime, name))
    ]
    if missing:
        raise TypeError(
            f"runtime {key!r} ({where}) does not implement core.runtime.Runtime: "
            f"{', '.join(missing)} missing or not callable"
        )
    checked = cast(Runtime, runtime)
    if checked.backend != key.split("/")[0]:
        raise TypeError(f"runtime {key!r} ({where}) has backend {checked.backend!r}")
    return checked

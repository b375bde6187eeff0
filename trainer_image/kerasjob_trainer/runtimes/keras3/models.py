"""The built-in models in Keras 3, and user model functions ("package.module:function").

The same names and layers as the tf-keras built-ins (`shared/models.py`). A user
function for backend jax is called after the distribution is set (DataParallel), with the
trainer config, and returns a *compiled* Keras 3 model, or (model, (x_train, y_train)), or
(model, (x_train, y_train), (x_test, y_test)) with NumPy arrays; a module-level
`dataset(config)` returning (x_train, y_train) or ((x_train, y_train), (x_test, y_test)) is
used otherwise; else the configured dataset source.

With spec.trainer.mesh the model is sharded by a layout made before it is built (Keras lays a
variable out when it makes it): the built-in models' own (`mesh.builtin_layout`), or the
user module's ``layout_map(device_mesh, config)`` returning a `keras.distribution.LayoutMap`
(e.g. a KerasHub backbone's ``get_layout_map(device_mesh)``).
"""

from __future__ import annotations

import inspect
from typing import Any

from kerasjob_contract.trainer_config import BUILTIN_MODELS, ConfigError
from kerasjob_trainer.runtimes.keras3.mesh import Sharding, builtin_layout
from kerasjob_trainer.shared.faults import summary
from kerasjob_trainer.shared.models import builtin_with, call_user_model, load_user_function

Arrays = tuple[Any, Any]


def build_model(
    name: str, config: dict[str, Any], learning_rate: float
) -> tuple[Any, Arrays | None, Arrays | None]:
    """(compiled model, train arrays or None, test arrays or None)."""
    if name in BUILTIN_MODELS:
        return builtin(name, learning_rate), None, None
    model, train, test = call_user_model(name, config, _split)
    if not hasattr(model, "trainable_variables") or type(model).__module__.startswith("tf_keras"):
        raise ConfigError(f"model {name!r} must return a Keras 3 model for backend jax")
    for what, arrays in (("train", train), ("test", test)):
        if arrays is not None and not (isinstance(arrays, tuple) and len(arrays) == 2):
            raise ConfigError(f"model {name!r}: {what} data must be (x, y) NumPy arrays")
    return model, train, test


def _split(result: Any) -> tuple[Arrays, Arrays | None]:
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], tuple):
        return result[0], result[1]
    if isinstance(result, tuple) and len(result) == 2:
        return result, None
    raise ConfigError("a dataset function must return (x, y) or ((x, y), (x_test, y_test))")


def builtin(name: str, learning_rate: float) -> Any:
    """The built-in `name` in Keras 3: the same layers as the tf-keras built-ins."""
    import keras

    return builtin_with(keras, name, learning_rate)


def layout_for(name: str, sharding: Sharding, config: dict[str, Any]) -> Any:
    """The LayoutMap that shards model `name` over the job's mesh (ConfigError: none, or the
    module's layout_map cannot lay the model out over this mesh)."""
    if name in BUILTIN_MODELS:
        return builtin_layout(name, sharding.mesh, sharding.device_mesh)
    module = name.partition(":")[0]
    hook = f"{module}:layout_map"
    try:
        layout_map = load_user_function(hook)
    except ConfigError:
        raise ConfigError(
            f"model {name!r}: with trainer.mesh its module must define "
            "layout_map(device_mesh, config) returning a keras.distribution.LayoutMap"
        ) from None
    try:
        return _call_layout(layout_map, sharding.device_mesh, config)
    except ConfigError:
        raise
    except Exception as e:
        # A layout names the mesh axes it shards on; one this mesh lacks fails in Keras
        # (LayoutMap: "Invalid axis names") or in the layout function itself (KerasHub's
        # get_layout_map: AttributeError). The same every time: retrying cannot help.
        axes = ", ".join(repr(a.name) for a in sharding.mesh.axes)
        raise ConfigError(
            f"mesh {sharding.mesh.describe()}: {hook} cannot lay the model out over the axes "
            f"{axes}: {type(e).__name__}: {summary(e)} (a layout names the axes it shards on; "
            "a KerasHub backbone's get_layout_map: 'batch' and 'model')"
        ) from None


def _call_layout(fn: Any, device_mesh: Any, config: dict[str, Any]) -> Any:
    """layout_map(device_mesh, config), or layout_map(device_mesh)."""
    if len(inspect.signature(fn).parameters) >= 2:
        return fn(device_mesh, config)
    return fn(device_mesh)

"""Built-in models (written once for both Keras generations) and user code
("package.module:function"), shared by the runtimes (`runtimes/*/models.py`).

The tf-keras runtime's user code contract (see trainer_image/README.md):

    def build(config: dict) -> Model | (Model, Dataset) | (Model, Dataset, Dataset)

`build` is called inside `strategy.scope()` with the trainer config (camelCase JSON as the
operator passed it) and must return a *compiled* tf_keras model. It may also return an
unbatched training `tf.data.Dataset` of (x, y) (and an unbatched test dataset); otherwise,
if the module has a function `dataset(config) -> train | (train, test)`, that is used;
otherwise the configured dataset source is. A zero-argument `build()` is accepted too.
The trainer batches, shuffles (seeded), repeats and shards whatever dataset it gets.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from kerasjob_contract.trainer_config import ConfigError


def load_user_function(spec: str) -> Callable[..., Any]:
    """Import 'package.module:function'. Raises ConfigError: a missing module is permanent."""
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"model {spec!r}: cannot import {module_name!r}: {e}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"model {spec!r}: {module_name} has no function {func_name!r}")
    return func


def call_with_config(func: Callable[..., Any], config: dict[str, Any]) -> Any:
    try:
        takes_args = bool(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        takes_args = True
    return func(config) if takes_args else func()


def call_user_model(
    name: str, config: dict[str, Any], split: Callable[[Any], tuple[Any, Any]]
) -> tuple[Any, Any | None, Any | None]:
    """(model, train, test) from user code `name`: what its function returned, or the model
    and what the module's `dataset(config)` returned, cut into (train, test) by the
    runtime's `split` (its data types differ). The model must be compiled."""
    result = call_with_config(load_user_function(name), config)
    train = test = None
    if isinstance(result, tuple):
        if len(result) not in (2, 3):
            raise ConfigError(
                f"model {name!r} must return model, (model, train) or (model, train, test)"
            )
        model, train, test = (*result, None)[:3]
    else:
        model = result
        dataset_fn = getattr(importlib.import_module(name.partition(":")[0]), "dataset", None)
        if callable(dataset_fn):
            train, test = split(call_with_config(dataset_fn, config))
    if getattr(model, "optimizer", None) is None:
        raise ConfigError(f"model {name!r} returned a model that is not compiled")
    return model, train, test


def builtin_with(keras: Any, name: str, learning_rate: float) -> Any:
    """A compiled built-in model, written once for both Keras generations: `keras` is the
    tf_keras module (backend tensorflow) or Keras 3's `keras` (backend jax); their Sequential,
    layers, Adam and loss have the same API."""
    layers = keras.layers
    if name == "mnist-mlp":
        model = keras.Sequential(
            [
                keras.Input(shape=(784,)),
                layers.Dense(256, activation="relu"),
                layers.Dense(256, activation="relu"),
                layers.Dense(10),
            ],
            name="mnist_mlp",
        )
    elif name == "mnist-cnn":
        model = keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                layers.Conv2D(16, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Conv2D(32, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Flatten(),
                layers.Dense(64, activation="relu"),
                layers.Dense(10),
            ],
            name="mnist_cnn",
        )
    elif name == "cifar10-cnn":
        model = keras.Sequential(
            [
                keras.Input(shape=(32, 32, 3)),
                layers.Conv2D(32, 3, padding="same", activation="relu"),
                layers.Conv2D(32, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Conv2D(64, 3, padding="same", activation="relu"),
                layers.Conv2D(64, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Flatten(),
                layers.Dense(128, activation="relu"),
                layers.Dense(10),
            ],
            name="cifar10_cnn",
        )
    else:  # parse_config rejects other names first
        raise ConfigError(f"unknown model {name!r}")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model

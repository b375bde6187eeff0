"""The tf-keras runtime's models: the built-ins in tf_keras and user code's result
(`shared/models.py` has the contract)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kerasjob_contract.trainer_config import BUILTIN_MODELS, ConfigError
from kerasjob_trainer.shared.models import builtin_with, call_user_model


@dataclasses.dataclass
class BuiltModel:
    model: Any  # tf_keras.Model
    train_dataset: Any | None = None  # unbatched tf.data.Dataset of (x, y), user code only
    test_dataset: Any | None = None


def _split_datasets(result: Any) -> tuple[Any, Any | None]:
    if isinstance(result, tuple):
        if len(result) != 2:
            raise ConfigError("a dataset function must return train or (train, test)")
        return result[0], result[1]
    return result, None


def build_model(name: str, config: dict[str, Any], learning_rate: float) -> BuiltModel:
    """Call inside strategy.scope(): variables must be created there."""
    if name in BUILTIN_MODELS:
        return BuiltModel(model=_builtin(name, learning_rate))
    return BuiltModel(*call_user_model(name, config, _split_datasets))


def _builtin(name: str, learning_rate: float) -> Any:
    import tf_keras

    return builtin_with(tf_keras, name, learning_rate)

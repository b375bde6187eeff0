"""A Keras 3 / JAX trainer process's context: the shared flags, config and places
(`kerasjob_trainer.context`) with this runtime's identity (`identity`) instead of TF_CONFIG.
Pure: checked before JAX starts (ConfigError: exit 78)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import kerasjob_contract as contract
from kerasjob_contract.trainer_config import ConfigError, TrainerConfig, parse_config
from kerasjob_trainer.config import validate_dataset_files
from kerasjob_trainer.context import check_user_model, config_text, parser, places, raw_config
from kerasjob_trainer.keras3.identity import Identity, parse_identity


@dataclasses.dataclass(frozen=True)
class Context:
    config: TrainerConfig
    raw_config: dict[str, Any]
    identity: Identity
    checkpoint_dir: str
    output_dir: str
    metrics_port: int | None

    @property
    def backup_dir(self) -> str:
        return os.path.join(self.checkpoint_dir, contract.BACKUP_SUBDIR)


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> Context:
    args = parser().parse_args(argv)
    env = os.environ
    env.setdefault("KERAS_BACKEND", "jax")  # before any user module imports Keras
    text = config_text(args, env)
    config = parse_config(text)
    if env.get("KERAS_BACKEND", "jax") != "jax":
        raise ConfigError(
            f"KERAS_BACKEND is {env['KERAS_BACKEND']!r}; the Keras 3 trainer runs the jax backend"
        )
    identity = parse_identity(env)
    checkpoint_dir, output_dir, port = places(args, env)
    if config.command:
        check_model = False
    else:
        validate_dataset_files(config.dataset)
        if config.dataset.source == "tfrecord":
            raise ConfigError(
                "dataset format tfrecord needs TensorFlow: use backend "
                "tensorflow, or an npz file, for backend jax"
            )
    if check_model:
        check_user_model(config)
    return Context(
        config=config,
        raw_config=raw_config(text),
        identity=identity,
        checkpoint_dir=checkpoint_dir,
        output_dir=output_dir,
        metrics_port=port,
    )

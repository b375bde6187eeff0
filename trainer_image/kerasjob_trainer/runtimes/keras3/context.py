"""A Keras 3 / JAX trainer process's context: the core's (flags, config, places) with this
runtime's identity (`identity`) instead of TF_CONFIG. Pure: checked before JAX starts
(ConfigError: exit 78)."""

from __future__ import annotations

import argparse
import os

from kerasjob_contract.trainer_config import ConfigError, TrainerConfig
from kerasjob_trainer.core import context
from kerasjob_trainer.runtimes.keras3.identity import Identity, parse_identity

#: The Keras 3 runtime's context: `ctx.identity` is the process's `Identity`.
Context = context.Context[Identity]


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> Context:
    return context.build_context(argv, _identity, check_model=check_model, check=_no_tfrecord)


def _identity(args: argparse.Namespace) -> Identity:
    env = os.environ
    env.setdefault("KERAS_BACKEND", "jax")  # before any user module imports Keras
    if env.get("KERAS_BACKEND", "jax") != "jax":
        raise ConfigError(
            f"KERAS_BACKEND is {env['KERAS_BACKEND']!r}; the Keras 3 trainer runs the jax backend"
        )
    return parse_identity(env)


def _no_tfrecord(config: TrainerConfig) -> None:
    if config.dataset.source == "tfrecord":
        raise ConfigError(
            "dataset format tfrecord needs TensorFlow: use backend "
            "tensorflow, or an npz file, for backend jax"
        )

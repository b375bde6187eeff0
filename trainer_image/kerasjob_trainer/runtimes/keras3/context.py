"""A Keras 3 / JAX trainer process's context: the core's (flags, config, places) with this
runtime's identity (`identity`) instead of TF_CONFIG. Checked before JAX starts
(ConfigError: exit 78), the job's bucket too when its backups are kept in one (`bucket`:
gs:// only, answering, the bucket there)."""

from __future__ import annotations

import argparse
import os

from kerasjob_contract.trainer_config import ConfigError, TrainerConfig
from kerasjob_trainer.core import context
from kerasjob_trainer.runtimes.keras3 import bucket
from kerasjob_trainer.runtimes.keras3.identity import Identity, parse_identity

#: The Keras 3 runtime's context: `ctx.identity` is the process's `Identity`.
Context = context.Context[Identity]


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> Context:
    ctx = context.build_context(argv, _identity, check_model=check_model, check=_no_tfrecord)
    config = bucket.config_from(os.environ)
    if config is not None:  # backups in a bucket: it must answer before anything trains
        bucket.check_start(config)
        bucket.orbax_env(config, os.environ)
    return ctx


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

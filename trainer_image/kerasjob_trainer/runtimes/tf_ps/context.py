"""A parameter-server process's context: the core's (flags, config, places) with the parsed
TF_CONFIG (`PsCluster`) as its identity; checked before TensorFlow starts."""

from __future__ import annotations

import argparse
import os

from kerasjob_contract import Env
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import context
from kerasjob_trainer.runtimes.tf_ps.cluster import PsCluster, parse_ps_tf_config

PsContext = context.Context[PsCluster]


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> PsContext:
    """The context with TF_CONFIG (--tf-config, else the environment) as a `PsCluster`."""

    def identity(args: argparse.Namespace) -> PsCluster:
        refuse_a_bucket(os.environ.get(Env.CHECKPOINT_LOCATION.value))
        flag = args.tf_config
        return parse_ps_tf_config(flag if flag is not None else os.environ.get(Env.TF_CONFIG.value))

    return context.build_context(argv, identity, check_model=check_model)


def refuse_a_bucket(location: str | None) -> None:
    """Parameter servers keep the ps's stop requests, the chief's answer and its "done" on
    the shared volume; until they have a home in a bucket too, a job with
    spec.checkpoint.location is refused at once (exit 78, this reason in its condition)."""
    if location:
        raise ConfigError(
            f"spec.checkpoint.location ({location}): parameter-server jobs keep their "
            "checkpoints on a volume only (spec.checkpoint.volume) in this version"
        )

"""A tf-keras trainer process's context: the core's (flags, config, places) with TF_CONFIG's
`ClusterInfo` as its identity. Checked before TensorFlow starts (ConfigError: exit 78), the
job's bucket too when its backups are kept in one (one listing)."""

from __future__ import annotations

import argparse
import os

from kerasjob_contract import Env
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import context
from kerasjob_trainer.runtimes.tf_keras.cluster import ClusterInfo, parse_tf_config
from kerasjob_trainer.shared.bucket_sync import BucketConfig, check

#: The tf-keras runtime's context: `ctx.identity` is the parsed TF_CONFIG.
RunContext = context.Context[ClusterInfo]


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> RunContext:
    ctx = context.build_context(argv, _cluster, check_model=check_model)
    bucket = BucketConfig.from_env(os.environ)
    if bucket is not None:  # backups in a bucket: it must answer before anything trains
        if ctx.identity.is_evaluator:
            raise ConfigError(
                "the sidecar evaluator reads the chief's backups and final model from a "
                f"shared volume; with backups in {bucket.location} it would see neither: "
                "remove spec.evaluator or use spec.checkpoint.volume"
            )
        check(bucket)
    return ctx


def _cluster(args: argparse.Namespace) -> ClusterInfo:
    """--tf-config, else TF_CONFIG."""
    text = args.tf_config if args.tf_config is not None else os.environ.get(Env.TF_CONFIG.value)
    return parse_tf_config(text)

"""A parameter-server process's context: the core's (flags, config, places) with the parsed
TF_CONFIG (`PsCluster`) as its identity; checked before TensorFlow starts."""

from __future__ import annotations

import argparse
import os

from kerasjob_contract import Env
from kerasjob_trainer.core import context
from kerasjob_trainer.runtimes.tf_ps.cluster import PsCluster, parse_ps_tf_config
from kerasjob_trainer.shared.bucket_sync import BucketConfig, check

PsContext = context.Context[PsCluster]


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> PsContext:
    """The context with TF_CONFIG (--tf-config, else the environment) as a `PsCluster`."""

    def identity(args: argparse.Namespace) -> PsCluster:
        flag = args.tf_config
        return parse_ps_tf_config(flag if flag is not None else os.environ.get(Env.TF_CONFIG.value))

    ctx = context.build_context(argv, identity, check_model=check_model)
    bucket = BucketConfig.from_env(os.environ)
    if bucket is not None:  # backups and notes in a bucket: it must answer before training
        check(bucket)
    return ctx

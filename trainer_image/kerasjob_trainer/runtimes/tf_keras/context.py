"""A tf-keras trainer process's context: the core's (flags, config, places) with TF_CONFIG's
`ClusterInfo` as its identity. Pure: checked before TensorFlow starts (ConfigError: exit 78)."""

from __future__ import annotations

import argparse
import os

from kerasjob_contract import Env
from kerasjob_trainer.core import context
from kerasjob_trainer.runtimes.tf_keras.cluster import ClusterInfo, parse_tf_config

#: The tf-keras runtime's context: `ctx.identity` is the parsed TF_CONFIG.
RunContext = context.Context[ClusterInfo]


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> RunContext:
    return context.build_context(argv, _cluster, check_model=check_model)


def _cluster(args: argparse.Namespace) -> ClusterInfo:
    """--tf-config, else TF_CONFIG."""
    text = args.tf_config if args.tf_config is not None else os.environ.get(Env.TF_CONFIG.value)
    return parse_tf_config(text)

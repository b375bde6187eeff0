"""`python -m kerasjob_trainer.keras3`: the bundled Keras 3 trainer process (the supervisor's
child). Configuration from the environment (contract.Env, KERAS_DISTRIBUTION_*) or flags,
checked before JAX starts: a bad configuration exits 78 with one line on stderr."""

from __future__ import annotations

import json
import os
import sys

from kerasjob_contract import DEFAULT_OUTPUT_SUBDIR, Env, ExitCode
from kerasjob_contract.trainer_config import BUILTIN_MODELS, ConfigError, parse_config
from kerasjob_trainer.keras3.identity import parse_identity
from kerasjob_trainer.keras3.session import Context


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> Context:
    from kerasjob_trainer.__main__ import DEFAULT_CHECKPOINT_DIR, _parser, _port
    from kerasjob_trainer.config import validate_dataset_files

    args = _parser().parse_args(argv)
    env = os.environ
    env.setdefault("KERAS_BACKEND", "jax")  # before any user module imports Keras
    config_text = args.config if args.config is not None else env.get(Env.TRAINER_CONFIG.value)
    config = parse_config(config_text)
    raw = json.loads(config_text) if config_text and config_text.strip() else {}
    if env.get("KERAS_BACKEND", "jax") != "jax":
        raise ConfigError(f"KERAS_BACKEND is {env['KERAS_BACKEND']!r}; the Keras 3 trainer "
                          "runs the jax backend")
    identity = parse_identity(env)
    checkpoint_dir = (args.checkpoint_dir or env.get(Env.CHECKPOINT_DIR.value)
                      or DEFAULT_CHECKPOINT_DIR)
    output_dir = (args.output_dir or env.get(Env.OUTPUT_DIR.value)
                  or os.path.join(checkpoint_dir, DEFAULT_OUTPUT_SUBDIR))
    port = _port(args.metrics_port if args.metrics_port is not None
                 else env.get(Env.METRICS_PORT.value))
    if config.command:
        check_model = False
    else:
        validate_dataset_files(config.dataset)
        if config.dataset.source == "tfrecord":
            raise ConfigError("dataset format tfrecord needs TensorFlow: use backend "
                              "tensorflow, or an npz file, for backend jax")
    if check_model and config.model not in BUILTIN_MODELS:
        from kerasjob_trainer.models import load_user_function

        load_user_function(config.model)
    return Context(config=config, raw_config=raw, identity=identity,
                   checkpoint_dir=os.path.abspath(checkpoint_dir),
                   output_dir=os.path.abspath(output_dir), metrics_port=port)


def main(argv: list[str] | None = None) -> int:
    from kerasjob_trainer.keras3 import session, train

    session.install_early_sigterm_handler()
    try:
        ctx = build_context(argv)
        return train.run(ctx)
    except ConfigError as e:
        print(f"kerasjob: invalid configuration: {e}", file=sys.stderr, flush=True)
        return int(ExitCode.INVALID_CONFIG)


if __name__ == "__main__":
    sys.exit(main())

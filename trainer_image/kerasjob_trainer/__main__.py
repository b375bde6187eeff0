"""`python -m kerasjob_trainer`: configuration from the environment (contract.Env) or flags.

Everything that can be wrong with the configuration is checked here, before TensorFlow
starts and before the backup directory is touched; a bad configuration exits 78 with one
line on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys

# Keras 3's fit fails under MultiWorkerMirroredStrategy: every `tf.keras` must be tf_keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from kerasjob_contract import DEFAULT_OUTPUT_SUBDIR, Env, ExitCode
from kerasjob_contract.trainer_config import BUILTIN_MODELS, ConfigError, parse_config
from kerasjob_trainer.cluster import parse_tf_config
from kerasjob_trainer.config import validate_dataset_files
from kerasjob_trainer.train import RunContext  # cheap: TensorFlow loads inside train.run()

DEFAULT_CHECKPOINT_DIR = "kerasjob-checkpoints"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kerasjob-trainer",
        description="MultiWorkerMirroredStrategy training that survives preemption. "
        "Flags override the KERASJOB_* / TF_CONFIG environment variables.",
    )
    p.add_argument("--config", help=f"trainer config JSON (default: ${Env.TRAINER_CONFIG.value})")
    p.add_argument("--tf-config", help="TF_CONFIG JSON (default: $TF_CONFIG)")
    p.add_argument("--checkpoint-dir",
                   help=f"shared checkpoint dir (default: ${Env.CHECKPOINT_DIR.value} or "
                   f"./{DEFAULT_CHECKPOINT_DIR})")
    p.add_argument("--output-dir",
                   help=f"model/logs/progress dir (default: ${Env.OUTPUT_DIR.value} or "
                   "<checkpoint-dir>/output)")
    p.add_argument("--metrics-port", help=f"serve /metrics here; 0 = off "
                   f"(default: ${Env.METRICS_PORT.value} or off)")
    return p


def _port(text: str | None) -> int | None:
    if text is None or text.strip() in ("", "0"):
        return None
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"metrics port must be 0..65535, got {text!r}")
    return int(text)


def build_context(argv: list[str] | None = None, *, check_model: bool = True) -> RunContext:
    args = _parser().parse_args(argv)
    env = os.environ
    config_text = args.config if args.config is not None else env.get(Env.TRAINER_CONFIG.value)
    config = parse_config(config_text)
    raw = json.loads(config_text) if config_text and config_text.strip() else {}
    cluster = parse_tf_config(
        args.tf_config if args.tf_config is not None else env.get(Env.TF_CONFIG.value)
    )
    checkpoint_dir = (args.checkpoint_dir or env.get(Env.CHECKPOINT_DIR.value)
                      or DEFAULT_CHECKPOINT_DIR)
    output_dir = (args.output_dir or env.get(Env.OUTPUT_DIR.value)
                  or os.path.join(checkpoint_dir, DEFAULT_OUTPUT_SUBDIR))
    port = _port(args.metrics_port if args.metrics_port is not None
                 else env.get(Env.METRICS_PORT.value))
    if config.command:  # the user's program reads its own data and builds its own model
        check_model = False
    else:
        validate_dataset_files(config.dataset)
    if check_model and config.model not in BUILTIN_MODELS:
        from kerasjob_trainer.models import load_user_function

        load_user_function(config.model)  # a missing module is a config error, not a crash
    return RunContext(config=config, raw_config=raw, cluster=cluster,
                      checkpoint_dir=os.path.abspath(checkpoint_dir),
                      output_dir=os.path.abspath(output_dir), metrics_port=port)


def check_command(command: tuple[str, ...]) -> None:
    """The user's program exists (ConfigError, exit 78, when it cannot run)."""
    program = command[0]
    if not (shutil.which(program) or (os.path.sep in program and os.access(program, os.X_OK))):
        raise ConfigError(f"command {program!r} is not an executable in the image")
    for arg in command[1:]:
        if arg.endswith(".py") and arg.startswith("/") and not os.path.isfile(arg):
            raise ConfigError(f"command: script {arg!r} does not exist (is its volume mounted?)")


def exec_command(command: tuple[str, ...]) -> None:
    """Replace this process with the user's program (spec.trainer.command): same PID, same
    environment (TF_CONFIG, KERASJOB_*), its exit code is the Pod's."""
    check_command(command)
    program = command[0]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(program, list(command))


def backend_of(argv: list[str] | None) -> str:
    """spec.trainer.backend from the config (flag or environment); checked in full later."""
    args, _ = _parser().parse_known_args(argv)
    text = args.config if args.config is not None else os.environ.get(Env.TRAINER_CONFIG.value)
    return parse_config(text).backend


def run_keras3(argv: list[str] | None) -> int:
    """backend jax: check everything here (exit 78 before JAX starts), then supervise the
    Keras 3 trainer, or the user's command, as a child (`kerasjob_trainer.keras3.supervisor`)."""
    from kerasjob_trainer.keras3 import supervisor
    from kerasjob_trainer.keras3.__main__ import build_context as keras3_context

    ctx = keras3_context(argv, check_model=False)  # the child imports the user module
    if ctx.config.command:
        check_command(ctx.config.command)
    return supervisor.main(list(argv or []), ctx.config.command)


def main(argv: list[str] | None = None) -> int:
    from kerasjob_trainer import session, train

    session.install_early_sigterm_handler()
    try:
        if backend_of(argv) == "jax":
            return run_keras3(argv if argv is not None else sys.argv[1:])
        if importlib.util.find_spec("tensorflow") is None:
            raise ConfigError("backend tensorflow, but this image has no TensorFlow (the Keras "
                              "3 image?): set spec.trainer.backend: jax, or use the tf-keras "
                              "trainer image")
        ctx = build_context(argv)
        if ctx.config.command:
            exec_command(ctx.config.command)
        if ctx.cluster.is_evaluator:
            from kerasjob_trainer import evaluator

            return evaluator.run(ctx)
        return train.run(ctx)
    except ConfigError as e:
        print(f"kerasjob: invalid configuration: {e}", file=sys.stderr, flush=True)
        return int(ExitCode.INVALID_CONFIG)


if __name__ == "__main__":
    sys.exit(main())

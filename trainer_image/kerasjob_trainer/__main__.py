"""`python -m kerasjob_trainer`: configuration from the environment (contract.Env) or flags.

Everything that can be wrong with the configuration is checked here, before TensorFlow
starts and before the backup directory is touched; a bad configuration exits 78 with one
line on stderr.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Keras 3's fit fails under MultiWorkerMirroredStrategy: every `tf.keras` must be tf_keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.context import backend_of, build_context, check_command


def exec_command(command: tuple[str, ...]) -> None:
    """Replace this process with the user's program (spec.trainer.command): same PID, same
    environment (TF_CONFIG, KERASJOB_*), its exit code is the Pod's."""
    check_command(command)
    program = command[0]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(program, list(command))


def run_keras3(argv: list[str] | None) -> int:
    """backend jax: check everything here (exit 78 before JAX starts), then supervise the
    Keras 3 trainer, or the user's command, as a child (`kerasjob_trainer.keras3.supervisor`)."""
    from kerasjob_trainer.keras3 import supervisor
    from kerasjob_trainer.keras3.context import build_context as keras3_context

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
            raise ConfigError(
                "backend tensorflow, but this image has no TensorFlow (the Keras "
                "3 image?): set spec.trainer.backend: jax, or use the tf-keras "
                "trainer image"
            )
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

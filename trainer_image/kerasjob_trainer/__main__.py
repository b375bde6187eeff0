"""`python -m kerasjob_trainer`: configuration from the environment (contract.Env) or flags.

The container's process is a supervisor (`kerasjob_trainer.supervisor`): it checks the
configuration, before TensorFlow starts and before the backup directory is touched (a bad
one exits 78 with one line on stderr), then runs the trainer (this module again, with
KERASJOB_INCARNATION set) or the user's command as its child, again in place after a
disruption.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Keras 3's fit fails under MultiWorkerMirroredStrategy: every `tf.keras` must be tf_keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from kerasjob_contract import Env, ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.context import backend_of, build_context, check_command


def supervise_tf(argv: list[str] | None) -> int:
    """backend tensorflow, the container's process: check the configuration here (exit 78
    before TensorFlow starts), then supervise the trainer, or the user's command, as a child
    that restarts in place after a disruption (`kerasjob_trainer.supervisor`)."""
    from kerasjob_trainer import supervisor

    if importlib.util.find_spec("tensorflow") is None:
        raise ConfigError(
            "backend tensorflow, but this image has no TensorFlow (the Keras "
            "3 image?): set spec.trainer.backend: jax, or use the tf-keras "
            "trainer image"
        )
    ctx = build_context(argv, check_model=False)  # the child imports the user module
    if ctx.config.command:
        check_command(ctx.config.command)
    args = list(argv if argv is not None else sys.argv[1:])
    child = list(ctx.config.command) or [sys.executable, "-m", "kerasjob_trainer", *args]
    return supervisor.supervise(child, checkpoint_dir=ctx.checkpoint_dir)


def run_keras3(argv: list[str] | None) -> int:
    """backend jax: check everything here (exit 78 before JAX starts), then supervise the
    Keras 3 trainer, or the user's command, as a child (`kerasjob_trainer.keras3.supervisor`)."""
    from kerasjob_trainer.keras3 import supervisor
    from kerasjob_trainer.keras3.context import build_context as keras3_context

    ctx = keras3_context(argv, check_model=False)  # the child imports the user module
    if ctx.config.command:
        check_command(ctx.config.command)
    return supervisor.main(list(argv or []), ctx.config.command)


def train_tf(argv: list[str] | None) -> int:
    """backend tensorflow, the supervised child: the bundled trainer or the evaluator."""
    from kerasjob_trainer import session, train

    session.install_early_sigterm_handler()
    ctx = build_context(argv)
    if ctx.cluster.is_evaluator:
        from kerasjob_trainer import evaluator

        return evaluator.run(ctx)
    return train.run(ctx)


def main(argv: list[str] | None = None) -> int:
    try:
        if backend_of(argv) == "jax":
            return run_keras3(argv if argv is not None else sys.argv[1:])
        if Env.INCARNATION.value in os.environ:  # started by the supervisor
            return train_tf(argv)
        return supervise_tf(argv)
    except ConfigError as e:
        print(f"kerasjob: invalid configuration: {e}", file=sys.stderr, flush=True)
        return int(ExitCode.INVALID_CONFIG)
    except ValueError as e:  # KERASJOB_IN_PLACE_RESTARTS
        print(f"kerasjob: invalid configuration: {e}", file=sys.stderr, flush=True)
        return int(ExitCode.INVALID_CONFIG)


if __name__ == "__main__":
    sys.exit(main())

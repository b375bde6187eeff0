"""`python -m kerasjob_trainer`: the container's process, for every backend.

Without KERASJOB_INCARNATION it is the supervisor (`supervisor`): it checks the image and the
configuration before any framework starts and before the backup directory is touched (a bad
one exits 78 with one line on stderr, `kerasjob: invalid configuration: <reason>`, also left
in the termination message for the operator), then runs the trainer (this module again, with
KERASJOB_INCARNATION set) or the user's command as its child, again in place after a
disruption. With it, it is that child: the runtime of the job's backend (`registry`) trains.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from kerasjob_contract import Env, ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import registry, supervisor
from kerasjob_trainer.core.context import check_command, runtime_key_of
from kerasjob_trainer.core.runtime import Runtime
from kerasjob_trainer.core.signals import guard_sigterm
from kerasjob_trainer.shared import faults
from kerasjob_trainer.shared.metrics import leave_invalid_config


def supervise(runtime: Runtime, argv: Sequence[str] | None) -> int:
    """The container's process: everything checked here, then the trainer (or the user's
    command) supervised as a child that restarts in place after a disruption."""
    runtime.check_image()
    ctx = runtime.context(argv, check_model=False)  # the child imports the user module
    if ctx.config.command:
        check_command(ctx.config.command)
    args = list(argv if argv is not None else sys.argv[1:])
    child = list(ctx.config.command) or [sys.executable, "-m", "kerasjob_trainer", *args]
    return supervisor.supervise(
        child,
        checkpoint_dir=ctx.checkpoint_dir,
        translate=lambda code, seen: runtime.exit_code(code, seen, ctx),
        watch=runtime.watch,
    )


def train(runtime: Runtime, argv: Sequence[str] | None) -> int:
    """The supervised child: SIGTERM guarded first, then the runtime's bundled trainer."""
    guard_sigterm(runtime.on_sigterm)
    return runtime.train(runtime.context(argv))


def main(argv: list[str] | None = None) -> int:
    child = Env.INCARNATION.value in os.environ  # started by the supervisor
    try:
        runtime = registry.runtime_for(runtime_key_of(argv))
        if child:
            return train(runtime, argv)
        return supervise(runtime, argv)
    except (ConfigError, ValueError) as e:  # ValueError: KERASJOB_IN_PLACE_RESTARTS
        faults.say_invalid(str(e))
        if not child:  # else the supervisor leaves the line it heard
            leave_invalid_config(str(e))
        return int(ExitCode.INVALID_CONFIG)

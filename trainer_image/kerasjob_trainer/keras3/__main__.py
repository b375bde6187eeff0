"""`python -m kerasjob_trainer.keras3`: the bundled Keras 3 trainer process (the supervisor's
child). Configuration from the environment (contract.Env, KERAS_DISTRIBUTION_*) or flags,
checked before JAX starts: a bad configuration exits 78 with one line on stderr."""

from __future__ import annotations

import sys

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.keras3.context import build_context


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

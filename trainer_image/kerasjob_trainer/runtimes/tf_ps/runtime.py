"""The parameter-server runtime's `Runtime`: the chief trains (`train`, on `session`); a ps
or worker task serves (`server`). Importing this module imports no TensorFlow."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kerasjob_trainer.core.context import Context
from kerasjob_trainer.runtimes.tf_keras.runtime import TfKeras
from kerasjob_trainer.runtimes.tf_ps import stop
from kerasjob_trainer.runtimes.tf_ps.context import build_context


class ParameterServers(TfKeras):
    """The tf-keras runtime's image check, watch and exit codes; its own identity (ps tasks),
    SIGTERM (a save at the next step boundary) and roles (the chief trains, ps and
    workers serve)."""

    def context(self, argv: Sequence[str] | None, *, check_model: bool = True) -> Context[Any]:
        return build_context(None if argv is None else [*argv], check_model=check_model)

    on_sigterm = staticmethod(stop.requested_by_signal)

    def train(self, ctx: Context[Any]) -> int:
        """The chief trains; a ps or a worker serves the chief's coordinator."""
        from kerasjob_trainer.runtimes.tf_ps import server, train

        return (train.run if ctx.identity.is_chief else server.serve)(ctx)


RUNTIME = ParameterServers()

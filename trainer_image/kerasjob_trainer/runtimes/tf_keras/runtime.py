"""The tf-keras runtime (backend tensorflow): tf_keras under MultiWorkerMirroredStrategy,
identity from TF_CONFIG, backups by BackupAndRestore, save on SIGTERM through TensorFlow's
PreemptionCheckpointHandler (`preemption`). Importing this module imports no TensorFlow."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core.context import Context
from kerasjob_trainer.core.supervisor import contract_code
from kerasjob_trainer.runtimes.tf_keras import preemption
from kerasjob_trainer.runtimes.tf_keras.context import RunContext, build_context


class TfKeras:
    backend = "tensorflow"
    watch: Mapping[str, re.Pattern[bytes]] = {}

    def check_image(self) -> None:
        if importlib.util.find_spec("tensorflow") is None:
            raise ConfigError(
                "backend tensorflow, but this image has no TensorFlow (the Keras "
                "3 image?): set spec.trainer.backend: jax, or use the tf-keras "
                "trainer image"
            )

    def context(self, argv: Sequence[str] | None, *, check_model: bool = True) -> RunContext:
        return build_context(list(argv) if argv is not None else None, check_model=check_model)

    def on_sigterm(self) -> None:
        preemption.sigterm_without_save()

    def train(self, ctx: Context[Any]) -> int:
        """The bundled trainer, or the sidecar evaluator."""
        if ctx.identity.is_evaluator:
            from kerasjob_trainer.runtimes.tf_keras import evaluator

            return evaluator.run(ctx)
        from kerasjob_trainer.runtimes.tf_keras import train

        return train.run(ctx)

    def exit_code(self, returncode: int, seen: frozenset[str], ctx: Context[Any]) -> int:
        return contract_code(returncode, seen)


RUNTIME = TfKeras()

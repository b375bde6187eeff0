"""What a runtime is to the core: the `Runtime` protocol (one object per framework, named in
`registry`) and the `Identity` every runtime's context carries.

A runtime owns only what differs between frameworks: who a process is (its identity
variables), what the image must hold, how the group forms and trains (its `train`), what a
SIGTERM after the first step does before the framework's own save takes over, and what the
trainer's exit status means. The lifecycle around it (the supervisor, in-place restarts,
incarnation logs, exit codes, progress, goodput, the final save) is the core's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kerasjob_trainer.core.context import Context


class Identity(Protocol):
    """Who a trainer process is, whatever variables its runtime reads it from."""

    @property
    def is_chief(self) -> bool: ...  # writes the model, progress and the backup's header

    @property
    def index(self) -> int: ...

    @property
    def workers(self) -> int:
        """The processes that train, at least 1: the group of a collective strategy (chief
        included), a parameter-server job's worker tasks (not its chief or ps)."""

    @property
    def multi_process(self) -> bool: ...  # a group of more than one process

    @property
    def name(self) -> str: ...  # the goodput and audit files' name, e.g. worker1


class Runtime(Protocol):
    """One framework's way to train (see the module docstring). Importing the module that
    defines it must stay cheap: the supervisor imports it, and no framework."""

    #: spec.trainer.backend
    backend: str
    #: Patterns of the trainer's output the supervisor watches for (name -> bytes pattern).
    watch: Mapping[str, re.Pattern[bytes]]

    def check_image(self) -> None:
        """Raise ConfigError when this image cannot run the runtime (its framework absent)."""

    def context(self, argv: Sequence[str] | None, *, check_model: bool = True) -> Context[Any]:
        """The process's context and identity, checked before the framework starts."""

    def on_sigterm(self) -> None:
        """SIGTERM after the first step, before the framework's own save-on-SIGTERM."""

    def train(self, ctx: Context[Any]) -> int:
        """The supervised child: form the group and run the bundled trainer; its exit code."""

    def exit_code(self, returncode: int, seen: frozenset[str], ctx: Context[Any]) -> int:
        """The contract's exit code for the trainer's exit status (negative: a signal) and
        the `watch` patterns it printed."""

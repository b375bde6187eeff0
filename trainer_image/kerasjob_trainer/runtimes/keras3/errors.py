"""What an error of a Keras 3 / JAX process group means: a lost peer (43) or a program error (1)."""

from __future__ import annotations

from kerasjob_contract import ExitCode
from kerasjob_trainer.shared.faults import mentions

#: Errors of a multi-process step that mean "the group broke" (gloo, the coordination service).
#: The message, not the type, tells: JAX raises them as JaxRuntimeError or ValueError.
_PEER_HINTS = (
    "gloo", "connection reset", "connection closed", "connection refused", "socket closed",
    "unavailable:", "coordination service", "heartbeat", "barrier", "deadline_exceeded",
)  # fmt: skip


def classify(error: BaseException, multi_process: bool) -> ExitCode:
    if not multi_process:
        return ExitCode.FAILURE
    return ExitCode.PEER_LOST if mentions(error, _PEER_HINTS) else ExitCode.FAILURE

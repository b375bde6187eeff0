"""What an error of a tf-keras training group means: a lost peer (43) or a program error (1)."""

from __future__ import annotations

from kerasjob_contract import ExitCode
from kerasjob_trainer.shared.faults import mentions

# Substrings of OpError messages that mean "the group broke", not "the program is wrong".
_PEER_HINTS = (
    "collective", "coordination", "heartbeat", "peer", "socket closed", "connection reset",
    "failed to connect", "connection refused", "unavailable", "abort", "barrier",
)  # fmt: skip


def classify(error: BaseException) -> ExitCode:
    """Map an exception raised during multi-worker training to an exit code."""
    import tensorflow as tf

    peer_errors = (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.CancelledError,
        tf.errors.DeadlineExceededError,
    )
    if isinstance(error, peer_errors):
        return ExitCode.PEER_LOST
    if isinstance(error, (tf.errors.InternalError, tf.errors.UnknownError)) and mentions(
        error, _PEER_HINTS
    ):
        return ExitCode.PEER_LOST
    return ExitCode.FAILURE

"""The Keras 3 session API at the path own scripts import: a re-export of
`kerasjob_trainer.runtimes.keras3.session`, kept for users; new code may import either."""

from kerasjob_trainer.runtimes.keras3.session import Context, Session, session_for, start

__all__ = ["Context", "Session", "session_for", "start"]

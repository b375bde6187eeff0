"""User API: the Keras 3 session (`session.start()`, `Session`), re-exported from
`kerasjob_trainer.runtimes.keras3.session` at the stable path own scripts import. Scripts
import this one; the runtime's own path is internal."""

from kerasjob_trainer.runtimes.keras3.session import Context, Session, session_for, start

__all__ = ["Context", "Session", "session_for", "start"]

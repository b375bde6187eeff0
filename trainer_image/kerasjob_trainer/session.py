"""User API: the tf-keras session at the path own scripts import (`from kerasjob_trainer import
session`; docs/tasks/own-script.md), re-exported from
`kerasjob_trainer.runtimes.tf_keras.session`. Scripts import this one; the runtime's own path
is internal and may move."""

from kerasjob_trainer.runtimes.tf_keras.session import Session, session_for, start

__all__ = ["Session", "session_for", "start"]

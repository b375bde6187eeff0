"""The tf-keras session API at the path own scripts import (`from kerasjob_trainer import
session`): a re-export of `kerasjob_trainer.runtimes.tf_keras.session`, kept for users; new
code may import either."""

from kerasjob_trainer.runtimes.tf_keras.session import Session, session_for, start

__all__ = ["Session", "session_for", "start"]

"""The Keras 3 session API at the path own scripts import (`from kerasjob_trainer.keras3 import
session`): kept for users; the runtime lives in `kerasjob_trainer.runtimes.keras3`."""

"""The KerasJob trainer: distributed Keras training that survives preemption, one runtime per
way to train (`kerasjob_trainer.runtimes`): tf-keras under MultiWorkerMirroredStrategy
(backend tensorflow), tf-keras under ParameterServerStrategy (backend tensorflow with
spec.ps) and Keras 3 with keras.distribution (backend jax). `python -m kerasjob_trainer` is
the container's process (`core.main`); a user's own script imports a session
(`kerasjob_trainer.session`, `kerasjob_trainer.keras3.session`).

Importing this package must stay cheap: the supervisor imports it before any framework, and
the Keras 3 image has no TensorFlow. What it shares with the operator is the contract's
(`kerasjob_contract`), which the operator installs without this package.
"""

from kerasjob_trainer.shared import startup as _startup  # noqa: F401  (marks when Python got here)

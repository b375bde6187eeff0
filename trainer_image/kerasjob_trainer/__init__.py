"""The KerasJob trainer: MultiWorkerMirroredStrategy training that survives preemption.

Importing this package must stay cheap: the operator imports `kerasjob_trainer.contract`
and never installs TensorFlow.
"""

from kerasjob_trainer.shared import startup as _startup  # noqa: F401  (marks when Python got here)

"""The KerasJob trainer: MultiWorkerMirroredStrategy training that survives preemption.

Importing this package must stay cheap: the operator imports `kerasjob_trainer.contract`
and never installs TensorFlow.
"""

"""Keras 3 on the JAX backend: the trainer of a KerasJob with spec.trainer.backend: jax.

Keras 3 does not train under tf.distribute.MultiWorkerMirroredStrategy (keras #20585); its
multi-host path is `keras.distribution` on JAX. This package gives it the guarantees of the
tf-keras path, with the same contract (exit codes, log lines, progress, goodput):

- `identity`: who this process is (KERAS_DISTRIBUTION_* / JAX_*), pure, checked first;
- `supervisor`: the container's process; runs the trainer as its child and turns the JAX
  distributed runtime's abort on a lost peer into exit 43;
- `session`: the library API (`start()`, `fit()`, `finish()`), the twin of
  `kerasjob_trainer.session`; the bundled trainer (`train`) is written on it;
- `checkpoint`: the backup (every variable, bit for bit, one atomic file);
- `data`: the step-indexed input (exact data position, any number of processes);
- `models`: the built-in models in Keras 3 and user model functions.

Nothing here imports TensorFlow; the Keras 3 image has none.
"""

"""The Keras 3 runtime (backend jax): Keras 3 on JAX with `keras.distribution`.

Keras 3 does not train under tf.distribute.MultiWorkerMirroredStrategy (keras #20585); its
multi-host path is `keras.distribution` on JAX. This package gives it the guarantees of the
tf-keras runtime through the same core (exit codes, log lines, progress, goodput):

- `runtime`: its `Runtime` (the supervisor's side: the JAX abort on a lost peer is 43);
- `identity`: who this process is (KERAS_DISTRIBUTION_* / JAX_*), pure, checked first;
- `context`: the core's context with that identity;
- `session`: the library API (`start()`, `fit()`, `finish()`); the bundled trainer (`train`)
  is written on it; `callback`: what runs after every step; `errors`: lost peer or not;
- `checkpoint`: the backup (every variable, bit for bit, one atomic file);
- `data`: the step-indexed input (exact data position, any number of processes);
- `models`: the built-in models in Keras 3 and user model functions.

Nothing here imports TensorFlow; the Keras 3 image has none (import-linter keeps it so).
"""

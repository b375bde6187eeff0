"""The trainer's core: one lifecycle for every runtime (`runtime`: the protocol a runtime
implements; `registry`: which runtime serves a backend; `main`: the container's process and
its child; `supervisor`; `context`; `lifecycle`: the session every runtime's is; `steplog`;
`signals`). Imports no framework: nothing here imports TensorFlow, tf_keras or JAX."""

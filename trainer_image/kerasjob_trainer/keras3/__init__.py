"""User API: the Keras 3 (backend jax) session at the path own scripts import, `from
kerasjob_trainer.keras3 import session` (docs/keras3-jax.md, docs/from-horovod.md,
examples/from-horovod.yaml). The path is kept stable; the runtime behind it lives in
`kerasjob_trainer.runtimes.keras3`, whose module paths are internal and may move."""

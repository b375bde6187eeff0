"""The tf-keras runtime (backend tensorflow): `runtime` (its `Runtime`), `session` (the
library API), `train` and `evaluator` (the bundled programs), and what only TensorFlow
needs: `cluster` (TF_CONFIG), `strategy` (MWMS), `preemption` (save on SIGTERM, the only
module touching private TF API), `metric_state`, `progress`, `pipeline`, `data`, `models`,
`audit`, `errors`. Nothing here imports JAX."""

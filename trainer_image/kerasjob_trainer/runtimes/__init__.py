"""One package per framework, each implementing `core.runtime.Runtime` and named in
`core.registry`: `tf_keras` (backend tensorflow), `keras3` (backend jax)."""

"""The tf-keras step-indexed input pipeline at the path own scripts import
(`kerasjob_trainer.pipeline.indexed_input(pipeline.Indexed(x, y), ...)`): a re-export of
`kerasjob_trainer.runtimes.tf_keras.pipeline`: user API, the stable path scripts import
(the runtime's own is internal)."""

from kerasjob_trainer.runtimes.tf_keras.pipeline import (
    Indexed,
    dataset_fn,
    example_indices,
    global_batch_indices,
    indexed_input,
)

__all__ = ["Indexed", "dataset_fn", "example_indices", "global_batch_indices", "indexed_input"]

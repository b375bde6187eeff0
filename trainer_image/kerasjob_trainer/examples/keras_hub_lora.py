"""A KerasHub fine-tune, sharded: a Gemma-architecture causal LM with LoRA, on a mesh.

    spec.trainer: {backend: jax, model: "kerasjob_trainer.examples.keras_hub_lora:build",
                   mesh: [{name: batch, size: 2}, {name: model, size: 2}]}
    (examples/keras3-hub-lora.yaml: 2 Pods x 2 devices)

- `layout_map(device_mesh)`: the backbone's own layout (`GemmaBackbone.get_layout_map`:
  embeddings, attention and feed-forward kernels on the "model" axis). The trainer sets
  `ModelParallel` with it BEFORE `build` runs (Keras lays a variable out when it makes it).
- `build(config)`: the backbone built from a small config with random weights (our machines
  cannot download presets), LoRA on (only the rank-4 adapters train), the causal-LM task
  (`GemmaCausalLM`: the backbone + its tied embedding as the output layer), compiled; plus the
  training data: next-byte prediction over windows of UTF-8 text in every Python image (the
  stdlib's pydoc topics), tokenized as bytes (vocabulary 256: no tokenizer, no TensorFlow).

- Data from files: with `spec.trainer.dataset` naming a path (e.g. `{source: path, path:
  /data/hub-lora, format: arrayrecord}`), `build` returns the model alone and the trainer reads
  the ArrayRecord files there through Grain; `python -m kerasjob_trainer.examples.keras_hub_lora
  DIRECTORY` writes the byte windows as such files (`records.write_split`).

A real fine-tune replaces `_backbone()` with a preset and the byte windows with the preset's
tokenizer (see the comments there).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

#: A Gemma-architecture backbone small enough for CPUs (69 k parameters, 3.3 k of them LoRA).
#: Head counts and widths divide by 2, so the "model" axis may be 1 or 2 (4 with 4 heads).
TINY_GEMMA = {
    "vocabulary_size": 256,  # byte tokens
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 64,
    "intermediate_dim": 128,
    "head_dim": 16,
}
SEQUENCE = 64
LORA_RANK = 4


#: The mesh axes GemmaBackbone.get_layout_map shards on (its data_parallel_dim_name and
#: model_parallel_dim_name): spec.trainer.mesh names its axes so.
AXES = ("batch", "model")


def layout_map(device_mesh: Any) -> Any:
    """The backbone's own layout over the job's mesh (axes named batch and model: another
    name is a ValueError that says so, which the trainer turns into exit 78)."""
    import keras_hub

    have = tuple(device_mesh.axis_names)
    if not set(AXES) <= set(have):
        raise ValueError(
            f"GemmaBackbone.get_layout_map shards on mesh axes named {AXES[0]!r} and "
            f"{AXES[1]!r}, not {', '.join(map(repr, have))}"
        )
    return keras_hub.models.GemmaBackbone.get_layout_map(device_mesh)


def _backbone() -> Any:
    import keras_hub

    # A real fine-tune loads pretrained weights here instead (the image needs network access
    # to Kaggle or Hugging Face, or the files on a volume), e.g.
    #   keras_hub.models.GemmaBackbone.from_preset("gemma2_2b_en")
    #   keras_hub.models.GemmaBackbone.from_preset("kaggle://keras/gemma2/keras/gemma2_2b_en")
    #   keras_hub.models.GemmaBackbone.from_preset("hf://google/gemma-2-2b")
    #   keras_hub.models.GemmaBackbone.from_preset("/data/gemma2_2b_en")  # a mounted copy
    # and tokenizes with keras_hub.models.GemmaTokenizer.from_preset(<the same handle>).
    return keras_hub.models.GemmaBackbone(**TINY_GEMMA)


def build(config: dict[str, Any]) -> Any:
    """The compiled causal LM (LoRA on) and its training data (token ids, next token ids);
    the model alone when spec.trainer.dataset names files (the trainer reads them)."""
    import keras
    import keras_hub

    backbone = _backbone()
    backbone.enable_lora(rank=LORA_RANK)
    task = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    # The trainer feeds (x, y) arrays by global step through Keras's own fit; KerasHub's
    # task fit would re-batch them itself. So the task is called inside a plain model that
    # takes the token ids alone (every position is real text: the padding mask is all ones).
    token_ids = keras.Input((SEQUENCE,), dtype="int32", name="token_ids")
    mask = keras.ops.ones_like(token_ids)
    logits = task({"token_ids": token_ids, "padding_mask": mask})
    model = keras.Model(token_ids, logits, name="gemma_lora")
    learning_rate = float(config.get("learningRate") or 1e-3)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    if reads_files(config):
        return model
    return model, byte_windows(SEQUENCE)


def reads_files(config: dict[str, Any]) -> bool:
    """Whether spec.trainer.dataset names a path (files the trainer reads through Grain)."""
    dataset = config.get("dataset")
    return isinstance(dataset, dict) and bool(dataset.get("path"))


def write_dataset(directory: str, shards: int = 2) -> list[str]:
    """The byte windows as ArrayRecord files `train-NNNNN-of-SSSSS.array_record` in
    `directory` (what `dataset: {source: path, path: directory}` reads)."""
    from kerasjob_trainer.runtimes.keras3 import records

    x, y = byte_windows(SEQUENCE)
    return records.write_split(directory, "train", x, y, shards)


def byte_windows(sequence: int, limit: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): up to `limit` windows of `sequence` bytes of English text and the same windows
    shifted by one byte (the next-token targets), in a fixed order."""
    import pydoc_data.topics

    text = "\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))
    tokens = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)
    count = min(limit, (len(tokens) - 1) // sequence)
    starts = np.arange(count) * sequence
    x = np.stack([tokens[s : s + sequence] for s in starts])
    y = np.stack([tokens[s + 1 : s + sequence + 1] for s in starts])
    return x, y


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python -m {__spec__.name if __spec__ else __name__} DIRECTORY")
    for written in write_dataset(sys.argv[1]):
        print(written)

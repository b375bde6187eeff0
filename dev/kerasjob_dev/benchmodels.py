"""The benchmarks' own models, shared by the benches that train them (Keras 3; imported lazily,
so the dev tools do not need Keras to import this module).

`transformer` is a decoder-only language model (pre-norm blocks of causal multi-head attention
and a GELU MLP, a Dense head over the vocabulary) whose layers are named, so that a layout
can name their variables: `transformer_layout` shards it Megatron-style on one mesh axis.
"""

from __future__ import annotations

from typing import Any

#: The transformer's variables that `transformer_layout` shards on the model axis (`None`
#: where it stays whole): Keras variable paths (re.fullmatch'ed, as LayoutMap does) and their
#: layouts. The embedding by vocabulary rows; attention by heads (query, key and value kernels
#: are (width, heads, head size), the output's (heads, head size, width)); the MLP's first
#: kernel by columns and its second by rows (one all-reduce per MLP); the head by vocabulary.
TRANSFORMER_LAYOUT: dict[str, tuple[str | None, ...]] = {
    r"embed/embeddings": ("model", None),
    r"block\d+_attn/(query|key|value)/kernel": (None, "model", None),
    r"block\d+_attn/attention_output/kernel": ("model", None, None),
    r"block\d+_mlp_up/kernel": (None, "model"),
    r"block\d+_mlp_down/kernel": ("model", None),
    r"head/kernel": (None, "model"),
}


def transformer(vocab: int, width: int, blocks: int, heads: int) -> Any:
    """A compiled decoder-only transformer (Adam, next-token cross-entropy on logits):
    int32 tokens (batch, sequence) in, logits (batch, sequence, vocab) out."""
    import keras
    from keras import layers

    tokens = keras.Input((None,), dtype="int32")
    x = layers.Embedding(vocab, width, name="embed")(tokens)
    for i in range(blocks):
        y = layers.LayerNormalization(name=f"block{i}_norm1")(x)
        attention = layers.MultiHeadAttention(heads, width // heads, name=f"block{i}_attn")
        x = layers.Add()([x, attention(y, y, use_causal_mask=True)])
        y = layers.LayerNormalization(name=f"block{i}_norm2")(x)
        y = layers.Dense(width * 4, activation="gelu", name=f"block{i}_mlp_up")(y)
        x = layers.Add()([x, layers.Dense(width, name=f"block{i}_mlp_down")(y)])
    logits = layers.Dense(vocab, name="head")(layers.LayerNormalization(name="norm")(x))
    model = keras.Model(tokens, logits, name="transformer")
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def transformer_layout(device_mesh: Any, axis: str = "model") -> Any:
    """A keras LayoutMap over `device_mesh` that shards `transformer`'s variables
    (TRANSFORMER_LAYOUT) on mesh axis `axis`."""
    import keras

    layout = keras.distribution.LayoutMap(device_mesh)
    for key, axes in TRANSFORMER_LAYOUT.items():
        layout[key] = tuple(axis if a == "model" else a for a in axes)
    return layout

"""The name map of the Hugging Face Marian format, the one place of it: which tensor of a
``MarianMTModel`` each attnlab tensor is, the permutation of the model dimension that makes
Marian's position table attnlab's, and the two formats' names for the activations.
:mod:`attnlab.formats.marian` reads it in both directions (``to_huggingface`` and
``from_huggingface``), so the export and the import cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "ACTIVATIONS_IN",
    "ACTIVATIONS_OUT",
    "LOGITS_BIAS",
    "Entry",
    "marian_permutation",
    "name_map",
]

#: attnlab's activation -> Marian's name for it (the export writes these).
ACTIVATIONS_OUT = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_pytorch_tanh",
    "silu": "swish",
}
#: Marian's activation names -> attnlab's (transformers' ACT2FN names for the same functions).
ACTIVATIONS_IN = {
    "relu": "relu",
    "gelu": "gelu",
    "swish": "silu",
    "silu": "silu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
#: Marian's output bias, ``(1, target_vocab_size)``: attnlab's ``lm_head.bias`` (or zeros).
LOGITS_BIAS = "final_logits_bias"


def marian_permutation(d_model: int) -> Tensor:
    """``(d_model,)`` int64: Marian's dimension ``j`` is attnlab's dimension ``perm[j]`` (the
    even ones, then the odd ones: sines, then cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


@dataclass(frozen=True)
class Entry:
    """One tensor of the name map: Marian's ``marian`` is attnlab's ``attnlab`` (its ``rows``
    where attnlab fuses the query, key and value projections into one ``in_proj``), with the
    model dimension permuted on ``axis`` (None: a tensor that does not touch the stream)."""

    marian: str
    attnlab: str
    axis: int | None
    rows: slice | None = None


def name_map(config: Any) -> list[Entry]:
    """Every tensor of a Marian model and the attnlab tensor it is: the one table that both
    :func:`~attnlab.formats.marian.to_huggingface` and
    :func:`~attnlab.formats.marian.from_huggingface` read. Tied matrices appear under each
    of their names (Marian's ``model.shared``, encoder and decoder embeddings, ``lm_head``)."""
    c = config
    d, head_dim = c.d_model, c.d_model // c.num_heads
    kv = (c.num_kv_heads or c.num_heads) * head_dim
    entries: list[Entry] = []

    def reads_stream(name: str, prefix: str, rows: slice | None = None) -> None:
        """A linear map from the residual stream: its input columns are permuted."""
        entries.append(Entry(f"{name}.weight", f"{prefix}.weight", 1, rows))
        entries.append(Entry(f"{name}.bias", f"{prefix}.bias", None, rows))

    def writes_stream(name: str, prefix: str) -> None:
        """A linear map into the residual stream: its output rows are permuted."""
        entries.append(Entry(f"{name}.weight", f"{prefix}.weight", 0))
        entries.append(Entry(f"{name}.bias", f"{prefix}.bias", 0))

    def norm(name: str, prefix: str) -> None:
        entries.append(Entry(f"{name}.weight", f"{prefix}.weight", 0))
        entries.append(Entry(f"{name}.bias", f"{prefix}.bias", 0))

    def attention(name: str, prefix: str) -> None:
        reads_stream(f"{name}.q_proj", f"{prefix}.in_proj", slice(0, d))
        reads_stream(f"{name}.k_proj", f"{prefix}.in_proj", slice(d, d + kv))
        reads_stream(f"{name}.v_proj", f"{prefix}.in_proj", slice(d + kv, d + 2 * kv))
        writes_stream(f"{name}.out_proj", f"{prefix}.out_proj")

    def feed_forward(name: str, prefix: str) -> None:
        reads_stream(f"{name}.fc1", f"{prefix}.ff.linear1")
        writes_stream(f"{name}.fc2", f"{prefix}.ff.linear2")

    if c.share_embeddings:
        entries.append(Entry("model.shared.weight", "src_embed.token.weight", 1))
    entries.append(Entry("model.encoder.embed_tokens.weight", "src_embed.token.weight", 1))
    entries.append(Entry("model.decoder.embed_tokens.weight", "tgt_embed.token.weight", 1))
    entries.append(Entry("lm_head.weight", "lm_head.weight", 1))
    if c.output_bias:
        entries.append(Entry(LOGITS_BIAS, "lm_head.bias", None))
    for i in range(c.num_encoder_layers):
        name, prefix = f"model.encoder.layers.{i}", f"encoder.layers.{i}"
        attention(f"{name}.self_attn", f"{prefix}.self_attn")
        norm(f"{name}.self_attn_layer_norm", f"{prefix}.norm1")
        feed_forward(name, prefix)
        norm(f"{name}.final_layer_norm", f"{prefix}.norm2")
    for i in range(c.num_decoder_layers):
        name, prefix = f"model.decoder.layers.{i}", f"decoder.layers.{i}"
        attention(f"{name}.self_attn", f"{prefix}.self_attn")
        norm(f"{name}.self_attn_layer_norm", f"{prefix}.norm1")
        attention(f"{name}.encoder_attn", f"{prefix}.cross_attn")
        norm(f"{name}.encoder_attn_layer_norm", f"{prefix}.norm2")
        feed_forward(name, prefix)
        norm(f"{name}.final_layer_norm", f"{prefix}.norm3")
    return entries

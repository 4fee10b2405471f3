"""Weights written by other libraries.

* torch.nn: :meth:`attnlab.MultiHeadAttention.from_torch`,
  :meth:`attnlab.nn.layers.EncoderLayer.from_torch` / ``DecoderLayer`` / ``Encoder`` / ``Decoder``
  copy torch.nn's modules exactly (they live beside the classes they build).
* Hugging Face BERT checkpoints: :func:`load_bert` reads a directory with ``config.json`` and
  ``model.safetensors`` (all-MiniLM-L6-v2, bert-base-uncased, ...) into an
  :class:`attnlab.TransformerEncoder`. Only safetensors is read: no pickle.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._io import read_json
from ..models.config import TransformerConfig
from ..models.saved import WEIGHTS_FILE
from ..models.transformer import TransformerEncoder

__all__ = ["bert_config", "load_bert"]

_BERT_ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
# Checkpoint entries with no counterpart in an encoder: the pooler (a tanh layer over [CLS],
# unused by mean pooling), the masked-LM / next-sentence heads, and a constant position-id buffer.
_IGNORED_PREFIXES = ("pooler.", "cls.")
_IGNORED_NAMES = ("embeddings.position_ids",)


def bert_config(data: dict[str, Any], *, source: str = "config") -> TransformerConfig:
    """The :class:`attnlab.TransformerConfig` of a Hugging Face BERT ``config.json`` dict."""

    def get(key: str) -> Any:
        if key not in data:
            raise ValueError(f"{source}: missing BERT field {key!r}")
        return data[key]

    if data.get("model_type", "bert") != "bert":
        raise ValueError(f"{source}: model_type {data.get('model_type')!r}, expected 'bert'")
    kind = data.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ValueError(
            f"{source}: position_embedding_type {kind!r} is not supported (only 'absolute')"
        )
    act = get("hidden_act")
    if act not in _BERT_ACTIVATIONS:
        raise ValueError(
            f"{source}: hidden_act {act!r} is not supported; expected one of "
            f"{sorted(_BERT_ACTIVATIONS)}"
        )
    vocab = get("vocab_size")
    special = {}
    for ours, theirs in (
        ("pad_id", "pad_token_id"),
        ("bos_id", "bos_token_id"),
        ("eos_id", "eos_token_id"),
    ):
        if isinstance(data.get(theirs), int) and 0 <= data[theirs] < vocab:
            special[ours] = data[theirs]
    try:
        return TransformerConfig.preset(
            "minilm-l6",
            vocab_size=vocab,
            d_model=get("hidden_size"),
            num_heads=get("num_attention_heads"),
            d_ff=get("intermediate_size"),
            num_encoder_layers=get("num_hidden_layers"),
            dropout=float(data.get("hidden_dropout_prob", 0.1)),
            attention_dropout=float(data.get("attention_probs_dropout_prob", 0.1)),
            activation=_BERT_ACTIVATIONS[act],
            layer_norm_eps=float(data.get("layer_norm_eps", 1e-12)),
            max_len=get("max_position_embeddings"),
            type_vocab_size=int(data.get("type_vocab_size", 2)),
            **special,
        )
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def _bert_names(config: TransformerConfig) -> dict[str, str | tuple[str, str, str]]:
    """attnlab name -> BERT name (a (query, key, value) triple for the fused projection)."""
    names: dict[str, str | tuple[str, str, str]] = {
        "embed.token.weight": "embeddings.word_embeddings.weight",
        "embed.position.weight": "embeddings.position_embeddings.weight",
        "embed.token_type.weight": "embeddings.token_type_embeddings.weight",
        "embed.norm.weight": "embeddings.LayerNorm.weight",
        "embed.norm.bias": "embeddings.LayerNorm.bias",
    }
    for i in range(config.num_encoder_layers):
        ours, theirs = f"encoder.layers.{i}.", f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            names[f"{ours}self_attn.in_proj.{kind}"] = tuple(
                f"{theirs}attention.self.{part}.{kind}" for part in ("query", "key", "value")
            )
            names[f"{ours}self_attn.out_proj.{kind}"] = f"{theirs}attention.output.dense.{kind}"
            names[f"{ours}norm1.{kind}"] = f"{theirs}attention.output.LayerNorm.{kind}"
            names[f"{ours}ff.linear1.{kind}"] = f"{theirs}intermediate.dense.{kind}"
            names[f"{ours}ff.linear2.{kind}"] = f"{theirs}output.dense.{kind}"
            names[f"{ours}norm2.{kind}"] = f"{theirs}output.LayerNorm.{kind}"
    return names


def load_bert(
    directory: str | os.PathLike, *, device: torch.device | str | None = None
) -> TransformerEncoder:
    """Load a Hugging Face BERT directory into a :class:`attnlab.TransformerEncoder` (eval mode).

    Reads ``config.json`` (hidden_size, num_attention_heads, intermediate_size, ...) and
    ``model.safetensors``; names may carry a ``bert.`` prefix. The pooler, the pre-training
    heads and the ``position_ids`` buffer are not part of an encoder and are skipped; any
    other unknown or missing weight, or a wrong shape, is an error naming the file and key.
    The tokenizer (``tokenizer.json``) is not read: tokenize with the ``tokenizers`` package.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path, weights_path = directory / "config.json", directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: missing (a BERT directory has config.json and model.safetensors)"
            )
    data = read_json(config_path)
    config = bert_config(data, source=str(config_path))
    try:
        stored = load_file(weights_path)
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{weights_path}: not a readable safetensors file: {e}") from None
    counts = Counter(k.removeprefix("bert.") for k in stored)
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    if duplicates:
        raise ValueError(
            f"{weights_path}: weights stored both with and without the 'bert.' prefix: "
            f"{duplicates[:5]}"
        )
    stored = {k.removeprefix("bert."): v for k, v in stored.items()}
    for name, tensor in stored.items():
        if not tensor.dtype.is_floating_point and name not in _IGNORED_NAMES:
            raise ValueError(f"{weights_path}: {name}: dtype {tensor.dtype}, expected floating")

    model = TransformerEncoder(config)
    state = model.state_dict()
    used: set[str] = set()
    converted: dict[str, Tensor] = {}
    for ours, theirs in _bert_names(config).items():
        parts = theirs if isinstance(theirs, tuple) else (theirs,)
        missing = [p for p in parts if p not in stored]
        if missing:
            raise ValueError(f"{weights_path}: missing weight {missing[0]!r}")
        expected = state[ours].shape
        if len(parts) > 1:  # query, key, value: each a third of the fused projection's rows
            expected = (expected[0] // len(parts), *expected[1:])
        for part in parts:
            if stored[part].shape != expected:
                raise ValueError(
                    f"{weights_path}: {part}: shape {tuple(stored[part].shape)}, but config.json "
                    f"implies {tuple(expected)}"
                )
        converted[ours] = (
            torch.cat([stored[p] for p in parts]) if len(parts) > 1 else stored[parts[0]]
        )
        used.update(parts)
    unknown = [
        k
        for k in stored
        if k not in used and not k.startswith(_IGNORED_PREFIXES) and k not in _IGNORED_NAMES
    ]
    if unknown:
        raise ValueError(f"{weights_path}: unknown weights {unknown[:5]} (not a BERT encoder?)")
    model.load_state_dict(converted, strict=True)
    if device is not None:
        model = model.to(device)
    return model.eval()

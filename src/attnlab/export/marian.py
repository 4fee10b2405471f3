"""attnlab's encoder-decoder as a Hugging Face transformers ``MarianMTModel`` directory: the
weights permuted on the model dimension so that Marian's position table is attnlab's, the
config, the generation config and attnlab's tokenizer as a fast tokenizer. Written directly
(safetensors and JSON): exporting needs no transformers, running it does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._io import atomic_write_dir
from .common import (
    PathLike,
    check_exportable,
    check_out_dir,
    float_state,
    positions,
    same_tokenizer,
    tokenizer_pair,
    vocabulary,
)

__all__ = ["marian_permutation", "to_huggingface"]

_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}


def to_huggingface(model: Any, tokenizers: Any, out_dir: PathLike, *, force: bool = False) -> Path:
    """Write ``model`` as a Hugging Face transformers ``MarianMTModel`` directory, with its
    generation config and a fast tokenizer.

    Args:
        model: an encoder-decoder :class:`attnlab.Transformer` (post-LN, sinusoidal positions,
            LayerNorm epsilon 1e-5; grouped-query attention is exported with each key / value
            head repeated for its query heads).
        tokenizers: its :class:`attnlab.data.tokenizer.Tokenizer`, a ``(src, tgt)`` pair of
            one tokenizer (transformers' fast tokenizer holds one vocabulary), or a model
            directory holding the tokenizer files.
        out_dir: the directory to create.
        force: replace an existing ``out_dir``.

    The weights are permuted on the model dimension so that Marian's position table (sines,
    then cosines) equals attnlab's (interleaved): see the module docstring. The tokenizer is
    attnlab's own ``tokenizer.json``; sources get no BOS / EOS (as attnlab frames them), and
    ``decoder_start_token_id`` is attnlab's BOS. Generation defaults to beam 4 with
    ``length_penalty`` 0.6 and never generates pad or BOS, as attnlab. For training in
    transformers, append ``eos_token_id`` to the tokenizer's target ids (attnlab's targets
    are ``[bos] + ids + [eos]``; the model shifts them right itself): one fast tokenizer frames
    sources and targets alike.

    Returns: ``out_dir``.

    Raises:
        ValueError: an option Marian cannot express; tokenizers that do not match the model.
        FileExistsError: ``out_dir`` exists and ``force`` is False.
    """
    check_exportable(model, "huggingface")
    src, tgt = tokenizer_pair(tokenizers)
    c = model.config
    if not same_tokenizer(src, tgt):
        raise ValueError(
            "tokenizers: Hugging Face (MarianMTModel) export needs one tokenizer for both "
            "sides (a fast tokenizer holds one vocabulary); this model has two"
        )
    tokens = vocabulary(src, c.vocab_size, "source")
    vocabulary(tgt, c.target_vocab_size, "target")
    out = check_out_dir(out_dir, force)
    from safetensors.torch import save_file

    weights = _marian_weights(model)

    def build(directory: Path) -> None:
        save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
        _write_json(directory / "config.json", _marian_config(c))
        _write_json(directory / "generation_config.json", _generation_config(c))
        _write_tokenizer(directory, src, tokens, c)

    return atomic_write_dir(out, build)


def marian_permutation(d_model: int) -> Tensor:
    """``(d_model,)`` int64: Marian's dimension ``j`` is attnlab's dimension ``perm[j]`` (the
    even ones, then the odd ones: sines, then cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _marian_state(model: Any) -> dict[str, Tensor]:
    """attnlab's weights under Marian's names, permuted on the model dimension."""
    c = model.config
    state = float_state(model)
    perm = marian_permutation(c.d_model)
    group = c.num_heads // (c.num_kv_heads or c.num_heads)
    d, head_dim = c.d_model, c.d_model // c.num_heads
    out: dict[str, Tensor] = {}

    def bias(prefix: str, size: int) -> Tensor:
        b = state.get(f"{prefix}.bias")
        return torch.zeros(size) if b is None else b  # bias=False: zero biases, the same map

    def reads_stream(name: str, prefix: str, rows: slice = slice(None)) -> None:
        """A linear map from the residual stream: permute its input columns."""
        weight = state[f"{prefix}.weight"][rows]
        out[f"{name}.weight"] = weight[:, perm]
        out[f"{name}.bias"] = bias(prefix, state[f"{prefix}.weight"].shape[0])[rows]

    def writes_stream(name: str, prefix: str) -> None:
        """A linear map into the residual stream: permute its output rows."""
        out[f"{name}.weight"] = state[f"{prefix}.weight"][perm]
        out[f"{name}.bias"] = bias(prefix, d)[perm]

    def norm(name: str, prefix: str) -> None:
        out[f"{name}.weight"] = state[f"{prefix}.weight"][perm]
        out[f"{name}.bias"] = state[f"{prefix}.bias"][perm]

    def key_value_heads(name: str) -> None:
        """Repeat each key / value head for the ``group`` query heads that share it (GQA)."""
        if group == 1:
            return
        for part in ("weight", "bias"):
            t = out[f"{name}.{part}"]
            heads = t.reshape(-1, head_dim, *t.shape[1:])
            out[f"{name}.{part}"] = heads.repeat_interleave(group, dim=0).reshape(d, *t.shape[1:])

    def attention(name: str, prefix: str) -> None:
        kv = (c.num_kv_heads or c.num_heads) * head_dim
        reads_stream(f"{name}.q_proj", f"{prefix}.in_proj", slice(0, d))
        reads_stream(f"{name}.k_proj", f"{prefix}.in_proj", slice(d, d + kv))
        reads_stream(f"{name}.v_proj", f"{prefix}.in_proj", slice(d + kv, d + 2 * kv))
        key_value_heads(f"{name}.k_proj")
        key_value_heads(f"{name}.v_proj")
        writes_stream(f"{name}.out_proj", f"{prefix}.out_proj")

    def feed_forward(name: str, prefix: str) -> None:
        reads_stream(f"{name}.fc1", f"{prefix}.ff.linear1")
        writes_stream(f"{name}.fc2", f"{prefix}.ff.linear2")

    source = state["src_embed.token.weight"][:, perm]
    target = state["tgt_embed.token.weight"][:, perm]
    if c.share_embeddings:
        out["model.shared.weight"] = source
    out["model.encoder.embed_tokens.weight"] = source
    out["model.decoder.embed_tokens.weight"] = target
    out["lm_head.weight"] = state["lm_head.weight"][:, perm]
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
    return out


def _marian_weights(model: Any) -> dict[str, Tensor]:
    """What transformers' ``save_pretrained`` would write for the Marian model: each tied
    matrix once, no position tables (Marian computes them), a zero final logits bias."""
    c = model.config
    state = _marian_state(model)
    if c.tie_output:  # transformers ties the decoder's (and with sharing, all) embeddings
        del state["lm_head.weight"]
        if c.share_embeddings:
            del state["model.encoder.embed_tokens.weight"]
            del state["model.decoder.embed_tokens.weight"]
    state["final_logits_bias"] = torch.zeros(1, c.target_vocab_size)
    return {k: v.clone() for k, v in state.items()}  # safetensors stores no shared memory


def _marian_config(config: Any) -> dict[str, Any]:
    """``config.json`` of the Marian model (transformers' ``MarianConfig`` fields)."""
    c = config
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "is_encoder_decoder": True,
        "vocab_size": c.vocab_size,
        "decoder_vocab_size": c.target_vocab_size,
        "share_encoder_decoder_embeddings": c.share_embeddings,
        "tie_word_embeddings": c.tie_output,
        "d_model": c.d_model,
        "encoder_layers": c.num_encoder_layers,
        "decoder_layers": c.num_decoder_layers,
        "encoder_attention_heads": c.num_heads,
        "decoder_attention_heads": c.num_heads,
        "encoder_ffn_dim": c.d_ff,
        "decoder_ffn_dim": c.d_ff,
        "activation_function": _ACTIVATIONS[c.activation],
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "max_position_embeddings": positions(c),
        "scale_embedding": c.scale_embeddings,
        "init_std": 0.02,
        "pad_token_id": c.pad_id,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "decoder_start_token_id": c.bos_id,
        "forced_eos_token_id": None,
        "is_decoder": False,
        "use_cache": True,
        "dtype": "float32",
    }


def _generation_config(config: Any) -> dict[str, Any]:
    """``generation_config.json``: attnlab's decoding as far as transformers can express it."""
    c = config
    banned = sorted({c.pad_id, c.bos_id} - {c.eos_id})  # attnlab never generates these
    settings = {
        "decoder_start_token_id": c.bos_id,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id,
        "forced_eos_token_id": None,
        "max_length": c.max_len,
        # attnlab's translate default (sec. 6.1: beam 4, alpha 0.6); transformers divides by
        # length ** 0.6, not by GNMT's ((5 + length) / 6) ** 0.6
        "num_beams": 4,
        "early_stopping": "never",  # stop when no live hypothesis can win, as attnlab
        "length_penalty": 0.6,
    }
    if banned:
        settings["suppress_tokens"] = banned
    return settings


def _write_tokenizer(directory: Path, tokenizer: Any, tokens: list[str], config: Any) -> None:
    """``tokenizer.json`` (attnlab's own file: it adds no BOS / EOS to a text, as attnlab frames
    sources), ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    tokenizer.save(directory / "tokenizer.json")
    special = {
        "bos_token": tokens[config.bos_id],
        "eos_token": tokens[config.eos_id],
        "pad_token": tokens[config.pad_id],
        "unk_token": tokens[tokenizer.unk_id],
    }
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # decode exactly as attnlab
        "split_special_tokens": True,  # "<eos>" in a text is text, as attnlab
        "model_max_length": positions(config),
        "padding_side": "right",
    }
    _write_json(directory / "tokenizer_config.json", settings)
    _write_json(directory / "special_tokens_map.json", special)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

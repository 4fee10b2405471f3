"""What the export targets share: which options each can express, the tokenizers' vocabularies,
the output directory's checks, and the weights and position tables read from a model."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._checks import check_bool, check_choice

__all__ = [
    "MARIAN_LAYER_NORM_EPS",
    "MIN_POSITIONS",
    "TARGETS",
    "TARGET_NAMES",
    "check_exportable",
    "check_out_dir",
    "check_target",
    "float_state",
    "position_table",
    "positions",
    "same_tokenizer",
    "tokenizer_pair",
    "unsupported",
    "vocabulary",
]

PathLike = str | os.PathLike

#: Export targets, as ``attnlab export --to`` names them.
TARGETS = ("ctranslate2", "huggingface")
TARGET_NAMES = {"ctranslate2": "CTranslate2", "huggingface": "Hugging Face (MarianMTModel)"}
#: Positions in the exported tables of sinusoidal (and absent) encodings: attnlab's sinusoids
#: extrapolate to any length, the other engines need a table (a learned one keeps ``max_len``).
MIN_POSITIONS = 1024
#: transformers' LayerNorm epsilon in Marian (fixed, not configurable).
MARIAN_LAYER_NORM_EPS = 1e-5


# -- what each target can express --------------------------------------------------------------


def unsupported(model: object, target: str) -> list[str]:
    """Why ``model`` cannot be exported to ``target``: one line per option the target cannot
    express, each naming the option (empty when it can be exported); the rules are
    :mod:`attnlab.formats`'s."""
    target = check_target(target)
    name = TARGET_NAMES[target]
    from ..models.transformer import Transformer

    if not isinstance(model, Transformer):
        return [
            f"model: {name} export takes an encoder-decoder attnlab.Transformer (model type "
            f"'transformer'), got {type(model).__name__}"
        ]
    c = model.config
    reasons = []
    if target == "ctranslate2":
        if c.positional == "alibi":
            reasons.append(
                f"positional='alibi': {name} export cannot express ALiBi in an encoder "
                f"(its Transformer encoder has no attention biases)"
            )
        return reasons
    if c.positional != "sinusoidal":
        reasons.append(
            f"positional={c.positional!r}: {name} export needs 'sinusoidal' positions (Marian "
            f"computes its own sinusoidal table when it loads)"
        )
    if c.norm_first:
        reasons.append(f"norm_first=True: {name} export needs post-LN (Marian has no pre-LN)")
    if c.embedding_norm:
        reasons.append(f"embedding_norm=True: {name} export cannot express an embedding LayerNorm")
    if c.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        reasons.append(
            f"layer_norm_eps={c.layer_norm_eps!r}: {name} export needs {MARIAN_LAYER_NORM_EPS} "
            f"(Marian's fixed LayerNorm epsilon)"
        )
    return reasons


def check_target(target: object) -> str:
    return str(check_choice(target, TARGETS, "to"))


def check_exportable(model: object, target: str) -> None:
    reasons = unsupported(model, target)
    if reasons:
        raise ValueError(reasons[0])


# -- tokenizers --------------------------------------------------------------------------------


def tokenizer_pair(tokenizers: object) -> tuple[Any, Any]:
    """``(src, tgt)`` from one tokenizer (joint vocabulary), a pair, or a directory; each a
    BPE Tokenizer or a SentencePieceTokenizer."""
    from ..data.tokenizer import load_tokenizers
    from ..data.tokens import is_tokenizer

    if is_tokenizer(tokenizers):
        return tokenizers, tokenizers
    if isinstance(tokenizers, (str, os.PathLike)):
        return load_tokenizers(tokenizers)
    if (
        isinstance(tokenizers, Sequence)
        and len(tokenizers) == 2
        and all(is_tokenizer(t) for t in tokenizers)
    ):
        return tokenizers[0], tokenizers[1]
    raise TypeError(
        f"tokenizers: expected an attnlab Tokenizer or SentencePieceTokenizer, a (src, tgt) "
        f"pair of them, or a model directory holding their files, got "
        f"{type(tokenizers).__name__}"
    )


def vocabulary(tokenizer: Any, size: int, side: str) -> list[str]:
    """The token string of every id ``0 .. size - 1`` (the model's vocabulary on ``side``), as
    the tokenizer's ``id_to_token`` spells it."""
    if tokenizer.vocab_size != size:
        raise ValueError(
            f"tokenizer: the {side} tokenizer has {tokenizer.vocab_size} tokens, but the "
            f"model's {side} vocabulary has {size}"
        )
    tokens = []
    for i in range(size):
        try:
            tokens.append(tokenizer.id_to_token(i))
        except ValueError:  # a hole in the tokenizer's ids
            raise ValueError(f"tokenizer: the {side} tokenizer has no token for id {i}") from None
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"tokenizer: the {side} tokenizer's token strings are not unique")
    return tokens


def same_tokenizer(src: Any, tgt: Any) -> bool:
    """Whether ``src`` and ``tgt`` are one tokenizer: the same object, or of one kind with
    the same :meth:`fingerprint` (they encode and decode alike)."""
    if src is tgt:
        return True
    return src.kind == tgt.kind and src.fingerprint() == tgt.fingerprint()


# -- the output directory ----------------------------------------------------------------------


def check_out_dir(out_dir: PathLike, force: bool) -> Path:
    out = Path(out_dir)
    check_bool(force, "force", TypeError)
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise FileExistsError(f"out_dir: {out} exists and is not a directory")
        if not force:
            raise FileExistsError(
                f"out_dir: {out} already exists; --overwrite (in Python force=True or "
                f"overwrite=True) replaces it"
            )
    return out


# -- weights -----------------------------------------------------------------------------------


def float_state(model: torch.nn.Module) -> dict[str, Tensor]:
    """The state dict, detached, in float32 on the CPU (tied tensors appear under each name)."""
    return {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}


def positions(config: Any) -> int:
    return config.max_len if config.positional == "learned" else max(config.max_len, MIN_POSITIONS)


def position_table(config: Any, state: dict[str, Tensor], side: str) -> Tensor:
    """What attnlab adds to the ``side`` ("src" / "tgt") embeddings at each position:
    ``(positions, d_model)``."""
    from ..nn.positional import sinusoidal_table

    length, d = positions(config), config.d_model
    if config.positional == "sinusoidal":
        return sinusoidal_table(length, d).to(torch.float32)  # the module's float32 values
    if config.positional == "learned":
        return state[f"{side}_embed.position.weight"]
    return torch.zeros(length, d)  # "none", "rotary": nothing is added to the embeddings

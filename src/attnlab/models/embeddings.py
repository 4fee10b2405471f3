"""What the models feed their layer stacks: embedded token ids and their key masks.

* :class:`Embeddings`: token embedding (x sqrt(d_model), Vaswani et al. 2017, sec. 3.4) +
  positional encoding (sec. 3.5) [+ token type] -> [LayerNorm] -> dropout.
* :func:`decoder_input`: a decoder's embedded ids with positions that count real tokens only
  (left padding), with or without a KV cache, and the self-attention key mask they need.
* :func:`check_ids`: the one check of token-id tensors.
* :func:`key_mask_or_none`, :func:`causal_key_mask`: key masks, or None where attention can
  keep its unmasked (or causal) fast path.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import check_type
from .._ops import dropout
from ..nn.cache import DecoderCache
from ..nn.masks import key_mask
from ..nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .config import TransformerConfig

__all__ = ["Embeddings", "causal_key_mask", "check_ids", "decoder_input", "key_mask_or_none"]


class Embeddings(nn.Module):
    """Token embedding (x sqrt(d_model), sec. 3.4) + positional encoding (sec. 3.5) [+ token
    type] -> [LayerNorm] -> dropout (sec. 5.4).

    Shape: ``forward(ids (B, T)) -> (B, T, d_model)``.
    """

    def __init__(
        self,
        config: TransformerConfig,
        vocab_size: int,
        *,
        token: nn.Embedding | None = None,
        token_types: int = 0,
        name: str = "ids",
    ) -> None:
        super().__init__()
        d = config.d_model
        self.name = name
        self.vocab_size = vocab_size
        self.token = token if token is not None else nn.Embedding(vocab_size, d)
        self.scale = math.sqrt(d) if config.scale_embeddings else 1.0
        self.position: nn.Module | None = None
        if config.positional == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d)
        elif config.positional == "learned":
            self.position = LearnedPositionalEmbedding(config.max_len, d)
        self.token_type = nn.Embedding(token_types, d) if token_types else None
        self.norm = nn.LayerNorm(d, eps=config.layer_norm_eps) if config.embedding_norm else None
        self.dropout = config.dropout

    def forward(
        self,
        ids: Tensor,
        *,
        offset: int = 0,
        positions: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """``ids`` ``(B, T)`` at positions ``offset ..``, or at ``positions`` ``(B, T)`` (int64)
        when rows differ (left-padded decoder input)."""
        check_ids(ids, self.vocab_size, self.name)
        return self._embed(ids, offset, positions, token_type_ids)

    def _embed(
        self, ids: Tensor, offset: int, positions: Tensor | None, token_type_ids: Tensor | None
    ) -> Tensor:
        """:meth:`forward` for ids already checked."""
        x = self.token(ids)  # (B, T, d_model)
        if self.scale != 1.0:
            x = x * self.scale
        if self.position is not None:
            if positions is None:
                x = self.position(x, offset=offset)
            else:
                x = x + self._position_table(positions, x.dtype)
        if self.token_type is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            elif token_type_ids.shape != ids.shape:
                raise ValueError(
                    f"token_type_ids: expected shape {tuple(ids.shape)} like {self.name}, got "
                    f"{tuple(token_type_ids.shape)}"
                )
            check_ids(token_type_ids, self.token_type.num_embeddings, "token_type_ids")
            x = x + self.token_type(token_type_ids)
        elif token_type_ids is not None:
            raise ValueError("token_type_ids: this model has no token types (type_vocab_size=0)")
        if self.norm is not None:
            x = self.norm(x)
        return dropout(x, self.dropout, self.training)

    def _position_table(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        """The encodings of ``positions`` ``(B, T)``: ``(B, T, d_model)``."""
        # A compiled step reads no value on the host: positions without a cache are < T.
        compiling = torch.compiler.is_compiling()
        length = positions.shape[-1] if compiling else int(positions.max()) + 1
        if isinstance(self.position, SinusoidalPositionalEncoding):
            table = self.position.table(length, dtype=dtype).to(positions.device)
        else:
            assert isinstance(self.position, LearnedPositionalEmbedding)  # the callers' check
            table = self.position.table(length)  # checks max_len
        return table[positions]


def decoder_input(
    embed: Embeddings, ids: Tensor, pad_id: int, cache: DecoderCache | None
) -> tuple[Tensor, Tensor | None]:
    """Embed decoder ids (checked by the caller); return them with the self-attention key mask
    (None when no pad precedes a real token: the look-ahead mask then hides every pad from
    every real token).

    Positions count real tokens only, so a left-padded row is encoded as it would be without
    its padding (for RoPE and ALiBi, which see relative positions, that holds by itself). With
    a ``cache`` the ids continue its positions and the cache remembers which are pads.
    """
    real = ids != pad_id
    if cache is None:
        self_mask = causal_key_mask(ids, pad_id)
        if self_mask is None:
            return embed._embed(ids, 0, None, None), None
        return embed._embed(ids, 0, _real_positions(real, None), None), self_mask
    before = cache.real.sum(dim=1) if cache.real is not None else None
    length = cache.length
    flags = cache.track_padding(real)
    if flags is None:
        return embed._embed(ids, length, None, None), None
    if before is None:
        before = torch.full((ids.shape[0],), length, dtype=torch.long, device=ids.device)
    return embed._embed(ids, 0, _real_positions(real, before), None), key_mask(flags)


def _real_positions(real: Tensor, before: Tensor | None) -> Tensor:
    """Position of each slot of ``real`` ``(B, T)``: the real tokens before it in its row (plus
    ``before`` ``(B,)``); a pad shares the position of the next real token."""
    flags = real.long()
    positions = flags.cumsum(dim=1) - flags
    return positions if before is None else positions + before[:, None]


def check_ids(ids: object, vocab_size: int, name: str) -> None:
    """Raise unless ``ids`` is a non-empty ``(B, T)`` integer tensor of ids below ``vocab_size``."""
    ids = check_type(ids, Tensor, name, "a (B, T) integer tensor")
    if ids.dim() != 2:
        raise ValueError(f"{name}: expected shape (B, T), got {tuple(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer dtype, got {ids.dtype}")
    if ids.numel() == 0:
        raise ValueError(f"{name}: empty batch or sequence, shape {tuple(ids.shape)}")
    if torch.compiler.is_compiling():
        return  # a compiled step reads no values on the host (the trainer checked the data)
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one pass, one sync
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name}: token id {bad} is outside the vocabulary [0, {vocab_size})")


def key_mask_or_none(real: Tensor) -> Tensor | None:
    """``(B, 1, 1, T)`` key mask of the real tokens ``real`` ``(B, T)``, or None when nothing is
    padded (so that attention keeps its unmasked fast path). A compiled step cannot branch on
    values: it always gets the mask."""
    if torch.compiler.is_compiling():
        return key_mask(real)
    return None if bool(real.all()) else key_mask(real)


def causal_key_mask(ids: Tensor, pad_id: int) -> Tensor | None:
    """Key mask for causal self-attention: None when the look-ahead mask already hides every
    pad from every real token, i.e. when pads only trail (right padding) or are absent; then
    attention keeps its causal fast path. Pad positions' own outputs are never used."""
    real = ids != pad_id
    if torch.compiler.is_compiling():
        return key_mask(real)  # no branch on values in a compiled step
    pad_before_real = (~real[:, :-1] & real[:, 1:]).any()
    return key_mask(real) if bool(pad_before_real) else None

"""Argument checks of :mod:`attnlab.nn.attention`: the tensors given to
:func:`attnlab.scaled_dot_product_attention` and to :meth:`attnlab.MultiHeadAttention.forward`.

Each error names the argument, the expected shape (``B`` batch, ``T_q`` / ``T_k`` query and key
lengths, ``H`` heads, ``Dh`` head width) and the shape given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from .._checks import check_positive_int, shape_of
from .cache import KVCache
from .positional import ALiBi, AttentionPositional, RotaryEmbedding

if TYPE_CHECKING:  # attnlab.nn.attention imports this module
    from .attention import MultiHeadAttention

__all__ = [
    "check_cache",
    "check_context",
    "check_heads",
    "check_inputs",
    "check_positional",
    "check_qkv",
    "check_queries",
]


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """:func:`attnlab.scaled_dot_product_attention`'s q ``(B, H, T_q, Dh)``, k ``(B, H_kv, T_k,
    Dh)`` and v ``(B, H_kv, T_k, Dv)``: floating, one dtype and device, shapes that agree."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor (B, H, T, Dh), got {shape_of(t)}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name}: expected a floating dtype, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v: dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v: devices differ: {q.device}, {k.device}, {v.device}")
    (b, h, t_q, d), (bk, hk, t_k, dk), (bv, hv, t_v, _) = q.shape, k.shape, v.shape
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if not b == bk == bv:
        raise ValueError(f"q, k, v: batch sizes differ: {shapes}")
    if d != dk:
        raise ValueError(f"q, k: head dims differ: {shapes}")
    if t_k != t_v:
        raise ValueError(f"k, v: key and value lengths differ: {shapes}")
    if hk != hv or h % hk:
        raise ValueError(
            f"q, k, v: k and v need the same head count, dividing q's (grouped-query): {shapes}"
        )
    if t_q == 0 or t_k == 0 or d == 0:
        raise ValueError(f"q, k, v: empty sequence or head dim: {shapes}")


def check_heads(d_model: int, num_heads: int, num_kv_heads: int | None) -> int:
    """:class:`attnlab.MultiHeadAttention`'s widths: ``num_heads`` divides ``d_model`` and
    ``num_kv_heads`` (default ``num_heads``) divides ``num_heads``; returns ``num_kv_heads``."""
    check_positive_int(d_model, "d_model")
    check_positive_int(num_heads, "num_heads")
    if d_model % num_heads:
        raise ValueError(
            f"d_model: {d_model} is not divisible by num_heads={num_heads} "
            f"(each head gets d_model / num_heads channels)"
        )
    if num_kv_heads is None:
        return num_heads
    if (
        not isinstance(num_kv_heads, int)
        or isinstance(num_kv_heads, bool)
        or num_kv_heads < 1
        or num_heads % num_kv_heads
    ):
        raise ValueError(
            f"num_kv_heads: expected a positive divisor of num_heads={num_heads}, "
            f"got {num_kv_heads!r}"
        )
    return num_kv_heads


def check_positional(
    positional: object, num_heads: int, head_dim: int
) -> AttentionPositional | None:
    """:class:`attnlab.MultiHeadAttention`'s ``positional``: None, or a RoPE built for its
    ``head_dim`` or an ALiBi built for its ``num_heads``; returns it."""
    if positional is None:
        return None
    if not isinstance(positional, AttentionPositional):
        raise TypeError(
            f"positional: expected an AttentionPositional (RotaryEmbedding, ALiBi), got "
            f"{type(positional).__name__}; sinusoidal and learned encodings are added to "
            f"the embeddings instead"
        )
    if isinstance(positional, RotaryEmbedding) and positional.head_dim != head_dim:
        raise ValueError(
            f"positional: RotaryEmbedding has head_dim={positional.head_dim}, but this "
            f"attention has head_dim={head_dim}"
        )
    if isinstance(positional, ALiBi) and positional.num_heads != num_heads:
        raise ValueError(
            f"positional: built for {positional.num_heads} heads, attention has {num_heads}"
        )
    return positional


def check_queries(mha: MultiHeadAttention, x: Tensor) -> None:
    """The queries' input ``x`` ``(B, T_q, d_model)``, non-empty."""
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != mha.d_model:
        raise ValueError(f"x: expected shape (B, T_q, d_model={mha.d_model}), got {shape_of(x)}")
    if x.shape[1] == 0:
        raise ValueError(f"x: empty sequence (T_q = 0) in shape {tuple(x.shape)}")


def check_inputs(
    mha: MultiHeadAttention, x: Tensor, context: Tensor | None, value: Tensor | None
) -> None:
    """The inputs of :meth:`attnlab.MultiHeadAttention.forward` without a cross-attention
    cache: ``x`` and, for cross-attention, ``context`` (and ``value``)."""
    check_queries(mha, x)
    if context is None:
        if value is not None:
            raise ValueError("value: given without context; pass context (the keys) too")
        if mha.in_proj is None:
            raise ValueError(
                f"context: required, since kdim={mha.kdim} / vdim={mha.vdim} differ from "
                f"d_model={mha.d_model} (self-attention is impossible)"
            )
        return
    check_context(mha, context, value, x)


def check_context(
    mha: MultiHeadAttention, context: Tensor, value: Tensor | None, x: Tensor | None
) -> None:
    """The keys' input ``context`` ``(B, T_k, kdim)`` (and the values' ``(B, T_k, vdim)``),
    and against the queries ``x`` when given."""
    for name, t, width in (("context", context, mha.kdim), ("value", value, mha.vdim)):
        if t is None:
            continue
        if not isinstance(t, Tensor) or t.dim() != 3 or t.shape[-1] != width:
            raise ValueError(f"{name}: expected shape (B, T_k, {width}), got {shape_of(t)}")
        if x is not None and t.shape[0] != x.shape[0]:
            raise ValueError(
                f"{name}: batch size {t.shape[0]} differs from x's {x.shape[0]} "
                f"(x {tuple(x.shape)}, {name} {tuple(t.shape)})"
            )
        if t.shape[1] == 0:
            raise ValueError(f"{name}: empty sequence (T_k = 0) in shape {tuple(t.shape)}")
        if x is not None and t.dtype != x.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from x's {x.dtype}")
    if value is None and mha.vdim != mha.kdim:
        raise ValueError(f"value: required, since vdim={mha.vdim} differs from kdim={mha.kdim}")
    if value is not None and value.shape[1] != context.shape[1]:
        raise ValueError(
            f"value: length {value.shape[1]} differs from context's {context.shape[1]} "
            f"(context {tuple(context.shape)}, value {tuple(value.shape)})"
        )


def check_cache(cache: object, x: Tensor, context: Tensor | None, offset: int) -> None:
    """A :class:`attnlab.KVCache` given to :meth:`attnlab.MultiHeadAttention.forward`: the
    right kind for ``context``, filled, and holding ``x``'s batch."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache: expected an attnlab KVCache, got {type(cache).__name__}")
    if cache.cross:
        if cache.keys is None:
            raise ValueError(
                "cache: an empty cross-attention cache; build it with memory_cache(context)"
            )
        if context is not None:
            raise ValueError(
                "context: the cross-attention cache already holds the memory's keys and "
                "values; pass context=None with it"
            )
    elif context is not None:
        raise ValueError(
            "cache: a self-attention cache was given with a context; cross-attention takes "
            "KVCache(cross=True) from memory_cache(context)"
        )
    elif offset not in (0, cache.length):
        raise ValueError(
            f"offset: with a cache the positions continue from cache.length={cache.length}; "
            f"got offset={offset}"
        )
    if cache.batch_size is not None and cache.batch_size != x.shape[0]:
        raise ValueError(
            f"cache: holds {cache.batch_size} rows, x has batch size {x.shape[0]} "
            f"(x {tuple(x.shape)})"
        )

"""Attention masks: the one mask convention of attnlab.

Vaswani et al. 2017 use masks twice (sec. 3.2.3): to keep padding out of attention, and to stop
the decoder from looking at later positions ("masking out (setting to -inf) all values in the
input of the softmax which correspond to illegal connections"). The tutorial's T9-T11.

Convention, the same as ``torch.nn.functional.scaled_dot_product_attention``:

* a **boolean** mask holds ``True`` where a query *may attend* to a key;
* a **floating** mask is *added* to the attention scores (``0`` keeps, ``-inf`` blocks).

An attention mask broadcasts to ``(B, H, T_q, T_k)``: ``(B, 1, 1, T_k)`` for key padding,
``(T_q, T_k)`` for a causal mask, ``(B, 1 or H, T_q, T_k)`` once combined.

A padding mask (before it becomes an attention mask) is ``(B, T)`` with ``True`` on real tokens.

``torch.nn.MultiheadAttention`` uses the opposite polarity (``True`` = ignore) for its
``key_padding_mask`` and boolean ``attn_mask``; :func:`from_torch_masks` converts explicitly, and
nothing else in attnlab accepts that polarity.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import torch
from torch import Tensor

from .._checks import check_positive_int, check_type

__all__ = [
    "causal_mask",
    "check_attention_mask",
    "combine_masks",
    "from_torch_masks",
    "key_mask",
    "padding_mask",
    "padding_mask_from_ids",
    "pair_mask",
    "to_additive_mask",
    "to_torch_key_padding_mask",
]


def padding_mask(
    lengths: Tensor | Sequence[int],
    max_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Padding mask from sequence lengths (T9, T10).

    Args:
        lengths: ``(B,)`` integer lengths, each in ``[0, max_len]``.
        max_len: padded length ``T``; defaults to ``max(lengths)``.

    Returns:
        ``(B, T)`` bool, ``True`` on the first ``lengths[b]`` positions (real tokens).

    Example: lengths ``[4, 2]`` give ``[[1, 1, 1, 1], [1, 1, 0, 0]]``.
    """
    if not isinstance(lengths, Tensor):
        lengths = torch.as_tensor(list(lengths), dtype=torch.long, device=device)
    if lengths.dim() != 1:
        raise ValueError(f"lengths: expected a 1-D (B,) tensor, got shape {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(f"lengths: expected an integer tensor, got dtype {lengths.dtype}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths: expected non-negative lengths, got min {int(lengths.min())}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    if max_len < longest:
        raise ValueError(f"max_len: expected >= the longest length {longest}, got {max_len}")
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]


def padding_mask_from_ids(ids: Tensor, pad_id: int) -> Tensor:
    """Padding mask from token ids: ``(B, T)`` ids -> ``(B, T)`` bool, True where not ``pad_id``."""
    if ids.dim() != 2:
        raise ValueError(f"ids: expected a (B, T) tensor, got shape {tuple(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise TypeError(f"ids: expected an integer tensor, got dtype {ids.dtype}")
    return ids != pad_id


def key_mask(padding: Tensor) -> Tensor:
    """Turn a ``(B, T_k)`` padding mask into an attention mask ``(B, 1, 1, T_k)``.

    Every query (and every head) may attend to the real keys only.
    """
    _check_padding(padding, "padding")
    return padding[:, None, None, :]


def pair_mask(query_padding: Tensor, key_padding: Tensor) -> Tensor:
    """Attention mask ``(B, 1, T_q, T_k)`` that blocks padded keys *and* padded queries.

    Rows of padded queries have no allowed key; attnlab's attention returns zeros there. This is
    the square 0/1 picture of T10 (real tokens attend to real tokens only).
    """
    _check_padding(query_padding, "query_padding")
    _check_padding(key_padding, "key_padding")
    if query_padding.shape[0] != key_padding.shape[0]:
        raise ValueError(
            f"query_padding and key_padding: batch sizes differ, "
            f"{tuple(query_padding.shape)} vs {tuple(key_padding.shape)}"
        )
    return (query_padding[:, :, None] & key_padding[:, None, :])[:, None]


def causal_mask(
    t_q: int, t_k: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Look-ahead mask (T11), aligned bottom-right.

    Query ``i`` may attend to key ``j`` when ``j <= i + (t_k - t_q)``: with ``t_q == t_k`` this is
    the lower-triangular matrix of the decoder's masked self-attention; with ``t_q < t_k`` the
    queries are the *last* ``t_q`` positions, which is what cached decoding needs.

    Returns:
        ``(t_q, t_k)`` bool.
    """
    if t_k is None:
        t_k = t_q
    check_positive_int(t_q, "t_q")
    check_positive_int(t_k, "t_k")
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def to_additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Boolean mask -> float mask of ``0`` (may attend) and ``-inf`` (blocked), same shape.

    A floating mask is returned unchanged (it must already have ``dtype``).
    """
    if mask.dtype == torch.bool:
        out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return out.masked_fill_(~mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise TypeError(f"mask: expected bool or floating dtype, got {mask.dtype}")
    if mask.dtype != dtype:
        raise TypeError(f"mask: floating mask has dtype {mask.dtype}, expected {dtype}")
    return mask


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Combine attention masks by broadcasting (``None`` entries are skipped).

    Boolean masks combine with logical AND (a key is allowed when every mask allows it);
    as soon as one mask is floating, boolean ones become ``0/-inf`` and all are added.
    A typical call: ``combine_masks(key_mask(padding), causal_mask(T))`` -> ``(B, 1, T, T)``.

    Returns:
        ``None`` if every mask is ``None``, else a tensor of the broadcast shape.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for i, m in enumerate(present):
        check_type(m, Tensor, f"masks[{i}]", "a Tensor or None")
        if m.dtype != torch.bool and not m.dtype.is_floating_point:
            raise TypeError(f"masks[{i}]: expected bool or floating dtype, got {m.dtype}")
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"masks: shapes {shapes} do not broadcast together") from None
    float_dtypes = {m.dtype for m in present if m.dtype.is_floating_point}
    if not float_dtypes:
        return functools.reduce(operator.and_, present)
    if len(float_dtypes) > 1:
        names = ", ".join(sorted(str(d) for d in float_dtypes))
        raise TypeError(f"masks: floating masks have different dtypes ({names})")
    dtype = float_dtypes.pop()
    return functools.reduce(operator.add, (to_additive_mask(m, dtype) for m in present))


def check_attention_mask(
    mask: Tensor,
    *,
    batch: int,
    heads: int,
    t_q: int,
    t_k: int,
    dtype: torch.dtype,
    device: torch.device | None = None,
    name: str = "mask",
) -> Tensor:
    """Validate an attention mask and return it as a 4-D view broadcastable to ``(B, H, T_q, T_k)``.

    Raises TypeError for an integer mask or a floating mask of another dtype than the scores,
    ValueError for a shape that does not broadcast, or a float mask holding NaN or +inf.
    """
    check_type(mask, Tensor, name, "a Tensor")
    if mask.dtype != torch.bool:
        if not mask.dtype.is_floating_point:
            raise TypeError(
                f"{name}: expected a bool mask (True = may attend) or a floating mask added to "
                f"the scores, got dtype {mask.dtype}"
            )
        if mask.dtype != dtype:
            raise TypeError(
                f"{name}: floating mask has dtype {mask.dtype} but the scores are {dtype}; "
                f"cast it with mask.to({dtype})"
            )
    if device is not None and mask.device != device:
        raise ValueError(f"{name}: on device {mask.device}, but the scores are on {device}")
    target = (batch, heads, t_q, t_k)
    if mask.dim() > 4 or any(
        size not in (1, want) for size, want in zip(mask.shape[::-1], target[::-1], strict=False)
    ):
        raise ValueError(
            f"{name}: shape {tuple(mask.shape)} does not broadcast to (B, H, T_q, T_k) = {target}"
        )
    if mask.dtype != torch.bool and bool((torch.isnan(mask) | torch.isposinf(mask)).any()):
        raise ValueError(f"{name}: floating mask contains NaN or +inf")
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    return mask


def from_torch_masks(
    key_padding_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    *,
    batch_size: int,
    num_heads: int,
    dtype: torch.dtype = torch.float32,
) -> Tensor | None:
    """Convert ``torch.nn.MultiheadAttention`` masks into one attnlab attention mask.

    torch's boolean masks mean ``True`` = *ignore*; attnlab's mean ``True`` = *may attend*.
    Floating masks are additive in both and carry over as they are.

    Args:
        key_padding_mask: ``(B, T_k)``, bool (True = padding) or floating.
        attn_mask: ``(T_q, T_k)`` or ``(B * num_heads, T_q, T_k)``, bool (True = blocked) or
            floating.
        batch_size, num_heads: needed to unflatten a 3-D ``attn_mask``.
        dtype: the dtype of the scores, used when a floating mask is involved.

    Returns:
        ``(B, 1 or H, T_q or 1, T_k)`` mask in attnlab's convention, or ``None``.
    """
    converted: list[Tensor] = []
    if key_padding_mask is not None:
        if key_padding_mask.dim() != 2 or key_padding_mask.shape[0] != batch_size:
            raise ValueError(
                f"key_padding_mask: expected shape (B, T_k) with B={batch_size}, "
                f"got {tuple(key_padding_mask.shape)}"
            )
        converted.append(_flip_torch_mask(key_padding_mask, "key_padding_mask")[:, None, None, :])
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            converted.append(_flip_torch_mask(attn_mask, "attn_mask"))
        elif attn_mask.dim() == 3 and attn_mask.shape[0] == batch_size * num_heads:
            flipped = _flip_torch_mask(attn_mask, "attn_mask")
            converted.append(flipped.view(batch_size, num_heads, *attn_mask.shape[1:]))
        else:
            raise ValueError(
                f"attn_mask: expected (T_q, T_k) or (B * num_heads = {batch_size * num_heads}, "
                f"T_q, T_k), got {tuple(attn_mask.shape)}"
            )
    if any(m.dtype.is_floating_point for m in converted):
        converted = [to_additive_mask(m, dtype) if m.dtype == torch.bool else m for m in converted]
    return combine_masks(*converted)


def to_torch_key_padding_mask(padding: Tensor) -> Tensor:
    """attnlab ``(B, T_k)`` padding (True = real) -> torch ``key_padding_mask`` (True = pad)."""
    _check_padding(padding, "padding")
    return ~padding


def _flip_torch_mask(mask: Tensor, name: str) -> Tensor:
    if mask.dtype == torch.bool:
        return ~mask
    if not mask.dtype.is_floating_point:
        raise TypeError(f"{name}: expected bool or floating dtype, got {mask.dtype}")
    return mask


def _check_padding(padding: Tensor, name: str) -> None:
    if not isinstance(padding, Tensor) or padding.dtype != torch.bool or padding.dim() != 2:
        got = (
            f"{padding.dtype} of shape {tuple(padding.shape)}"
            if isinstance(padding, Tensor)
            else type(padding).__name__
        )
        raise TypeError(f"{name}: expected a (B, T) bool tensor (True = real token), got {got}")

"""What incremental decoding keeps between steps: the keys and values of earlier positions.

Decoding one token at a time (Vaswani et al. 2017, sec. 3.2.3: the decoder is auto-regressive),
the keys and values of earlier positions never change. :class:`KVCache` keeps them for one
attention module, :class:`DecoderCache` for every layer of a :class:`attnlab.nn.layers.Decoder`
(self-attention caches that grow by one position a step, and cross-attention caches that hold
the encoder output's keys and values, projected once per source).

Tensors are batch-first, heads ``(B, H_kv, T, Dh)``. Beam search and batch pruning reorder the
rows with ``select``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_positive_int, shape_of

__all__ = ["DecoderCache", "KVCache"]


class KVCache:
    """Keys and values of one attention module, kept between steps of incremental decoding.

    Decoding one token at a time, the keys and values of earlier positions never change: a
    cache keeps them so that each step projects only its new token (an n-token output then
    costs O(n) projections instead of O(n^2) re-running the whole prefix).

    * Self-attention (``cross=False``): buffers of ``capacity`` positions are allocated on first
      use; each step writes its keys and values in place at ``[length, length + T)`` and
      attends to the view ``[:length + T]``. Nothing is concatenated. Keys are stored after the
      positional transform of their own positions (RoPE), so they are rotated once. Writing past
      ``capacity`` reallocates to twice the size (one copy), so size it to the longest output.
    * Cross-attention (``cross=True``): the keys and values of the encoder output, projected
      once per source (:meth:`attnlab.MultiHeadAttention.memory_cache`) and reused by every
      step.

    Attributes:
        keys, values: ``(B, H_kv, capacity, Dh)`` buffers (None before first use); only
            ``[:, :, :length]`` holds data. :attr:`k` and :attr:`v` are those views.
        length: positions filled; the position of the next token.
        cross: whether it holds cross-attention keys.

    Beam search reorders the rows with :meth:`select`.
    """

    def __init__(self, capacity: int | None = None, *, cross: bool = False) -> None:
        if cross:
            if capacity is not None:
                raise ValueError(
                    "capacity: a cross-attention cache holds the whole memory; leave it None"
                )
        else:
            check_positive_int(capacity, "capacity")
        self.cross = bool(cross)
        self._capacity = capacity
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions the buffers hold before they must grow."""
        return self.keys.shape[2] if self.keys is not None else (self._capacity or 0)

    @property
    def batch_size(self) -> int | None:
        return None if self.keys is None else self.keys.shape[0]

    @property
    def k(self) -> Tensor | None:
        """The cached keys ``(B, H_kv, length, Dh)``, or None when empty."""
        return None if self.keys is None else self.keys[:, :, : self.length]

    @property
    def v(self) -> Tensor | None:
        """The cached values ``(B, H_kv, length, Dv)``, or None when empty."""
        return None if self.values is None else self.values[:, :, : self.length]

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (allocated capacity, not only the filled part)."""
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values) if t is not None)

    def __repr__(self) -> str:
        kind = "cross" if self.cross else "self"
        if self.keys is None:
            return f"KVCache({kind}, empty, capacity={self.capacity})"
        b, h, _, d = self.keys.shape
        return (
            f"KVCache({kind}, batch={b}, kv_heads={h}, head_dim={d}, length={self.length}, "
            f"capacity={self.capacity}, dtype={self.keys.dtype}, device={self.keys.device})"
        )

    def reset(self) -> None:
        """Forget every position (keeps the buffers of a self-attention cache)."""
        self.length = 0
        if self.cross:
            self.keys = self.values = None

    def set(self, k: Tensor, v: Tensor) -> None:
        """Store the memory's keys ``(B, H_kv, S, Dh)`` and values (cross-attention)."""
        if not self.cross:
            raise ValueError("cache: set() is for cross-attention caches; use append()")
        self.keys, self.values, self.length = k, v, k.shape[2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write a step's keys ``(B, H_kv, T, Dh)`` and values at ``[length, length + T)``;
        return every cached key and value so far, ``(B, H_kv, length + T, Dh)`` views."""
        if self.cross:
            raise ValueError("cache: a cross-attention cache is filled once; use set()")
        batch, heads, t, _ = k.shape
        keys, values = self.keys, self.values
        if keys is None or values is None:
            size = max(self._capacity or 0, t)
            keys = self.keys = k.new_empty(batch, heads, size, k.shape[3])
            values = self.values = v.new_empty(batch, heads, size, v.shape[3])
        elif (
            (batch, heads) != tuple(keys.shape[:2])
            or k.shape[3] != keys.shape[3]
            or v.shape[3] != values.shape[3]
            or k.dtype != keys.dtype
            or k.device != keys.device
        ):
            raise ValueError(
                f"cache: holds keys {tuple(keys.shape[:2])} x {keys.shape[3]} "
                f"({keys.dtype}, {keys.device}); got {tuple(k.shape)} ({k.dtype}, "
                f"{k.device}): a cache serves one module and one batch"
            )
        end = self.length + t
        if end > keys.shape[2]:
            keys, values = self._grow(max(end, 2 * keys.shape[2]))
        keys.narrow(2, self.length, t).copy_(k)
        values.narrow(2, self.length, t).copy_(v)
        self.length = end
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)

    def _grow(self, size: int) -> tuple[Tensor, Tensor]:
        """Reallocate the buffers to ``size`` positions, keeping the filled part; return them."""
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:2], size, old.shape[3])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        return self.keys, self.values  # type: ignore[return-value]  # both set just above

    def select(self, index: Tensor) -> None:
        """Keep the rows ``index`` ``(B',)`` in that order (beam search: the beams each new beam
        extends; dropping finished sentences). A same-size reorder copies only the filled part,
        in place."""
        keys, values = self.keys, self.values
        if keys is None or values is None:
            return
        if not isinstance(index, Tensor) or index.dim() != 1 or index.dtype != torch.long:
            raise ValueError(f"index: expected a 1-D int64 tensor of rows, got {shape_of(index)}")
        index = index.to(keys.device)
        if self.cross:
            self.keys, self.values = keys[index], values[index]
        elif index.shape[0] == keys.shape[0]:
            end = self.length
            keys[:, :, :end] = keys[index, :, :end]
            values[:, :, :end] = values[index, :, :end]
        else:
            self.keys, self.values = keys[index], values[index]


class DecoderCache:
    """What a :class:`attnlab.nn.layers.Decoder` keeps between steps of incremental decoding
    (:meth:`attnlab.nn.layers.Decoder.new_cache` builds it).

    Attributes:
        self_attn: one self-attention :class:`KVCache` per layer.
        cross_attn: one cross-attention cache per layer, holding the memory's keys and values
            (projected once per source), or None for a decoder without cross-attention.
        memory_mask: the source's key mask ``(B, 1, 1, S)``, or None.
        real: ``(B, length)`` bool, True where a cached position holds a real token; None while
            every position does. Models set it when a step contains padding (a left-padded
            prompt), so later steps mask those keys.

    Beam search and batch pruning reorder it with :meth:`select`.
    """

    def __init__(
        self,
        self_attn: list[KVCache],
        cross_attn: list[KVCache] | None = None,
        *,
        memory_mask: Tensor | None = None,
    ) -> None:
        self.self_attn = list(self_attn)
        self.cross_attn = None if cross_attn is None else list(cross_attn)
        self.memory_mask = memory_mask
        self.real: Tensor | None = None

    @property
    def length(self) -> int:
        """Positions decoded so far (the position of the next token)."""
        return self.self_attn[0].length

    @property
    def nbytes(self) -> int:
        """Bytes held by the key/value buffers."""
        return sum(c.nbytes for c in self.self_attn + (self.cross_attn or []))

    def __repr__(self) -> str:
        cross = "none" if self.cross_attn is None else f"{self.cross_attn[0].length} positions"
        return (
            f"DecoderCache(layers={len(self.self_attn)}, length={self.length}, "
            f"capacity={self.self_attn[0].capacity}, cross={cross}, "
            f"padded={self.real is not None}, nbytes={self.nbytes})"
        )

    def track_padding(self, real: Tensor) -> Tensor | None:
        """Record which of the next ``T`` positions hold real tokens (``real`` ``(B, T)`` bool);
        return the flags of every position so far ``(B, length + T)``, or None while all are
        real. Call before the step that appends them."""
        if self.real is None:
            if bool(real.all()):
                return None
            self.real = real.new_ones(real.shape[0], self.length)
        self.real = torch.cat([self.real, real], dim=1)  # a (B, T) bool row: negligible
        return self.real

    def select(self, index: Tensor, *, cross: bool = True) -> None:
        """Keep the rows ``index`` ``(B',)`` in that order, in every cache and mask.

        ``cross=False`` leaves the cross-attention caches and memory mask as they are: right
        when ``index`` only permutes rows that share a source (the beams of one sentence), so
        the memory's rows are already the same.
        """
        for c in self.self_attn:
            c.select(index)
        if self.real is not None:
            self.real = self.real[index.to(self.real.device)]
        if not cross:
            return
        for c in self.cross_attn or []:
            c.select(index)
        mask = self.memory_mask
        if mask is not None and mask.shape[0] > 1:
            self.memory_mask = mask[index.to(mask.device)]

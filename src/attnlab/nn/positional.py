"""Positional information: attention alone is blind to order (T7).

Two families:

* added to the token embeddings at the bottom of each stack (Vaswani et al. 2017, sec. 3.5):
  :class:`SinusoidalPositionalEncoding` (the paper's fixed functions) and
  :class:`LearnedPositionalEmbedding` (trained, as BERT and ViT use; T8);
* applied inside attention, given to :class:`attnlab.MultiHeadAttention` as ``positional=``:
  :class:`RotaryEmbedding` (RoPE, Su et al. 2021) rotates queries and keys, :class:`ALiBi`
  (Press et al. 2022) adds a distance penalty to the scores.

Every module takes an ``offset``: the absolute position of the first element, so that a step of
incremental decoding gets the same encoding as the full sequence would.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import check_offset, check_positive_int, shape_of

__all__ = [
    "ALiBi",
    "AttentionPositional",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "sinusoidal_table",
]


def _check_embeddings(x: Tensor, d_model: int) -> None:
    if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != d_model:
        raise ValueError(f"x: expected shape (..., T, d_model={d_model}), got {shape_of(x)}")
    if x.shape[-2] == 0:
        raise ValueError(f"x: empty sequence (T = 0) in shape {tuple(x.shape)}")


class SinusoidalPositionalEncoding(nn.Module):
    """The paper's fixed encoding (Vaswani et al. 2017, sec. 3.5), for any length.

    ``PE(pos, 2i) = sin(pos / base^(2i / d_model))`` and ``PE(pos, 2i + 1) = cos(...)``,
    interleaved as in the paper (even columns sine, odd columns cosine), ``base = 10000``.
    Values are computed in float64 and cached (growing as needed, up to ``max_cached``
    positions; later ones are computed on each call) in float32.

    Shape: ``forward(x)`` with ``x`` of shape ``(..., T, d_model)`` returns
    ``x + PE[offset:offset+T]``.

    Example::

        pe = SinusoidalPositionalEncoding(512)
        h = pe(token_embeddings)            # (B, T, 512)
        step = pe(next_embedding, offset=T)  # (B, 1, 512): position T
    """

    max_cached = 1 << 16

    _cache: Tensor  # a buffer: the table so far, float32

    def __init__(self, d_model: int, *, base: float = 10000.0) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")
        if not base > 1.0:
            raise ValueError(f"base: expected a number > 1, got {base!r}")
        self.d_model = d_model
        self.base = float(base)
        self.register_buffer("_cache", torch.empty(0, d_model), persistent=False)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base:g}"

    def _compute(self, start: int, length: int, device: torch.device | None) -> Tensor:
        position = torch.arange(start, start + length, dtype=torch.float64, device=device)
        two_i = torch.arange(0, self.d_model, 2, dtype=torch.float64, device=device)
        angle = position[:, None] / self.base ** (two_i / self.d_model)  # (T, ceil(d/2))
        table = torch.empty(length, self.d_model, dtype=torch.float64, device=device)
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle[:, : self.d_model // 2])
        return table

    def table(self, length: int, offset: int = 0, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """The encoding of positions ``offset .. offset + length - 1``: ``(length, d_model)``."""
        check_positive_int(length, "length")
        check_offset(offset)
        device = self._cache.device
        end = offset + length
        # A compiled step computes it (a cache that grows would tie the graph to one length).
        if dtype == torch.float64 or torch.compiler.is_compiling() or end > self.max_cached:
            return self._compute(offset, length, device).to(dtype)
        if end > self._cache.shape[0] or self._cache.dtype != torch.float32:
            size = max(1024, 1 << (end - 1).bit_length())
            self._cache = self._compute(0, size, device).to(torch.float32)
        return self._cache[offset:end].to(dtype)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        _check_embeddings(x, self.d_model)
        return x + self.table(x.shape[-2], offset, dtype=x.dtype).to(x.device)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position (T8; BERT, ViT), up to ``max_len`` positions.

    The parameter is ``weight`` of shape ``(max_len, d_model)``, initialised N(0, 0.02^2).
    Positions at or past ``max_len`` have no vector: asking for them is a ValueError.

    Shape: ``forward(x)`` with ``x`` of shape ``(..., T, d_model)`` returns
    ``x + weight[offset:offset+T]``.
    """

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_positive_int(max_len, "max_len")
        check_positive_int(d_model, "d_model")
        self.max_len = max_len
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(max_len, d_model, device=device, dtype=dtype))
        nn.init.normal_(self.weight, std=0.02)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"

    def table(self, length: int, offset: int = 0) -> Tensor:
        """The embeddings of positions ``offset .. offset + length - 1``: ``(length, d_model)``."""
        check_positive_int(length, "length")
        check_offset(offset)
        if offset + length > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + length - 1} exceed max_len={self.max_len} of "
                f"LearnedPositionalEmbedding (sequence length {length}, offset {offset})"
            )
        return self.weight[offset : offset + length]

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        _check_embeddings(x, self.d_model)
        return x + self.table(x.shape[-2], offset)


class AttentionPositional(nn.Module):
    """Base of positional schemes that act inside attention (given to MultiHeadAttention).

    A scheme does up to two things: :meth:`encode` transforms the per-head queries or keys of
    one stretch of positions (RoPE rotates them), and :meth:`score_bias` returns a bias added to
    the scores (ALiBi). Keeping the two apart lets a KV cache encode each step's keys once, as
    they are stored, while the bias spans every cached key.
    """

    def encode(self, x: Tensor, *, offset: int = 0) -> Tensor:
        """Queries or keys ``(..., T, head_dim)`` at positions ``offset .. offset + T - 1``;
        unchanged by default."""
        return x

    def score_bias(
        self,
        t_q: int,
        t_k: int,
        *,
        q_offset: int,
        k_offset: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> Tensor | None:
        """A float bias broadcastable to ``(B, H, t_q, t_k)``, or None (the default)."""
        return None

    def adjust(
        self, q: Tensor, k: Tensor, *, q_offset: int, k_offset: int
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Return ``(q, k, bias)``: ``q`` ``(B, H, T_q, Dh)`` and ``k`` ``(B, H_kv, T_k, Dh)``
        through :meth:`encode`, and :meth:`score_bias` for them."""
        bias = self.score_bias(
            q.shape[-2],
            k.shape[-2],
            q_offset=q_offset,
            k_offset=k_offset,
            dtype=q.dtype,
            device=q.device,
        )
        return self.encode(q, offset=q_offset), self.encode(k, offset=k_offset), bias


class RotaryEmbedding(AttentionPositional):
    """Rotary position embedding (RoPE; Su et al. 2021, RoFormer, eq. 34).

    Each pair of channels ``(x[i], x[i + Dh/2])`` (the "rotate-half" layout of GPT-NeoX and
    LLaMA) is rotated by the angle ``pos * base^(-2i / Dh)``. Rotating queries and keys by their
    positions makes every score ``q_m . k_n`` a function of ``m - n`` only.

    Shape: :meth:`rotate` takes ``(..., T, head_dim)`` and returns the same shape.
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0) -> None:
        super().__init__()
        check_positive_int(head_dim, "head_dim")
        if head_dim % 2:
            raise ValueError(f"head_dim: RoPE rotates channel pairs, expected even, got {head_dim}")
        if not base > 1.0:
            raise ValueError(f"base: expected a number > 1, got {base!r}")
        self.head_dim = head_dim
        self.base = float(base)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base:g}"

    def angles(
        self, length: int, offset: int = 0, *, device: torch.device | str | None = None
    ) -> Tensor:
        """Rotation angles ``(length, head_dim / 2)`` in float64 for positions from ``offset``."""
        check_positive_int(length, "length")
        check_offset(offset)
        position = torch.arange(offset, offset + length, dtype=torch.float64, device=device)
        two_i = torch.arange(0, self.head_dim, 2, dtype=torch.float64, device=device)
        return position[:, None] * self.base ** (-two_i / self.head_dim)

    def rotate(self, x: Tensor, *, offset: int = 0) -> Tensor:
        """Rotate ``x`` ``(..., T, head_dim)`` as the positions ``offset .. offset + T - 1``."""
        if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != self.head_dim:
            raise ValueError(
                f"x: expected shape (..., T, head_dim={self.head_dim}), got {shape_of(x)}"
            )
        angle = self.angles(x.shape[-2], offset, device=x.device)
        cos = torch.cos(angle).to(x.dtype)  # (T, Dh/2)
        sin = torch.sin(angle).to(x.dtype)
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def encode(self, x: Tensor, *, offset: int = 0) -> Tensor:
        return self.rotate(x, offset=offset)


class ALiBi(AttentionPositional):
    """Attention with linear biases (ALiBi; Press et al. 2022).

    Head ``h`` adds ``-m_h * |i - j|`` to the score of query position ``i`` and key position
    ``j``; the slopes ``m_h`` form the geometric sequence of the paper (``2^(-8 h / H)`` for ``H`` a
    power of two, interleaved from the next power of two otherwise). Under a causal mask this is
    exactly the paper's ``-m_h (i - j)``; without one the penalty is symmetric.

    Shape: :meth:`bias` returns ``(1, H, T_q, T_k)``.
    """

    slope: Tensor  # a buffer: (H,) the heads' slopes

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        check_positive_int(num_heads, "num_heads")
        self.num_heads = num_heads
        self.register_buffer("slope", self._slope_buffer(), persistent=False)

    def _slope_buffer(self) -> Tensor:
        return torch.tensor(self.slopes(self.num_heads), dtype=torch.float64)

    def reset_buffers(self) -> None:
        """Compute the slopes again (they are not saved; a model loaded on the meta device
        calls this)."""
        self.slope = self._slope_buffer()

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"

    @staticmethod
    def slopes(num_heads: int) -> list[float]:
        """The per-head slopes ``m_h`` of Press et al. (2022), ``h = 1 .. num_heads``."""
        check_positive_int(num_heads, "num_heads")

        def geometric(n: int) -> list[float]:
            start = 2.0 ** (-8.0 / n)
            return [start ** (h + 1) for h in range(n)]

        power = 1 << (num_heads.bit_length() - 1)  # largest power of two <= num_heads
        if power == num_heads:
            return geometric(num_heads)
        return geometric(power) + geometric(2 * power)[0::2][: num_heads - power]

    def bias(
        self,
        t_q: int,
        t_k: int,
        *,
        q_offset: int | None = None,
        k_offset: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> Tensor:
        """Score bias ``(1, H, t_q, t_k)``. Queries default to the last ``t_q`` of the keys'
        positions (``q_offset = k_offset + t_k - t_q``), as in cached decoding."""
        check_positive_int(t_q, "t_q")
        check_positive_int(t_k, "t_k")
        check_offset(k_offset)
        if q_offset is None:
            q_offset = max(k_offset + t_k - t_q, 0)
        check_offset(q_offset)
        device = self.slope.device
        # float32 holds the integer distances exactly (below 2^24): no float64 (H, T, T) temp
        work = torch.float64 if dtype == torch.float64 else torch.float32
        q_pos = torch.arange(q_offset, q_offset + t_q, dtype=work, device=device)
        k_pos = torch.arange(k_offset, k_offset + t_k, dtype=work, device=device)
        distance = (q_pos[:, None] - k_pos[None, :]).abs_()  # (T_q, T_k)
        slope = self.slope.to(work)[:, None, None]
        return (distance * -slope).to(dtype)[None]  # (1, H, T_q, T_k)

    def score_bias(
        self,
        t_q: int,
        t_k: int,
        *,
        q_offset: int,
        k_offset: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> Tensor:
        bias = self.bias(t_q, t_k, q_offset=q_offset, k_offset=k_offset, dtype=dtype)
        return bias if device is None else bias.to(device)

    def adjust(
        self, q: Tensor, k: Tensor, *, q_offset: int, k_offset: int
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        if q.shape[1] != self.num_heads:
            raise ValueError(
                f"q: ALiBi was built for {self.num_heads} heads, got {q.shape[1]} in shape "
                f"{tuple(q.shape)}"
            )
        return super().adjust(q, k, q_offset=q_offset, k_offset=k_offset)


def sinusoidal_table(length: int, d_model: int, *, base: float = 10000.0) -> Tensor:
    """Closed-form float64 table of the paper's encoding, ``(length, d_model)``; for reference
    and pictures (the module caches the same values in float32)."""
    return SinusoidalPositionalEncoding(d_model, base=base).table(length, dtype=torch.float64)

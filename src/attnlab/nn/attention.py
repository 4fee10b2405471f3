"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, sec. 3.2).

``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`` (eq. 1; the tutorial's T2, T3), and
``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with
``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` (sec. 3.2.2; T4).

Masks follow :mod:`attnlab.nn.masks`: bool ``True`` = may attend, floating masks are added to the
scores. A query with no key it may attend to gets a zero output and zero weights, never NaN, in
forward and backward.

Speed: without ``return_weights`` / ``need_weights`` the work goes to
``torch.nn.functional.scaled_dot_product_attention`` (on CPU its flash kernel, which never
materialises the ``T_q x T_k`` score matrix); asking for the weights takes an explicit path that
computes the same numbers and returns them. Attention dropout on CPU also takes the explicit
path: torch's SDPA has no fused CPU kernel with dropout either (it falls back to its math path,
which materialises the scores too), and attnlab's dropout draws its mask faster.

Beside this module: :mod:`attnlab.nn.cache` (:class:`KVCache`, for incremental decoding),
:mod:`attnlab.nn.torch_nn` (the copies to and from ``torch.nn.MultiheadAttention``
behind :meth:`MultiHeadAttention.from_torch` / ``to_torch``) and the argument checks.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_positive_int, check_type, is_int, shape_of
from .._ops import dropout
from .cache import KVCache
from .masks import causal_mask, check_attention_mask, combine_masks
from .positional import ALiBi, AttentionPositional, RotaryEmbedding
from .torch_nn import attention_kwargs, attention_to_torch, copy_attention

__all__ = ["MultiHeadAttention", "scaled_dot_product_attention"]


def _torch_sdpa_has_gqa() -> bool:
    try:
        x = torch.zeros(1, 2, 1, 2)
        F.scaled_dot_product_attention(x, x[:, :1], x[:, :1], enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


_SDPA_GQA = _torch_sdpa_has_gqa()


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Eq. 1 of Vaswani et al. 2017: ``softmax(q k^T * scale + mask) v``.

    Args:
        q: queries ``(B, H, T_q, Dh)``.
        k: keys ``(B, H_kv, T_k, Dh)``; ``H_kv`` divides ``H`` (grouped-query attention shares
            each key/value head among ``H / H_kv`` query heads).
        v: values ``(B, H_kv, T_k, Dv)``.
        mask: bool (True = may attend) or floating (added to the scores, same dtype as ``q``),
            broadcastable to ``(B, H, T_q, T_k)``.
        is_causal: also apply the look-ahead mask, aligned bottom-right: query ``i`` sees keys
            ``j <= i + T_k - T_q`` (see :func:`attnlab.nn.masks.causal_mask`).
        dropout_p: dropout on the attention weights (pass 0 in evaluation); on CPU it takes
            the explicit path, with :func:`attnlab._ops.dropout`.
        scale: score scale; default ``1 / sqrt(Dh)`` (the paper's, T3).
        return_weights: also return the weights; uses the explicit path.

    Returns:
        ``out`` of shape ``(B, H, T_q, Dv)``, or ``(out, weights)`` with weights
        ``(B, H, T_q, T_k)`` when ``return_weights``. The returned weights are the ones applied to
        ``v`` (after dropout, as torch.nn.MultiheadAttention returns them), so
        ``out == weights @ v``. Rows with no allowed key are zero in both.
    """
    check_qkv(q, k, v)
    if scale is not None and not (
        isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0
    ):
        raise ValueError(f"scale: expected a positive finite number, got {scale!r}")
    if not (isinstance(dropout_p, (int, float)) and 0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    return _attention(q, k, v, mask, is_causal, dropout_p, scale, return_weights)


def _attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    dropout_p: float,
    scale: float | None,
    return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`scaled_dot_product_attention` after its argument checks (MultiHeadAttention's
    tensors are right by construction; a mask is still checked)."""
    batch, heads, t_q, head_dim = q.shape
    t_k = k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    if mask is not None:
        mask = check_attention_mask(
            mask, batch=batch, heads=heads, t_q=t_q, t_k=t_k, dtype=q.dtype, device=q.device
        )

    if is_causal and t_q == 1:
        is_causal = False  # bottom-right aligned, the one query is the last: it sees every key
    # With dropout on CPU torch's SDPA takes its unfused math path (with bernoulli_ dropout);
    # the explicit path computes the same with attnlab's faster dropout (see _ops.dropout).
    explicit = return_weights or (dropout_p > 0.0 and q.device.type == "cpu")
    # torch's is_causal is aligned top-left; it agrees with ours only for square scores.
    torch_causal = is_causal and mask is None and t_q == t_k and not explicit
    if is_causal and not torch_causal:
        mask = combine_masks(mask, causal_mask(t_q, t_k, device=q.device))

    # Rows with no allowed key: let them attend everywhere (finite softmax and gradients), then
    # zero their output and weights, so neither forward nor backward ever sees NaN.
    keep_rows = None
    if mask is not None:
        allowed = mask if mask.dtype == torch.bool else ~torch.isneginf(mask)
        has_key = allowed.any(dim=-1, keepdim=True)  # (.., T_q, 1), as small as the mask
        # One host sync, which skips all the extra work in the usual case; a compiled step
        # cannot branch on values and always does it.
        if torch.compiler.is_compiling() or not bool(has_key.all()):
            keep_rows = has_key
            mask = mask | ~has_key if mask.dtype == torch.bool else mask.masked_fill(~has_key, 0.0)

    if explicit:
        out, weights = _attention_with_weights(q, k, v, mask, dropout_p, scale)
        if keep_rows is not None:
            out = out.masked_fill(~keep_rows, 0.0)
            weights = weights.masked_fill(~keep_rows, 0.0)
        return (out, weights) if return_weights else out

    extra = {}
    if k.shape[1] != heads:
        if _SDPA_GQA:
            extra["enable_gqa"] = True
        else:
            k, v = _repeat_kv(k, v, heads)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=torch_causal, scale=scale, **extra
    )
    if keep_rows is not None:
        out = out.masked_fill(~keep_rows, 0.0)
    return out


def _repeat_kv(k: Tensor, v: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    group = heads // k.shape[1]
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def _attention_with_weights(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, scale: float
) -> tuple[Tensor, Tensor]:
    """The explicit path of eq. 1, materialising the (B, H, T_q, T_k) weights."""
    if k.shape[1] != q.shape[1]:
        k, v = _repeat_kv(k, v, q.shape[1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, T_q, T_k)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    weights = torch.softmax(scores, dim=-1)
    weights = dropout(weights, dropout_p, training=True)  # the caller passes 0 in evaluation
    return torch.matmul(weights, v), weights  # (B, H, T_q, Dv)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, sec. 3.2.2; the tutorial's T4), batch-first.

    The input is projected to queries, keys and values, split evenly into ``num_heads`` heads of
    ``head_dim = d_model / num_heads`` channels, attended per head, concatenated, and projected by
    ``W^O`` (``out_proj``). Self-attention uses one fused ``(d_model + 2 kv_dim) x d_model``
    projection (``in_proj``); cross-attention (``context`` given) applies its query rows to ``x``
    and its key/value rows to ``context``. With ``kdim`` or ``vdim`` different from ``d_model``
    the projections are separate (``q_proj``, ``k_proj``, ``v_proj``), as in torch.

    Args:
        d_model: model width ``E``; divisible by ``num_heads``.
        num_heads: ``H``.
        num_kv_heads: key/value heads for grouped-query (``1 < H_kv < H``) or multi-query
            (``H_kv = 1``) attention; default ``H`` (the paper's).
        dropout: dropout on the attention weights in training.
        bias: biases in the input and output projections.
        kdim, vdim: widths of the key and value inputs; default ``d_model``.
        positional: a :class:`attnlab.nn.positional.AttentionPositional` (RoPE, ALiBi) applied to
            self-attention.

    Shape:
        ``forward(x (B, T_q, E), context (B, T_k, kdim) or None) ->
        (out (B, T_q, E), weights (B, H, T_q, T_k), (B, T_q, T_k) or None)``.

    Example::

        mha = MultiHeadAttention(512, 8)
        out, _ = mha(x, mask=key_mask(padding))          # self-attention
        out, w = mha(y, x, need_weights=True)            # cross-attention, with weights
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        positional: AttentionPositional | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        num_kv_heads = check_heads(d_model, num_heads, num_kv_heads)
        if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
            raise ValueError(f"dropout: expected a number in [0, 1), got {dropout!r}")
        kdim = d_model if kdim is None else kdim
        vdim = d_model if vdim is None else vdim
        check_positive_int(kdim, "kdim")
        check_positive_int(vdim, "vdim")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_model // num_heads
        self.kv_dim = num_kv_heads * self.head_dim
        self.dropout = float(dropout)
        self.kdim, self.vdim = kdim, vdim
        self.positional = check_positional(positional, num_heads, self.head_dim)

        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        # One fused projection when the inputs share d_model, else three (then in_proj is None;
        # with it, the three are None).
        self.in_proj: nn.Linear | None
        self.q_proj: nn.Linear
        self.k_proj: nn.Linear
        self.v_proj: nn.Linear
        if kdim == d_model and vdim == d_model:
            self.in_proj = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias, **factory)
            self.q_proj = self.k_proj = self.v_proj = None  # type: ignore[assignment]
        else:
            self.in_proj = None
            self.q_proj = nn.Linear(d_model, d_model, bias=bias, **factory)
            self.k_proj = nn.Linear(kdim, self.kv_dim, bias=bias, **factory)
            self.v_proj = nn.Linear(vdim, self.kv_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch.nn.MultiheadAttention's initialisation: Xavier-uniform input projection(s),
        zero biases, default Linear init for ``W^O`` with a zero bias."""
        projections = (
            [self.in_proj] if self.in_proj is not None else [self.q_proj, self.k_proj, self.v_proj]
        )
        for proj in projections:
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        self.out_proj.reset_parameters()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        parts = [f"d_model={self.d_model}", f"num_heads={self.num_heads}"]
        if self.num_kv_heads != self.num_heads:
            parts.append(f"num_kv_heads={self.num_kv_heads}")
        if self.dropout:
            parts.append(f"dropout={self.dropout}")
        if self.in_proj is None:
            parts.append(f"kdim={self.kdim}, vdim={self.vdim}")
        return ", ".join(parts)

    def project(
        self, x: Tensor, context: Tensor | None = None, *, value: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The per-head queries, keys and values, ``Q W_i^Q``, ``K W_i^K``, ``V W_i^V`` of sec.
        3.2.2, as :meth:`forward` computes them before attending.

        Args: ``x``, ``context`` and ``value`` as in :meth:`forward` (``context=None`` for
        self-attention).

        Returns:
            ``(q, k, v)``: q ``(B, H, T_q, Dh)``, k and v ``(B, H_kv, T_k, Dh)``; before the
            positional transform (RoPE, which :meth:`forward` applies next) and the scaling.
        """
        check_inputs(self, x, context, value)
        return self._project(x, context, value)

    def _project(
        self, x: Tensor, context: Tensor | None, value: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Input projections split into heads: q ``(B, H, T_q, Dh)``, k and v
        ``(B, H_kv, T_k, Dh)``."""
        e, kv = self.d_model, self.kv_dim
        if context is None and self.in_proj is not None:
            q, k, v = self.in_proj(x).split((e, kv, kv), dim=-1)  # one GEMM for q, k, v
        else:
            q = self._project_queries(x)
            k, v = self._project_memory(context, value)  # type: ignore[arg-type]  # not None here
        heads, kv_heads = self.num_heads, self.num_kv_heads
        return self._heads(q, heads), self._heads(k, kv_heads), self._heads(v, kv_heads)

    def _project_queries(self, x: Tensor) -> Tensor:
        if self.in_proj is None:
            return self.q_proj(x)
        e, b = self.d_model, self.in_proj.bias
        return F.linear(x, self.in_proj.weight[:e], None if b is None else b[:e])

    def _project_memory(self, context: Tensor, value: Tensor | None) -> tuple[Tensor, Tensor]:
        """Keys and values ``(B, T_k, kv_dim)`` of the cross-attention input."""
        if self.in_proj is None:
            return self.k_proj(context), self.v_proj(context if value is None else value)
        e, kv = self.d_model, self.kv_dim
        w, bias = self.in_proj.weight[e:], self.in_proj.bias
        b = None if bias is None else bias[e:]
        if value is None:
            k, v = F.linear(context, w, b).split((kv, kv), dim=-1)  # one GEMM for k, v
            return k, v
        return (
            F.linear(context, w[:kv], None if b is None else b[:kv]),
            F.linear(value, w[kv:], None if b is None else b[kv:]),
        )

    def _heads(self, t: Tensor, heads: int) -> Tensor:
        """``(B, T, heads * Dh) -> (B, heads, T, Dh)``."""
        return t.view(t.shape[0], t.shape[1], heads, self.head_dim).transpose(1, 2)

    def memory_cache(self, context: Tensor, value: Tensor | None = None) -> KVCache:
        """Project the cross-attention input once: a filled cross-attention :class:`KVCache`
        for ``context`` ``(B, S, kdim)`` (and ``value`` ``(B, S, vdim)`` when it differs), which
        :meth:`forward` then uses instead of a context at every decoding step."""
        check_context(self, context, value, None)
        k, v = self._project_memory(context, value)
        cache = KVCache(cross=True)
        cache.set(self._heads(k, self.num_kv_heads), self._heads(v, self.num_kv_heads))
        return cache

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        value: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_weights: bool = False,
        offset: int = 0,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` to itself, or to ``context`` (cross-attention).

        Args:
            x: queries' input ``(B, T_q, d_model)``.
            context: keys' (and values') input ``(B, T_k, kdim)``; ``None`` for self-attention.
            value: values' input ``(B, T_k, vdim)`` when it differs from ``context``.
            mask: attention mask (:mod:`attnlab.nn.masks`), broadcastable to ``(B, H, T_q, T_k)``.
            is_causal: add the look-ahead mask (decoder self-attention), aligned bottom-right
                (the last query sees every key).
            need_weights: also return the attention weights.
            average_weights: return their mean over heads, ``(B, T_q, T_k)``.
            offset: absolute position of the first element, for ``positional`` (RoPE, ALiBi).
            cache: incremental decoding (:class:`KVCache`). A self-attention cache appends this
                step's keys and values and attends to all of them (``T_k = cache.length``
                after the call; positions continue from the cache's length); a cross-attention
                cache from :meth:`memory_cache` replaces ``context``, which must be None.

        Returns:
            ``(out, weights)``: ``out`` ``(B, T_q, d_model)``; ``weights`` ``(B, H, T_q, T_k)``
            (or ``(B, T_q, T_k)`` averaged), or ``None`` without ``need_weights``.
        """
        cross_cache = isinstance(cache, KVCache) and cache.cross
        if cross_cache:
            check_queries(self, x)
            if value is not None:
                raise ValueError("value: the cross-attention cache already holds the values")
        else:
            check_inputs(self, x, context, value)
        if cache is not None:
            check_cache(cache, x, context, offset)
        if average_weights and not need_weights:
            raise ValueError("average_weights: only meaningful with need_weights=True")
        batch, t_q, _ = x.shape
        heads = self.num_heads
        k: Tensor
        v: Tensor
        if cross_cache:
            q = self._heads(self._project_queries(x), heads)  # (B, H, T_q, Dh)
            k, v = cache.k, cache.v  # type: ignore[union-attr, assignment]  # (B, H_kv, S, Dh)
        else:
            q, k, v = self._project(x, context, value)  # (B, H, T_q, Dh), (B, H_kv, T_k, Dh) x2
        self_cache = cache is not None and not cross_cache
        positional = self.positional if context is None and not cross_cache else None
        # Positions: x starts at `start`; the keys start at `key_start` (0 with a cache).
        start, key_start = (cache.length, 0) if self_cache else (offset, offset)  # type: ignore[union-attr]
        if positional is not None:
            q = positional.encode(q, offset=start)
            k = positional.encode(k, offset=start)  # a cache stores them encoded
        if self_cache:
            k, v = cache.append(k, v)  # type: ignore[union-attr]  # every key so far: (B, H_kv, length, Dh)
        t_k = k.shape[2]
        if positional is not None:
            bias = positional.score_bias(
                t_q, t_k, q_offset=start, k_offset=key_start, dtype=x.dtype, device=x.device
            )
            if bias is not None:
                if mask is not None:  # check the caller's mask before the bias is merged into it
                    mask = check_attention_mask(
                        mask, batch=batch, heads=heads, t_q=t_q, t_k=t_k, dtype=x.dtype
                    )
                mask = combine_masks(mask, bias)

        dropout_p = self.dropout if self.training else 0.0
        result: Any = _attention(q, k, v, mask, is_causal, dropout_p, None, need_weights)
        out, weights = result if need_weights else (result, None)
        out = out.transpose(1, 2).reshape(batch, t_q, self.d_model)  # concat heads (B, T_q, E)
        out = self.out_proj(out)  # W^O
        if weights is not None and average_weights:
            weights = weights.mean(dim=1)
        return out, weights

    # -- interop with torch.nn.MultiheadAttention (attnlab.nn.torch_nn) -------------------------

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Weight-exact copy of a ``torch.nn.MultiheadAttention`` (either ``batch_first``).

        The result is batch-first, on the same device and dtype, in the same train/eval mode.
        torch's masks use the opposite polarity: convert them with
        :func:`attnlab.nn.masks.from_torch_masks`.
        """
        new = cls(**attention_kwargs(module))
        copy_attention(new, module)
        return new.train(module.training)

    def to_torch(self, *, batch_first: bool = True) -> nn.MultiheadAttention:
        """Weight-exact ``torch.nn.MultiheadAttention`` with the same computation."""
        return attention_to_torch(self, batch_first=batch_first)


# -- argument checks: each error names the argument, the expected shape (B batch, T_q / T_k
# query and key lengths, H heads, Dh head width) and the shape given ----------------------------


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
    if not is_int(num_kv_heads) or num_kv_heads < 1 or num_heads % num_kv_heads:
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
    cache = check_type(cache, KVCache, "cache", "an attnlab KVCache")
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

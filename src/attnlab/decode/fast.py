"""The lean decoder step behind :mod:`attnlab.decode.search`: its fast path.

:meth:`attnlab.Transformer.decode` with a :class:`attnlab.nn.cache.DecoderCache` is the readable
reference of incremental decoding. :class:`FastDecoder` computes the same numbers (tested equal,
outputs and caches, in ``tests/decode/test_fastdecode.py``) with fewer, larger ops and nothing
else on the hot path, since at batch 1 a step is a few hundred small ops around 19 MB of weights:

* weights packed once per model and parameter version (:func:`pack`): each linear map
  pre-transposed for ``torch.addmm``, the ``1 / sqrt(d_k)`` score scale (eq. 1) folded into the
  query rows, the memory's key/value projections of every layer fused into one matrix (the
  memory is projected once per batch, in one GEMM);
* one preallocated key/value store for the whole decoder, written in place;
* attention for one new query as ``bmm -> softmax -> bmm`` on views of the store, with no mask
  for greedy decoding and no padding check per step;
* beam search without reordering the cache: each beam writes its own slot at each position, a
  sentence's beams attend together to all of its slots, and a small additive ancestry mask
  (``(rows, positions, beams)`` floats) hides the others; only that mask is reordered. The
  memory's keys and values are stored once per sentence, not once per beam.

Optional int8 weights (``quantize="int8"``): every decoder linear map and the output projection
run as torch's dynamic-quantized linear (FBGEMM: int8 weights with a scale per output channel,
activations quantized per call to 7 bits); the encoder stays float32. Activations share one
scale per call over the batch, so an int8 output may depend on its batch (float32 ones do not).

:func:`why_not_fast_path` says why a model takes the reference path instead ("" when it does
not), in the manner of torch.nn.MultiheadAttention's ``why_not_sparsity_fast_path``. The step is
not compiled: ``torch.compile`` of it recompiles at every position and is slower on CPU, see
docs/benchmarks.md ("Decoding").
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from .._checks import check_choice
from ..models.transformer import Transformer
from ..nn.layers import ACTIVATIONS, DecoderLayer, FeedForward
from ..nn.positional import ALiBi, RotaryEmbedding

__all__ = ["QUANTIZATIONS", "FastDecoder", "check_quantize", "pack", "why_not_fast_path"]

_Linear = Callable[[Tensor], Tensor]

#: Weight types of :func:`pack` besides float (None).
QUANTIZATIONS = ("int8",)


def check_quantize(quantize: object) -> str | None:
    """``quantize`` if it is None or one of :data:`QUANTIZATIONS`, else a ValueError."""
    result: str | None = check_choice(quantize, QUANTIZATIONS, "quantize", none=True)
    return result


def why_not_fast_path(model: object, quantize: str | None = None) -> str:
    """Why ``model`` cannot decode on the fast path (with ``quantize`` weights): one line, or
    ``""`` when it can.

    The fast path serves :class:`attnlab.Transformer` (the encoder-decoder) built from its
    config, with any positional kind, pre- or post-LN, grouped-query attention, any activation,
    with or without biases; not a subclass that overrides decoding, nor a model with forward
    hooks (the fast step would skip them). Int8 weights need a float32 model on the CPU.
    """
    check_quantize(quantize)
    if not isinstance(model, Transformer):
        return (
            f"model: the fast step serves the encoder-decoder Transformer; "
            f"{type(model).__name__} takes the reference path"
        )
    for name in ("decode", "_decode", "new_cache", "encode"):
        if getattr(type(model), name) is not getattr(Transformer, name):
            return f"model: {type(model).__name__} overrides {name}()"
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return f"model: forward hooks on {name or 'the model'} (the fast step skips modules)"
    decoder = model.decoder
    for i, layer in enumerate(decoder.layers):
        if type(layer) is not DecoderLayer or type(layer.ff) is not FeedForward:
            return f"decoder.layers.{i}: {type(layer).__name__} is not attnlab's DecoderLayer"
        if layer.cross_attn is None:
            return f"decoder.layers.{i}: no cross-attention"
        for attn_name in ("self_attn", "cross_attn"):
            attn = getattr(layer, attn_name)
            if attn.in_proj is None:
                return f"decoder.layers.{i}.{attn_name}: separate kdim/vdim projections"
            if attn.positional is not None and not isinstance(
                attn.positional, (RotaryEmbedding, ALiBi)
            ):
                return f"decoder.layers.{i}.{attn_name}: positional {type(attn.positional)}"
        if layer.ff.activation not in ACTIVATIONS:
            return f"decoder.layers.{i}: activation {layer.ff.activation!r}"
    parameter = next(model.parameters())
    if not parameter.dtype.is_floating_point:
        return f"model: parameters of dtype {parameter.dtype}"
    if quantize == "int8":
        if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return (
                f"quantize='int8': needs a float32 model on the CPU, got {parameter.dtype} on "
                f"{parameter.device}"
            )
        if "fbgemm" not in torch.backends.quantized.supported_engines:
            return "quantize='int8': this torch build has no FBGEMM quantized engine"
    return ""


# -- packed weights ----------------------------------------------------------------------------


def _dense(weight: Tensor, bias: Tensor | None) -> _Linear:
    """``x -> x @ W^T + b`` with ``W^T`` stored contiguous ``(in, out)``: a C-level partial of
    ``torch.addmm`` (no Python frame per call)."""
    weight_t = weight.detach().t().contiguous()
    if bias is None:
        return partial(torch.mm, mat2=weight_t)
    return partial(torch.addmm, bias.detach().clone(), mat2=weight_t)


def _int8(weight: Tensor, bias: Tensor | None) -> _Linear:
    """``x -> x @ W^T + b`` with int8 weights (symmetric, a scale per output row) and the input
    quantized per call (FBGEMM's dynamic-quantized linear)."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1).clamp_min(1e-12) / 127.0).double()
    zero = torch.zeros(w.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
        b = None if bias is None else bias.detach().float()
        packed = torch.ops.quantized.linear_prepack(q, b)
    # reduce_range: 7-bit activations, so that AVX2's u8 x s8 pair sums cannot saturate.
    return partial(torch.ops.quantized.linear_dynamic, W_prepack=packed, reduce_range=True)


def _norm(norm: nn.LayerNorm) -> Callable[[Tensor], Tensor]:
    weight = None if norm.weight is None else norm.weight.detach()
    bias = None if norm.bias is None else norm.bias.detach()
    shape = tuple(norm.normalized_shape)
    return partial(torch.layer_norm, normalized_shape=shape, weight=weight, bias=bias, eps=norm.eps)


class _Layer:
    """One decoder layer's weights, laid out for the step."""

    def __init__(self, layer: DecoderLayer, make: Callable[..., _Linear]) -> None:
        attn, cross = layer.self_attn, layer.cross_attn
        d, kv = attn.d_model, attn.kv_dim
        scale = 1.0 / math.sqrt(attn.head_dim)  # eq. 1, folded into the query rows
        w, b = attn.in_proj.weight.detach(), attn.in_proj.bias
        w = torch.cat([w[:d] * scale, w[d:]])
        b = None if b is None else torch.cat([b.detach()[:d] * scale, b.detach()[d:]])
        self.qkv = make(w, b)
        self.out = make(attn.out_proj.weight, attn.out_proj.bias)
        cw, cb = cross.in_proj.weight.detach(), cross.in_proj.bias
        self.cross_q = make(cw[:d] * scale, None if cb is None else cb.detach()[:d] * scale)
        self.cross_out = make(cross.out_proj.weight, cross.out_proj.bias)
        self.ff1 = make(layer.ff.linear1.weight, layer.ff.linear1.bias)
        self.ff2 = make(layer.ff.linear2.weight, layer.ff.linear2.bias)
        name = layer.ff.activation  # ReLU in place: its input is a fresh GEMM output
        self.activation = torch.relu_ if name == "relu" else ACTIVATIONS[name]
        self.norms = (_norm(layer.norm1), _norm(layer.norm2), _norm(layer.norm3))
        self.cross_kv_weight = cw[d:]  # (2 kv, d), fused over layers by _Packed
        self.cross_kv_bias = None if cb is None else cb.detach()[d:]
        self.kv = kv


class _Packed:
    """Everything :class:`FastDecoder` reads from a model, built once (see :func:`pack`)."""

    def __init__(self, model: Transformer, quantize: str | None) -> None:
        c = model.config
        make = _int8 if quantize == "int8" else _dense
        with torch.no_grad():
            layers = list(model.decoder.layers)
            self.layers = [_Layer(layer, make) for layer in layers]
            first = layers[0].self_attn
            self.d_model, self.heads, self.kv_heads = c.d_model, first.num_heads, first.num_kv_heads
            self.head_dim = first.head_dim
            self.norm_first = layers[0].norm_first
            # The memory's keys and values for every layer: one (L * 2 kv, d) projection.
            w = torch.cat([p.cross_kv_weight for p in self.layers])
            biases = [p.cross_kv_bias for p in self.layers]
            bias = None if biases[0] is None else torch.cat(biases)
            self.cross_kv = make(w, bias)
            for p in self.layers:
                p.cross_kv_weight = p.cross_kv_bias = None
            self.final_norm = None if model.decoder.norm is None else _norm(model.decoder.norm)
            self.head = make(model.lm_head.weight, model.lm_head.bias)
            embed = model.tgt_embed
            self.token = embed.token.weight.detach()
            self.scale = embed.scale
            self.embedding_norm = None if embed.norm is None else _norm(embed.norm)
            self.positional = c.positional
            self.learned = embed.position.weight.detach() if c.positional == "learned" else None
            self.sinusoidal = embed.position if c.positional == "sinusoidal" else None
            self.rotary = (
                first.positional if isinstance(first.positional, RotaryEmbedding) else None
            )
            self.alibi = first.positional if isinstance(first.positional, ALiBi) else None
        self.quantize = quantize


_PACKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _version(model: nn.Module) -> tuple:
    """Changes whenever a parameter is replaced or modified in place."""
    return tuple((id(t), t._version, t.data_ptr(), t.dtype, t.device) for t in model.parameters())


def pack(model: Transformer, quantize: str | None = None) -> _Packed:
    """The packed weights of ``model`` for :class:`FastDecoder`, cached on the model (weakly)
    and rebuilt when a parameter changes (replaced or modified in place: its version counter).

    Memory: a transposed copy of the decoder's linear weights and of the output projection
    (about 19 MB for the ``small`` preset in float32; a quarter of that in int8).
    """
    check_quantize(quantize)
    key = (quantize, _version(model))
    entry = _PACKS.get(model)
    if entry is not None and quantize in entry and entry[quantize][0] == key:
        return entry[quantize][1]
    packed = _Packed(model, quantize)
    _PACKS.setdefault(model, {})[quantize] = (key, packed)
    return packed


# -- the decoding state ------------------------------------------------------------------------


class FastDecoder:
    """Incremental decoding of one batch on the fast path: ``step(ids) -> logits``.

    Args:
        model: a :class:`attnlab.Transformer` for which :func:`why_not_fast_path` is ``""``.
        memory: the encoder output ``(n, S, d_model)`` of ``n`` sources.
        memory_mask: the sources' key mask ``(n, 1, 1, S)`` (bool, True = real), or None.
        beam: rows per source (``beam`` hypotheses of each sentence, consecutive rows).
        capacity: the most steps this batch will take.
        quantize: None (the model's dtype) or ``"int8"``.

    Rows are ``n x beam``, sentence-major. :meth:`step` feeds one token per row (at positions
    0, 1, ... in turn; the first is BOS) and returns the next-token logits ``(rows, V)``;
    :meth:`select` keeps or reorders rows between steps.

    The key/value store of layer ``l`` is ``store[l, 0 or 1]``, of shape ``(n, H_kv, capacity,
    beam, Dh)``: the key of the token at position ``j`` of beam ``b`` is ``[.., j, b, :]``.
    ``ancestry`` ``(rows, capacity, beam)`` is 0 where a row's hypothesis went through that
    slot and -inf elsewhere (beam > 1 only). :meth:`cache_keys` gives a row's keys in the
    reference's layout, for tests.
    """

    def __init__(
        self,
        model: Transformer,
        memory: Tensor,
        memory_mask: Tensor | None,
        *,
        beam: int,
        capacity: int,
        quantize: str | None = None,
    ) -> None:
        p = self.packed = pack(model, quantize)
        n, s, d = memory.shape
        self.n, self.beam, self.capacity, self.length = n, beam, capacity, 0
        layers, kv_heads, head_dim = len(p.layers), p.kv_heads, p.head_dim
        self.group = p.heads // kv_heads
        dtype, device = memory.dtype, memory.device
        # The memory's keys and values, every layer at once: (L, 2, n * H_kv, S, Dh).
        kv = p.cross_kv(memory.reshape(n * s, d)).view(n, s, layers, 2, kv_heads, head_dim)
        memory_kv = kv.permute(2, 3, 0, 4, 1, 5).reshape(layers, 2, n * kv_heads, s, -1)
        self.memory_kv = memory_kv.contiguous()
        self.memory_bias = None  # additive (n, 1, 1, 1, S): 0 for a real token, -inf for a pad
        if memory_mask is not None:
            real = memory_mask.reshape(n, 1, 1, 1, s)
            self.memory_bias = torch.zeros(real.shape, dtype=dtype, device=device)
            self.memory_bias.masked_fill_(~real, -math.inf)
        self.store = torch.empty(
            layers, 2, n, kv_heads, capacity, beam, head_dim, dtype=dtype, device=device
        )
        self.ancestry = None
        if beam > 1:
            self.ancestry = torch.full(
                (n * beam, capacity, beam), -math.inf, dtype=dtype, device=device
            )
            # At each position a row writes its own slot: diag[b] is row b's slot pattern.
            diag = torch.full((beam, beam), -math.inf, dtype=dtype, device=device)
            self.own = diag.fill_diagonal_(0.0).repeat(n, 1)  # (rows, K)
        self.positions = None
        if p.sinusoidal is not None:
            self.positions = p.sinusoidal.table(capacity, dtype=dtype).to(device)
        elif p.learned is not None:
            self.positions = p.learned[:capacity]
        self.rotation = None
        if p.rotary is not None:
            angle = p.rotary.angles(capacity, device=device)  # float64, as the reference
            self.rotation = (torch.cos(angle).to(dtype), torch.sin(angle).to(dtype))
        #: Each sentence's first slot ``(n,)`` and the additive mask ``(n, 1, capacity)`` that
        #: hides the slots before it, for sentences that joined later (:meth:`join`); None
        #: while every sentence started at slot 0.
        self.start: Tensor | None = None
        self.self_bias: Tensor | None = None
        self.alibi = None
        if p.alibi is not None:
            # -slope * (t - j) for keys j <= t is the slice [capacity - 1 - t :] of this table
            # (the reference's float32 product, distance times slope).
            distance = torch.arange(capacity - 1, -1, -1, dtype=torch.float32, device=device)
            slope = p.alibi.slope.to(device=device, dtype=torch.float32)
            table = (distance[None, :] * -slope[:, None]).to(dtype)  # (H, capacity)
            self.alibi = table[:, :, None].expand(-1, -1, beam).contiguous()

        self._views()

    @property
    def rows(self) -> int:
        return self.n * self.beam

    def _views(self) -> None:
        """Per-layer views of the store and the memory, made once (not per step): the keys
        transposed for ``bmm`` ``(n H_kv, Dh, capacity K)``, the values ``(n H_kv, capacity K,
        Dh)``, and the store as ``(capacity, n, K, 2, H_kv, Dh)`` for the per-step write."""
        n, beam, p = self.n, self.beam, self.packed
        kv_heads, head_dim = p.kv_heads, p.head_dim
        self.layer_views = []
        for index in range(len(p.layers)):
            store = self.store[index]  # (2, n, H_kv, capacity, K, Dh)
            keys = store[0].view(n * kv_heads, -1, head_dim)
            values = store[1].view(n * kv_heads, -1, head_dim)
            write = store.permute(3, 1, 4, 0, 2, 5)  # (capacity, n, K, 2, H_kv, Dh)
            memory = self.memory_kv[index]  # (2, n H_kv, S, Dh)
            self.layer_views.append(
                (keys.transpose(1, 2), values, write, memory[0].transpose(1, 2), memory[1])
            )
        self.new_shape = (n, beam, 2, kv_heads, head_dim)
        self.shape = (n, n * kv_heads, p.heads // kv_heads, head_dim, p.d_model)

    # -- one step ------------------------------------------------------------------------------

    def step(self, ids: Tensor) -> Tensor:
        """Feed ``ids`` ``(rows,)`` (int64) at the next position; the logits ``(rows, V)``."""
        p, t = self.packed, self.length
        if t >= self.capacity:
            raise ValueError(f"step: the decoder holds {self.capacity} positions, all used")
        x = torch.embedding(p.token, ids)  # (N, d)
        if self.positions is not None:
            if self.start is None:
                where = self.positions[t]
            else:  # a row that ended and stays a while may run past its positions
                where = self.positions[(t - self.start).clamp_(max=self.positions.shape[0] - 1)]
            x = torch.add(where, x, alpha=p.scale)
        elif p.scale != 1.0:
            x = x * p.scale
        if p.embedding_norm is not None:
            x = p.embedding_norm(x)
        mask = None
        if self.ancestry is not None:
            self.ancestry[:, t].copy_(self.own)
            mask = self.ancestry.narrow(1, 0, t + 1).reshape(self.n, 1, 1, self.beam, -1)
        bias = None
        if self.alibi is not None:
            bias = self.alibi.narrow(1, self.capacity - 1 - t, t + 1)
            bias = bias.reshape(1, p.kv_heads, self.group, 1, -1)
        keys_length = (t + 1) * self.beam
        if self.beam == 1 and self.rotation is None and bias is None:
            for w, views in zip(p.layers, self.layer_views, strict=True):
                x = self._one_query_layer(w, views, x, t)
        else:
            for w, views in zip(p.layers, self.layer_views, strict=True):
                x = self._layer(w, views, x, t, keys_length, mask, bias)
        if p.final_norm is not None:
            x = p.final_norm(x)
        self.length = t + 1
        return p.head(x)

    def _one_query_layer(self, w: _Layer, views: tuple[Tensor, ...], x: Tensor, t: int) -> Tensor:
        """:meth:`_layer` for one row per sentence, no RoPE, no ALiBi (greedy decoding and
        sampling with the paper's positions): the same ops, written out, fewer Python calls."""
        keys_t, values, write, memory_keys_t, memory_values = views
        norm1, norm2, norm3 = w.norms
        pre, (n, rows_heads, group, head_dim, d) = self.packed.norm_first, self.shape
        qkv = w.qkv(norm1(x) if pre else x)  # (n, d + 2 kv)
        write[t].copy_(qkv.narrow(1, d, qkv.shape[1] - d).view(self.new_shape))
        q = qkv.narrow(1, 0, d).reshape(rows_heads, group, head_dim)
        scores = torch.bmm(q, keys_t.narrow(2, 0, t + 1))
        if self.self_bias is not None:
            scores.view(n, -1, t + 1).add_(self.self_bias.narrow(2, 0, t + 1))
        a = torch.bmm(torch.softmax(scores, -1), values.narrow(1, 0, t + 1)).view(n, d)
        out = w.out(a)
        out += x
        x = out if pre else norm1(out)
        q = w.cross_q(norm2(x) if pre else x).view(rows_heads, group, head_dim)
        scores = torch.bmm(q, memory_keys_t)
        if self.memory_bias is not None:
            scores.view(n, -1, group, 1, scores.shape[-1]).add_(self.memory_bias)
        a = torch.bmm(torch.softmax(scores, -1), memory_values).view(n, d)
        out = w.cross_out(a)
        out += x
        x = out if pre else norm2(out)
        out = w.ff2(w.activation(w.ff1(norm3(x) if pre else x)))
        out += x
        return out if pre else norm3(out)

    def _layer(
        self,
        w: _Layer,
        views: tuple[Tensor, ...],
        x: Tensor,
        t: int,
        keys_length: int,
        mask: Tensor | None,
        bias: Tensor | None,
    ) -> Tensor:
        keys_t, values, write, memory_keys_t, memory_values = views
        norm1, norm2, norm3 = w.norms
        pre, d = self.packed.norm_first, self.packed.d_model

        # Masked self-attention: this token's key and value join the store.
        qkv = w.qkv(norm1(x) if pre else x)  # (N, d + 2 kv)
        if self.rotation is None:
            q, new = qkv.narrow(1, 0, d), qkv.narrow(1, d, qkv.shape[1] - d)
        else:
            q, new = self._rotate(qkv, t)
        write[t].copy_(new.view(self.new_shape))
        a = self._attend(
            q, keys_t.narrow(2, 0, keys_length), values.narrow(1, 0, keys_length), mask, bias
        )
        out = w.out(a)
        out += x
        x = out if pre else norm1(out)

        # Attention over the memory (its keys and values were projected once).
        q = w.cross_q(norm2(x) if pre else x)
        out = w.cross_out(self._attend(q, memory_keys_t, memory_values, self.memory_bias, None))
        out += x
        x = out if pre else norm2(out)

        # Feed-forward network.
        out = w.ff2(w.activation(w.ff1(norm3(x) if pre else x)))
        out += x
        return out if pre else norm3(out)

    def _attend(
        self,
        q: Tensor,
        keys_t: Tensor,
        values: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
    ) -> Tensor:
        """Attention of the rows' queries ``q`` ``(N, d)`` (already scaled) over the keys
        ``keys_t`` ``(n H_kv, Dh, T)`` and ``values`` ``(n H_kv, T, Dh)`` of their sentence;
        ``mask`` (broadcastable to ``(n, 1, 1, K, T)``) and ``bias`` (to ``(1, H_kv, group, 1,
        T)``) are added to the scores. Returns the heads concatenated ``(N, d)``."""
        n, beam, group = self.n, self.beam, self.group
        kv_heads, head_dim = self.packed.kv_heads, self.packed.head_dim
        if beam == 1:  # head h reads kv head h // group
            queries = q.reshape(n * kv_heads, group, head_dim)
        else:  # a sentence's beams are its queries: (n, H_kv, group, K, Dh)
            queries = q.view(n, beam, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
            queries = queries.reshape(n * kv_heads, group * beam, head_dim)
        scores = torch.bmm(queries, keys_t)  # (n H_kv, group K, T)
        if mask is not None or bias is not None:
            grid = scores.view(n, kv_heads, group, beam, -1)
            if mask is not None:
                grid += mask
            if bias is not None:
                grid += bias
        out = torch.bmm(torch.softmax(scores, -1), values)  # (n H_kv, group K, Dh)
        if beam == 1:
            return out.view(n, -1)
        out = out.view(n, kv_heads, group, beam, head_dim).permute(0, 3, 1, 2, 4)
        return out.reshape(n * beam, -1)

    def _rotate(self, qkv: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """RoPE at position ``t`` on the queries and the new keys (rotate-half layout):
        ``(q (N, d), new keys and values (N, 2 kv))``."""
        p = self.packed
        cos, sin = self.rotation[0][t], self.rotation[1][t]  # (Dh / 2,)
        rows, half, d, kv = qkv.shape[0], p.head_dim // 2, p.d_model, p.kv_heads * p.head_dim
        both = qkv[:, : d + kv].reshape(rows, -1, p.head_dim)
        x1, x2 = both[..., :half], both[..., half:]
        turned = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).view(rows, -1)
        return turned[:, :d], torch.cat([turned[:, d:], qkv[:, d + kv :]], dim=1)

    # -- between steps -------------------------------------------------------------------------

    def select(self, rows: Tensor, *, cross: bool = True) -> None:
        """Keep the rows ``rows`` ``(N',)`` in that order, as
        :meth:`attnlab.nn.cache.DecoderCache.select`. With ``beam == 1`` any subset; with beams,
        rows come ``beam`` per sentence: ``rows[i K + b] = s_i K + origin`` (the new beam ``b``
        of kept sentence ``s_i`` continues beam ``origin`` of that sentence), which reorders
        only the ancestry mask, never the key/value store. ``cross`` is accepted for the
        reference's signature; sentences that leave are dropped either way."""
        beam = self.beam
        if beam == 1:
            sentences = rows
        else:
            self.ancestry = self.ancestry.index_select(0, rows)
            sentences = rows.view(-1, beam)[:, 0] // beam
        if sentences.shape[0] == self.n and (beam > 1 or bool((sentences == self._all()).all())):
            return  # the same sentences in the same order
        # Only the positions written so far are copied: the store holds ``capacity`` of them
        # (a greedy batch prunes its finished rows early, when few are filled).
        shape = list(self.store.shape)
        shape[2] = sentences.shape[0]
        store = self.store.new_empty(shape)
        kept = self.store.narrow(4, 0, self.length).index_select(2, sentences)
        store.narrow(4, 0, self.length).copy_(kept)
        self.store = store
        kv_heads = self.packed.kv_heads
        memory = self.memory_kv.view(*self.memory_kv.shape[:2], self.n, kv_heads, -1)  # contiguous
        memory = memory.index_select(2, sentences)
        self.memory_kv = memory.reshape(*self.memory_kv.shape[:2], -1, *self.memory_kv.shape[3:])
        if self.memory_bias is not None:
            self.memory_bias = self.memory_bias.index_select(0, sentences)
        if beam > 1:
            self.own = self.own[: sentences.shape[0] * beam]
        if self.start is not None and self.self_bias is not None:
            self.start = self.start.index_select(0, sentences)
            self.self_bias = self.self_bias.index_select(0, sentences)
        self.n = sentences.shape[0]
        self._views()

    def join(self, other: FastDecoder, keep: Tensor | None = None) -> None:
        """Take ``other``'s sentences (a batch of the same model and weights that has taken no
        step) into this one, after its own (after the sentences ``keep`` ``(n',)``, in that
        order, when given: :meth:`select` and join in one copy). From the next :meth:`step`
        on they decode together, each joined sentence at its own positions 0, 1, ... while
        the others go on (greedy decoding with sentences that come and go,
        :class:`attnlab.decode.stream.GreedyStream`). A joined sentence writes the slots from
        this batch's next one on; the slots before them are masked out of its self-attention
        (and hold zeros), the memory of the shorter sources is padded and masked, and the
        slots no sentence reads any more are dropped. One row per sentence, and the paper's
        positions (sinusoidal, learned or none): RoPE and ALiBi take one position per step."""
        if self.beam != 1 or other.beam != 1:
            raise ValueError("join: one row per sentence only (greedy decoding), not beams")
        if self.rotation is not None or self.alibi is not None:
            raise ValueError("join: a model with RoPE or ALiBi takes one position per step")
        if other.packed is not self.packed or other.length:
            raise ValueError("join: expected a new batch (no step taken) of the same weights")
        keep = self._all() if keep is None else keep
        n, m, device = keep.shape[0], other.n, self.store.device
        old = self.start.index_select(0, keep) if self.start is not None else keep.new_zeros(n)
        starts = torch.cat([old, torch.full((m,), self.length, dtype=torch.long, device=device)])
        base = int(starts.min())  # the slots before it no sentence reads
        starts -= base
        length = self.length - base
        capacity = max(self.capacity - base, length + other.capacity)
        shape = list(self.store.shape)
        shape[2], shape[4] = n + m, capacity
        store = self.store.new_empty(shape)  # slots from ``length`` on are written before read
        kept = self.store.narrow(4, base, length).index_select(2, keep)
        store[:, :, :n].narrow(4, 0, length).copy_(kept)
        store[:, :, n:].narrow(4, 0, length).zero_()  # masked, and never NaN
        self.store = store
        width = max(self.memory_kv.shape[3], other.memory_kv.shape[3])
        kv_heads = self.packed.kv_heads
        parts, biases = [], []
        for part, rows in ((self, keep), (other, None)):
            memory, s = part.memory_kv, part.memory_kv.shape[3]
            if rows is not None:
                memory = memory.view(*memory.shape[:2], part.n, kv_heads, *memory.shape[3:])
                memory = memory.index_select(2, rows).flatten(2, 3)
            parts.append(nn.functional.pad(memory, (0, 0, 0, width - s)))
            bias = memory.new_zeros(memory.shape[2] // kv_heads, 1, 1, 1, width)
            if part.memory_bias is not None:
                mine = part.memory_bias if rows is None else part.memory_bias.index_select(0, rows)
                bias[..., :s] = mine
            bias[..., s:] = -math.inf
            biases.append(bias)
        self.memory_kv = torch.cat(parts, dim=2)
        self.memory_bias = torch.cat(biases)
        longer = other.positions is not None and self.positions is not None
        if longer and other.positions.shape[0] > self.positions.shape[0]:  # type: ignore[union-attr]
            self.positions = other.positions
        self.start = self.self_bias = None
        if bool(starts.any()):
            self.start = starts
            slots = torch.arange(capacity, device=device)
            hidden = slots[None, None, :] < starts[:, None, None]  # (n + m, 1, capacity)
            self.self_bias = torch.zeros(hidden.shape, dtype=store.dtype, device=device)
            self.self_bias.masked_fill_(hidden, -math.inf)
        self.n, self.capacity, self.length = n + m, capacity, length
        self._views()

    def _all(self) -> Tensor:
        return torch.arange(self.n, device=self.store.device)

    def cache_keys(self, layer: int) -> tuple[Tensor, Tensor]:
        """Layer ``layer``'s self-attention keys and values of each row in the reference's
        layout ``(rows, H_kv, length, Dh)`` (each row's own history; for tests)."""
        store = self.store[layer][:, :, :, : self.length]  # (2, n, H_kv, T, K, Dh)
        if self.beam == 1:
            return store[0, :, :, :, 0], store[1, :, :, :, 0]
        out = []
        for part in store:
            rows = []
            for r in range(self.rows):
                slot = self.ancestry[r, : self.length].argmax(dim=-1)  # the 0 among -infs
                sentence = part[r // self.beam]  # (H_kv, T, K, Dh)
                picked = sentence[:, torch.arange(self.length), slot]  # (H_kv, T, Dh)
                rows.append(picked)
            out.append(torch.stack(rows))
        return out[0], out[1]

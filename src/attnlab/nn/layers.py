"""The Transformer's layers and stacks (Vaswani et al. 2017, sec. 3.1, 3.3; figure 1).

* :class:`FeedForward`:
  ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2`` (sec. 3.3, eq. 2), or GELU.
* :class:`EncoderLayer`: self-attention, then the feed-forward network.
* :class:`DecoderLayer`: masked self-attention, cross-attention over the encoder's output
  ("memory"), then the feed-forward network; without cross-attention it is the block of a
  decoder-only language model.
* :class:`Encoder` and :class:`Decoder`: stacks of N layers.

Each sub-layer is wrapped in a residual connection with dropout on the sub-layer's output
(sec. 5.4, "residual dropout"). Where the LayerNorm goes is ``norm_first``:

* post-LN, the paper's (sec. 3.1): ``x = LayerNorm(x + Dropout(Sublayer(x)))``;
* pre-LN (Xiong et al. 2020; GPT-2): ``x = x + Dropout(Sublayer(LayerNorm(x)))``, which needs a
  final LayerNorm after the stack; the stacks add it by default when ``norm_first``.

Parameter names follow ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``
(``self_attn``, ``linear1``, ``norm1``, ...), and ``from_torch`` copies those modules exactly
(the reading and copying live in :mod:`attnlab.nn.torch_nn`). Masks follow
:mod:`attnlab.nn.masks` (bool ``True`` = may attend). What a decoder keeps between steps of
incremental decoding is :mod:`attnlab.nn.cache`'s ``DecoderCache``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_positive_int, check_positive_number, check_rate, check_type, shape_of
from .._ops import dropout
from .attention import MultiHeadAttention
from .cache import DecoderCache, KVCache
from .positional import AttentionPositional
from .torch_nn import copy_layer, layer_kwargs, stack_kwargs

__all__ = ["Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward"]


# -- the position-wise feed-forward network (sec. 3.3, eq. 2) --------------------------------


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact (erf) GELU, as BERT and ViT
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's approximation
    "silu": F.silu,  # swish, x * sigmoid(x): Marian's (opus-mt) activation
}


def _check_activation(activation: object) -> str:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}")
    return str(activation)


class FeedForward(nn.Module):
    """Position-wise feed-forward network (Vaswani et al. 2017, sec. 3.3, eq. 2).

    ``linear2(dropout(activation(linear1(x))))``: two linear maps ``d_model -> d_ff -> d_model``
    applied to every position alike. The paper uses ReLU and no inner dropout
    (``activation_dropout=0``); torch.nn.Transformer applies its dropout here too.

    Args:
        d_model: input and output width (512 in the paper's base model).
        d_ff: inner width (2048 in the base model).
        activation: ``"relu"`` (the paper), ``"gelu"`` (BERT, ViT) or ``"gelu_tanh"``.
        activation_dropout: dropout after the activation, in training.
        bias: biases in both linear maps.

    Shape: ``(..., d_model) -> (..., d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "relu",
        activation_dropout: float = 0.0,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(d_ff, "d_ff")
        self.activation = _check_activation(activation)
        self.activation_dropout = check_rate(activation_dropout, "activation_dropout")
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias, **factory)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias, **factory)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}, activation_dropout={self.activation_dropout}"

    def forward(self, x: Tensor) -> Tensor:
        h = ACTIVATIONS[self.activation](self.linear1(x))  # (..., d_ff)
        h = dropout(h, self.activation_dropout, self.training)
        return self.linear2(h)  # (..., d_model)


class _Block(nn.Module):
    """What encoder and decoder layers share: argument checks, self-attention, the FFN's
    options and the residual wiring. Its constructor is :class:`EncoderLayer`'s; once
    self-attention is built it calls ``_after_self_attention``, where each layer adds its
    other sub-layers in torch's order."""

    norm1: nn.LayerNorm  # every layer's first LayerNorm (its self-attention sub-layer's)

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        num_kv_heads: int | None = None,
        positional: AttentionPositional | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(num_heads, "num_heads")
        self.dropout = check_rate(dropout, "dropout")
        check_rate(attention_dropout, "attention_dropout")  # self_attn holds it
        if not isinstance(norm_first, bool):
            raise TypeError(f"norm_first: expected a bool, got {norm_first!r}")
        self.norm_first = norm_first
        self.layer_norm_eps = check_positive_number(layer_norm_eps, "layer_norm_eps")
        self.d_model = d_model
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self._ff_options = {
            "activation": activation,
            "activation_dropout": activation_dropout,
            "bias": bias,
            **factory,
        }
        self._attention_options: dict[str, Any] = {
            "num_kv_heads": num_kv_heads,
            "dropout": attention_dropout,
            "bias": bias,
            **factory,
        }
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, positional=positional, **self._attention_options
        )
        self._after_self_attention(d_ff, factory)

    def _after_self_attention(self, d_ff: int, factory: dict[str, Any]) -> None:
        raise NotImplementedError

    def _norm(self, features: int, factory: dict[str, Any]) -> nn.LayerNorm:
        return nn.LayerNorm(features, eps=self.layer_norm_eps, **factory)

    def _residual(
        self,
        x: Tensor,
        norm: nn.LayerNorm,
        sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]],
    ) -> tuple[Tensor, Tensor | None]:
        """``x + Dropout(sublayer(...))`` with the LayerNorm before (pre-LN) or after (post-LN)."""
        if self.norm_first:
            out, weights = sublayer(norm(x))
            return x + dropout(out, self.dropout, self.training), weights
        out, weights = sublayer(x)
        return norm(x + dropout(out, self.dropout, self.training)), weights

    def _check_x(self, x: Tensor, name: str = "x") -> None:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"{name}: expected shape (B, T, d_model={self.d_model}), got {shape_of(x)}"
            )


class EncoderLayer(_Block):
    """One encoder layer (Vaswani et al. 2017, sec. 3.1): self-attention, then FFN.

    Args:
        d_model, num_heads, d_ff: widths; ``d_model`` divisible by ``num_heads``.
        dropout: residual dropout on each sub-layer's output (sec. 5.4; 0.1 in the base model).
        attention_dropout: dropout on the attention weights (not in the paper; torch uses
            ``dropout`` here).
        activation_dropout: dropout inside the FFN (not in the paper; torch uses ``dropout``).
        activation: FFN activation, ``"relu"`` (paper) or ``"gelu"``.
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_eps: LayerNorm epsilon (torch's 1e-5 by default; BERT uses 1e-12).
        bias: biases in the projections.
        num_kv_heads: grouped-query attention (see :class:`attnlab.MultiHeadAttention`).
        positional: RoPE or ALiBi applied inside self-attention.

    Shape: ``forward(x (B, T, d_model)) -> (out (B, T, d_model), weights (B, H, T, T) or None)``.
    """

    # The constructor, with the arguments above, is _Block's: self-attention, then these.

    def _after_self_attention(self, d_ff: int, factory: dict[str, Any]) -> None:
        self.ff = FeedForward(self.d_model, d_ff, **self._ff_options)
        self.norm1 = self._norm(self.d_model, factory)
        self.norm2 = self._norm(self.d_model, factory)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}, dropout={self.dropout}"

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        offset: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """Args:
        x: ``(B, T, d_model)``.
        mask: self-attention mask broadcastable to ``(B, H, T, T)``; for padding use
            :func:`attnlab.nn.masks.key_mask`.
        is_causal: add the look-ahead mask.
        need_weights: also return the self-attention weights ``(B, H, T, T)``.
        offset: position of ``x[:, 0]``, for RoPE / ALiBi.
        """
        self._check_x(x)

        def attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h, mask=mask, is_causal=is_causal, need_weights=need_weights, offset=offset
            )

        x, weights = self._residual(x, self.norm1, attend)
        x, _ = self._residual(x, self.norm2, lambda h: (self.ff(h), None))
        return x, weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Weight-exact copy of a ``torch.nn.TransformerEncoderLayer`` (either ``batch_first``).

        torch uses one dropout rate for the residuals, the attention weights and the FFN; the
        copy does the same. The result is batch-first, in the same train/eval mode.
        """
        new = cls(**layer_kwargs(layer, nn.TransformerEncoderLayer))
        copy_layer(new, layer, ("self_attn",), ("norm1", "norm2"))
        return new.train(layer.training)


class DecoderLayer(_Block):
    """One decoder layer (Vaswani et al. 2017, sec. 3.1): masked self-attention, attention over
    the encoder output, then FFN.

    With ``cross_attention=False`` the layer has no encoder-decoder attention: the block of a
    decoder-only language model (:class:`attnlab.TransformerLM`).

    Args: as :class:`EncoderLayer`, plus ``cross_attention``. Sub-layer norms are ``norm1``
    (self-attention), ``norm2`` (cross-attention) and ``norm3`` (FFN), as in torch; without
    cross-attention there is no ``norm2``.

    Shape: ``forward(x (B, T, d_model), memory (B, S, d_model)) -> (out (B, T, d_model),
    self_weights (B, H, T, T) or None, cross_weights (B, H, T, S) or None)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        cross_attention: bool = True,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        num_kv_heads: int | None = None,
        positional: AttentionPositional | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            d_model,
            num_heads,
            d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
            activation=activation,
            norm_first=norm_first,
            layer_norm_eps=layer_norm_eps,
            bias=bias,
            num_kv_heads=num_kv_heads,
            positional=positional,
            device=device,
            dtype=dtype,
        )
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.cross_attn: MultiHeadAttention | None
        self.norm2: nn.LayerNorm | None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, num_heads, **self._attention_options)
            self.norm2 = self._norm(d_model, factory)
        else:
            self.cross_attn = self.norm2 = None
        self.ff = FeedForward(d_model, d_ff, **self._ff_options)
        self.norm3 = self._norm(d_model, factory)

    def _after_self_attention(self, d_ff: int, factory: dict[str, Any]) -> None:
        self.norm1 = self._norm(self.d_model, factory)  # cross-attention and FFN: __init__

    @property
    def has_cross_attention(self) -> bool:
        return self.cross_attn is not None

    def extra_repr(self) -> str:
        return (
            f"cross_attention={self.has_cross_attention}, norm_first={self.norm_first}, "
            f"dropout={self.dropout}"
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        need_weights: bool = False,
        offset: int = 0,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Args:
        x: decoder input ``(B, T, d_model)``.
        memory: the encoder's output ``(B, S, d_model)``; required with cross-attention
            (unless ``cross_cache`` holds it), refused without it.
        self_mask: extra self-attention mask, broadcastable to ``(B, H, T, T)`` (e.g. the
            target's :func:`attnlab.nn.masks.key_mask`).
        memory_mask: cross-attention mask broadcastable to ``(B, H, T, S)`` (the source's
            key mask).
        is_causal: the look-ahead mask on self-attention (sec. 3.2.3); on by default.
        need_weights: also return the attention weights.
        offset: position of ``x[:, 0]``, for RoPE / ALiBi.
        self_cache: a self-attention :class:`attnlab.KVCache` for incremental decoding: ``x``
            holds the new positions only, which continue from the cache's length.
        cross_cache: the memory's keys and values (``cross_attn.memory_cache(memory)``), used
            instead of ``memory``.
        """
        self._check_x(x)
        if self.cross_attn is None:
            if memory is not None or memory_mask is not None or cross_cache is not None:
                raise ValueError(
                    "memory: this layer has no cross-attention (cross_attention=False)"
                )
        elif cross_cache is not None:
            if memory is not None:
                raise ValueError("memory: cross_cache already holds it; pass one of the two")
        elif memory is None:
            raise ValueError("memory: required, the encoder output (B, S, d_model)")
        else:
            self._check_x(memory, "memory")

        def attend_self(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h,
                mask=self_mask,
                is_causal=is_causal,
                need_weights=need_weights,
                offset=offset,
                cache=self_cache,
            )

        def attend_memory(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.cross_attn(  # type: ignore[misc]  # called only with cross-attention
                h, memory, mask=memory_mask, need_weights=need_weights, cache=cross_cache
            )

        x, self_weights = self._residual(x, self.norm1, attend_self)
        cross_weights = None
        if self.cross_attn is not None:
            x, cross_weights = self._residual(x, self.norm2, attend_memory)  # type: ignore[arg-type]
        x, _ = self._residual(x, self.norm3, lambda h: (self.ff(h), None))
        return x, self_weights, cross_weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Weight-exact copy of a ``torch.nn.TransformerDecoderLayer`` (either ``batch_first``)."""
        new = cls(**layer_kwargs(layer, nn.TransformerDecoderLayer))
        copy_layer(new, layer, ("self_attn", "multihead_attn"), ("norm1", "norm2", "norm3"))
        return new.train(layer.training)


class _Stack(nn.Module):
    """N identical layers and an optional final LayerNorm; what Encoder and Decoder share."""

    layer_class: type[EncoderLayer] | type[DecoderLayer]
    torch_class: type[nn.Module]

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        final_norm: bool | None = None,
        **layer_options: Any,
    ) -> None:
        super().__init__()
        check_positive_int(num_layers, "num_layers")
        layer = self.layer_class
        self.layers = nn.ModuleList(
            layer(d_model, num_heads, d_ff, **layer_options) for _ in range(num_layers)
        )
        first = cast(_Block, self.layers[0])
        if final_norm is None:
            final_norm = first.norm_first
        factory = {"device": first.norm1.weight.device, "dtype": first.norm1.weight.dtype}
        self.norm = first._norm(d_model, factory) if final_norm else None

    @classmethod
    def from_torch(cls, stack: nn.Module) -> _Stack:
        """Weight-exact copy of the torch stack (``torch.nn.TransformerEncoder`` for
        :class:`Encoder`, ``TransformerDecoder`` for :class:`Decoder`), its ``norm`` included;
        batch-first, in the same train/eval mode."""
        kwargs, layers, norm = stack_kwargs(stack, cls.torch_class)
        new = cls(len(layers), final_norm=norm is not None, **kwargs)
        for mine, theirs in zip(new.layers, layers, strict=True):
            mine.load_state_dict(cls.layer_class.from_torch(theirs).state_dict())
        final = new.norm
        if final is not None and norm is not None:
            final.eps = norm.eps
            final.load_state_dict(norm.state_dict())
        return new.train(stack.training)


class Encoder(_Stack):
    """A stack of :class:`EncoderLayer` (Vaswani et al. 2017, sec. 3.1: N = 6 in the paper).

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, **layer_options: as :class:`EncoderLayer`; every layer gets
            the same options (a ``positional`` module is shared, it holds no weights).
        final_norm: a LayerNorm after the last layer; default ``norm_first`` (pre-LN needs it,
            post-LN already ends in one). torch.nn.Transformer always has it.

    Shape: ``forward(x (B, T, d_model)) -> (out (B, T, d_model), [weights (B, H, T, T)] * N or
    None)``.

    ``Encoder.from_torch(torch.nn.TransformerEncoder)`` copies torch's stack exactly.
    """

    layer_class = EncoderLayer
    torch_class = nn.TransformerEncoder

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        offset: int = 0,
    ) -> tuple[Tensor, list[Tensor] | None]:
        """Run the layers in order; see :meth:`EncoderLayer.forward` for the arguments."""
        all_weights: list[Tensor] | None = [] if need_weights else None
        for layer in self.layers:
            x, weights = layer(
                x, mask=mask, is_causal=is_causal, need_weights=need_weights, offset=offset
            )
            if all_weights is not None:
                all_weights.append(weights)
        if self.norm is not None:
            x = self.norm(x)
        return x, all_weights


class Decoder(_Stack):
    """A stack of :class:`DecoderLayer` (Vaswani et al. 2017, sec. 3.1).

    Args: as :class:`Encoder`, with ``cross_attention`` among the layer options (False for a
    decoder-only language model).

    Shape: ``forward(x (B, T, d_model), memory (B, S, d_model)) -> (out, self_weights,
    cross_weights)``, the weights being lists of N tensors, or None.

    ``Decoder.from_torch(torch.nn.TransformerDecoder)`` copies torch's stack exactly.
    """

    layer_class = DecoderLayer
    torch_class = nn.TransformerDecoder

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        need_weights: bool = False,
        offset: int = 0,
        cache: DecoderCache | None = None,
    ) -> tuple[Tensor, list[Tensor] | None, list[Tensor] | None]:
        """Run the layers in order; see :meth:`DecoderLayer.forward` for the arguments.

        With ``cache`` (:meth:`new_cache`), ``x`` holds only the new positions; each layer
        appends their keys and values, cross-attention uses the cached memory, and
        ``memory_mask`` defaults to the cache's.
        """
        self_all: list[Tensor] | None = [] if need_weights else None
        cross_all: list[Tensor] | None = (
            [] if need_weights and self.layers[0].has_cross_attention else None
        )
        none = [None] * len(self.layers)
        caches: list[tuple[KVCache | None, KVCache | None]] = list(zip(none, none, strict=True))
        if cache is not None:
            self.check_cache(cache)
            caches = list(zip(cache.self_attn, cache.cross_attn or none, strict=True))
            if memory_mask is None:
                memory_mask = cache.memory_mask
        for layer, (self_cache, cross_cache) in zip(self.layers, caches, strict=True):
            x, self_weights, cross_weights = layer(
                x,
                memory,
                self_mask=self_mask,
                memory_mask=memory_mask,
                is_causal=is_causal,
                need_weights=need_weights,
                offset=offset,
                self_cache=self_cache,
                cross_cache=cross_cache,
            )
            if self_all is not None:
                self_all.append(self_weights)
            if cross_all is not None:
                cross_all.append(cross_weights)
        if self.norm is not None:
            x = self.norm(x)
        return x, self_all, cross_all

    def new_cache(
        self,
        capacity: int,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental decoding.

        Args:
            capacity: positions each self-attention cache preallocates (the longest output).
            memory: the encoder output ``(B, S, d_model)``, required with cross-attention:
                every layer projects its keys and values now, once per source.
            memory_mask: the source's key mask ``(B, 1, 1, S)``, kept with the cache.
        """
        check_positive_int(capacity, "capacity")
        cross = None
        layers = cast("list[DecoderLayer]", self.layers)
        if layers[0].has_cross_attention:
            if memory is None:
                raise ValueError("memory: required, the encoder output (B, S, d_model)")
            layers[0]._check_x(memory, "memory")
            cross = [layer.cross_attn.memory_cache(memory) for layer in layers]  # type: ignore[union-attr]
        elif memory is not None or memory_mask is not None:
            raise ValueError("memory: this decoder has no cross-attention")
        self_attn = [KVCache(capacity) for _ in self.layers]
        return DecoderCache(self_attn, cross, memory_mask=memory_mask)

    def check_cache(self, cache: object) -> None:
        """Raise unless ``cache`` is a :class:`DecoderCache` made for this decoder
        (:meth:`new_cache`): one self-attention cache per layer, cross-attention caches exactly
        when the layers have cross-attention."""
        cache = check_type(cache, DecoderCache, "cache", "a DecoderCache (Decoder.new_cache)")
        if len(cache.self_attn) != len(self.layers):
            raise ValueError(
                f"cache: holds {len(cache.self_attn)} layers, the decoder has {len(self.layers)}"
            )
        if (cache.cross_attn is None) == self.layers[0].has_cross_attention:
            raise ValueError("cache: made for a decoder with other cross-attention")

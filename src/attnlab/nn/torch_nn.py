"""Weight-exact copies between attnlab's building blocks and torch.nn's.

* :class:`attnlab.MultiHeadAttention` and ``torch.nn.MultiheadAttention``, both ways
  (``MultiHeadAttention.from_torch`` / ``to_torch``).
* ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` into
  :class:`attnlab.nn.layers.EncoderLayer` / :class:`attnlab.nn.layers.DecoderLayer`, and
  ``torch.nn.TransformerEncoder`` / ``TransformerDecoder`` into :class:`attnlab.nn.layers.Encoder` /
  :class:`attnlab.nn.layers.Decoder` (their ``from_torch``).

The classes' ``from_torch`` / ``to_torch`` methods are the way in. This module does their
reading and copying: it turns torch's modules into constructor arguments (refusing options
attnlab cannot compute) and copies the weights. It imports neither :mod:`attnlab.nn.attention` nor
:mod:`attnlab.nn.layers` (both import it): the classes construct themselves from the arguments
it returns, and what it reads of an attention module is named by :class:`AttentionLike`.

torch's masks use the opposite polarity (True = ignore); convert them with
:func:`attnlab.nn.masks.from_torch_masks`. torch's modules may be ``batch_first`` or not; attnlab's
are always batch-first.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_type

__all__ = [
    "attention_kwargs",
    "attention_to_torch",
    "copy_attention",
    "copy_layer",
    "layer_kwargs",
    "stack_kwargs",
]


# -- torch.nn.MultiheadAttention ---------------------------------------------------------------


class AttentionLike(Protocol):
    """What the copies read of :class:`attnlab.nn.attention.MultiHeadAttention` (which imports
    this module, so it is named by its members, not imported)."""

    @property
    def d_model(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def kdim(self) -> int: ...
    @property
    def vdim(self) -> int: ...
    @property
    def dropout(self) -> float: ...
    @property
    def positional(self) -> object: ...
    @property
    def training(self) -> bool: ...
    @property
    def in_proj(self) -> nn.Linear | None: ...
    @property
    def q_proj(self) -> nn.Linear: ...
    @property
    def k_proj(self) -> nn.Linear: ...
    @property
    def v_proj(self) -> nn.Linear: ...
    @property
    def out_proj(self) -> nn.Linear: ...


def attention_kwargs(module: nn.MultiheadAttention) -> dict[str, Any]:
    """:class:`attnlab.MultiHeadAttention`'s constructor arguments for a
    ``torch.nn.MultiheadAttention``, on its device and dtype; raises for options attnlab lacks."""
    check_type(module, nn.MultiheadAttention, "module", "torch.nn.MultiheadAttention")
    if module.bias_k is not None or module.bias_v is not None:
        raise ValueError("module: add_bias_kv=True has no attnlab equivalent")
    if module.add_zero_attn:
        raise ValueError("module: add_zero_attn=True has no attnlab equivalent")
    ref = module.out_proj.weight
    return {
        "d_model": module.embed_dim,
        "num_heads": module.num_heads,
        "dropout": module.dropout,
        "bias": module.in_proj_bias is not None,
        "kdim": module.kdim,
        "vdim": module.vdim,
        "device": ref.device,
        "dtype": ref.dtype,
    }


def copy_attention(new: AttentionLike, module: nn.MultiheadAttention) -> None:
    """Copy ``module``'s projections into ``new``, built with :func:`attention_kwargs`."""
    e = module.embed_dim
    with torch.no_grad():
        if new.in_proj is not None:
            new.in_proj.weight.copy_(module.in_proj_weight)
            if module.in_proj_bias is not None:
                new.in_proj.bias.copy_(module.in_proj_bias)
        else:
            pairs = zip(
                (new.q_proj, new.k_proj, new.v_proj),
                (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight),
                strict=True,
            )
            for i, (proj, weight) in enumerate(pairs):
                proj.weight.copy_(weight)
                if module.in_proj_bias is not None:
                    proj.bias.copy_(module.in_proj_bias[i * e : (i + 1) * e])
        new.out_proj.weight.copy_(module.out_proj.weight)
        if module.out_proj.bias is not None:
            new.out_proj.bias.copy_(module.out_proj.bias)


def attention_to_torch(mha: AttentionLike, *, batch_first: bool) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` holding ``mha``'s weights, on its device and dtype, in
    its train/eval mode; raises for what torch's module cannot compute (GQA, RoPE, ALiBi)."""
    if mha.num_kv_heads != mha.num_heads:
        raise ValueError(
            f"num_kv_heads={mha.num_kv_heads}: torch.nn.MultiheadAttention has no "
            f"grouped-query attention"
        )
    if mha.positional is not None:
        raise ValueError("positional: torch.nn.MultiheadAttention has no RoPE / ALiBi")
    ref = mha.out_proj.weight
    bias = mha.out_proj.bias is not None
    module = nn.MultiheadAttention(
        mha.d_model,
        mha.num_heads,
        dropout=mha.dropout,
        bias=bias,
        kdim=mha.kdim,
        vdim=mha.vdim,
        batch_first=batch_first,
        device=ref.device,
        dtype=ref.dtype,
    )
    with torch.no_grad():
        if mha.in_proj is not None:
            module.in_proj_weight.copy_(mha.in_proj.weight)
            if bias:
                module.in_proj_bias.copy_(mha.in_proj.bias)
        else:
            module.q_proj_weight.copy_(mha.q_proj.weight)
            module.k_proj_weight.copy_(mha.k_proj.weight)
            module.v_proj_weight.copy_(mha.v_proj.weight)
            if bias:
                module.in_proj_bias.copy_(
                    torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias])
                )
        module.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            module.out_proj.bias.copy_(mha.out_proj.bias)
    return module.train(mha.training)


# -- torch.nn.Transformer{Encoder,Decoder}Layer and their stacks -------------------------------


def layer_kwargs(layer: nn.Module, torch_class: type[nn.Module]) -> dict[str, Any]:
    """Constructor arguments of the attnlab layer equivalent to a torch
    ``Transformer{Encoder,Decoder}Layer`` (``torch_class``, checked), on its device and dtype."""
    check_type(layer, torch_class, "layer", f"torch.nn.{torch_class.__name__}")
    torch_layer: Any = layer
    activation = torch_layer.activation
    if activation is F.relu or isinstance(activation, nn.ReLU):
        name = "relu"
    elif activation is F.gelu or (
        isinstance(activation, nn.GELU) and activation.approximate == "none"
    ):
        name = "gelu"
    elif isinstance(activation, nn.GELU) and activation.approximate == "tanh":
        name = "gelu_tanh"
    else:
        raise ValueError(f"layer.activation: {activation!r} has no attnlab equivalent")
    attention = torch_layer.self_attn
    weight = torch_layer.linear1.weight
    rate = float(torch_layer.dropout.p)
    return {
        "d_model": attention.embed_dim,
        "num_heads": attention.num_heads,
        "d_ff": torch_layer.linear1.out_features,
        "dropout": rate,
        "attention_dropout": float(attention.dropout),
        "activation_dropout": rate,
        "activation": name,
        "norm_first": bool(torch_layer.norm_first),
        "layer_norm_eps": float(torch_layer.norm1.eps),
        "bias": torch_layer.linear1.bias is not None,
        "device": weight.device,
        "dtype": weight.dtype,
    }


def copy_layer(
    new: nn.Module, layer: nn.Module, attentions: tuple[str, ...], norms: tuple[str, ...]
) -> None:
    """Copy a torch layer's attention (``attentions``, in attnlab's order ``self_attn``,
    ``cross_attn``), FFN and LayerNorm (``norms``, attnlab's ``norm1``...) weights into ``new``,
    built with :func:`layer_kwargs`."""
    ours = ("self_attn", "cross_attn")
    for mine, theirs in zip(ours, attentions, strict=False):
        module = getattr(layer, theirs)
        attention_kwargs(module)  # refuses what attnlab cannot compute
        copy_attention(getattr(new, mine), module)
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(new.ff, name).load_state_dict(getattr(layer, name).state_dict())
        for mine, theirs in zip(("norm1", "norm2", "norm3")[: len(norms)], norms, strict=True):
            if getattr(layer, theirs).bias is None:
                raise ValueError(
                    f"layer.{theirs}: LayerNorm without bias has no attnlab equivalent"
                )
            getattr(new, mine).load_state_dict(getattr(layer, theirs).state_dict())


_STACK_LAYERS: dict[type[nn.Module], type[nn.Module]] = {
    nn.TransformerEncoder: nn.TransformerEncoderLayer,
    nn.TransformerDecoder: nn.TransformerDecoderLayer,
}


def stack_kwargs(
    stack: nn.Module, torch_class: type[nn.Module]
) -> tuple[dict[str, Any], list[Any], nn.LayerNorm | None]:
    """Read a torch ``TransformerEncoder`` or ``TransformerDecoder`` (``torch_class``, checked):
    its layers' shared constructor arguments (:func:`layer_kwargs`), its layers, and its final
    norm (None without one). Raises when the layers' options differ."""
    check_type(stack, torch_class, "stack", f"torch.nn.{torch_class.__name__}")
    torch_stack: Any = stack
    layers = list(torch_stack.layers)
    kwargs = [layer_kwargs(layer, _STACK_LAYERS[torch_class]) for layer in layers]
    for i, k in enumerate(kwargs):
        differ = sorted(name for name in k if k[name] != kwargs[0][name])
        if differ:
            raise ValueError(
                f"stack: the torch stack's layers differ in their options: layer {i} has "
                f"other {differ} than layer 0 (attnlab stacks hold identical layers)"
            )
    norm = torch_stack.norm
    if norm is not None and not (isinstance(norm, nn.LayerNorm) and norm.bias is not None):
        raise ValueError(f"norm: {norm!r} has no attnlab equivalent (LayerNorm with bias only)")
    return kwargs[0], layers, norm

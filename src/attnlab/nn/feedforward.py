"""The position-wise feed-forward network (Vaswani et al. 2017, sec. 3.3, eq. 2).

``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``: the second sub-layer of every encoder and decoder
layer (:mod:`attnlab.nn.layers`), the same two linear maps applied to every position alike. ReLU is
the paper's activation; GELU (BERT, ViT), its tanh approximation (GPT-2) and SiLU (swish,
``x * sigmoid(x)``: the opus-mt / Marian models) are the others :data:`ACTIVATIONS` names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_positive_int, check_rate
from .._ops import dropout

__all__ = ["ACTIVATIONS", "FeedForward"]

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

"""The training loss of a token model, fused: label-smoothed cross-entropy (Vaswani et al.
2017, sec. 5.4; Szegedy et al. 2016) over ``(N, V)`` logits with one pass over them each way.

``torch.nn.functional.cross_entropy(..., label_smoothing=eps)`` is the reference: for each
target row that is not ``ignore_index``,

    loss = (1 - eps) * (-log p[target]) + eps * mean_c(-log p[c]),

summed over the rows. Its autograd graph keeps the log-probabilities, and its backward pass
builds the gradient of each term separately (zero-fill, scatter, a second full-size gradient for
the smoothing term, their sum, then log-softmax's backward): about five passes over an
``N x V`` tensor, which for a Multi30K step (4,096 target tokens x 8,000 types, 131 MB) cost a
fifth of the whole training step on a CPU. The gradient has a closed form,

    d loss / d logits = p - q,   q = (1 - eps) * onehot(target) + eps / V,

(zero on ignored rows), so :func:`cross_entropy` saves the log-probabilities and writes the
gradient in one pass. It is tested equal to torch's, loss and gradient, in
``tests/test_losses.py``; ``benchmarks/model.py`` times the two in a training step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["cross_entropy"]


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: Tensor, target: Tensor, ignore_index: int, smoothing: float
    ) -> Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        keep = target != ignore_index
        safe = target.masked_fill(~keep, 0)  # an ignored row may hold an id outside [0, V)
        nll = log_probs.gather(1, safe[:, None]).squeeze(1).neg()
        per_row = nll if smoothing == 0.0 else nll * (1.0 - smoothing)
        if smoothing != 0.0:
            per_row = per_row - log_probs.sum(dim=-1) * (smoothing / logits.shape[-1])
        ctx.save_for_backward(log_probs, safe, keep)
        ctx.smoothing = smoothing
        return torch.where(keep, per_row, 0.0).sum()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        log_probs, safe, keep = ctx.saved_tensors
        smoothing = ctx.smoothing
        out = log_probs.exp()  # p; a new tensor, so a retained graph can run backward again
        if smoothing != 0.0:
            out.sub_(smoothing / log_probs.shape[-1])
        hit = torch.full((safe.shape[0], 1), smoothing - 1.0, dtype=out.dtype, device=out.device)
        out.scatter_add_(1, safe[:, None], hit)
        out.mul_((keep.to(out.dtype) * grad)[:, None])
        return out, None, None, None


def cross_entropy(
    logits: Tensor, target: Tensor, *, ignore_index: int = -100, label_smoothing: float = 0.0
) -> Tensor:
    """Summed cross-entropy of ``logits`` ``(N, V)`` (float) against ``target`` ``(N,)`` ids,
    with ``label_smoothing`` in [0, 1); rows whose target is ``ignore_index`` count zero.

    The same value and gradient as ``F.cross_entropy(logits, target, ignore_index=...,
    label_smoothing=..., reduction="sum")``, computed with fewer passes over the logits (see
    the module's docstring). A scalar tensor.
    """
    if not (isinstance(logits, Tensor) and logits.dim() == 2 and logits.dtype.is_floating_point):
        raise ValueError(f"logits: expected a (N, V) float tensor, got {_shape(logits)}")
    if not (
        isinstance(target, Tensor)
        and target.shape == logits.shape[:1]
        and target.dtype in (torch.int64, torch.int32)
    ):
        raise ValueError(
            f"target: expected an integer tensor of shape ({logits.shape[0]},), got "
            f"{_shape(target)}"
        )
    smoothing = float(label_smoothing)
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label_smoothing: expected a number in [0, 1), got {label_smoothing!r}")
    result: Tensor = _SmoothedCrossEntropy.apply(
        logits, target.long(), int(ignore_index), smoothing
    )
    return result


def _shape(x: object) -> str:
    if isinstance(x, Tensor):
        return f"{x.dtype} of shape {tuple(x.shape)}"
    return type(x).__name__

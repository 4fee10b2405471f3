"""The training loss of a token model, fused: label-smoothed cross-entropy (Vaswani et al.
2017, sec. 5.4; Szegedy et al. 2016) over ``(N, V)`` logits with one pass over them each way.

``torch.nn.functional.cross_entropy(..., label_smoothing=eps)`` is the reference: for each
target row that is not ``ignore_index``,

    loss = (1 - eps) * (-log p[target]) + eps * mean_c(-log p[c]),

summed over the rows. Its backward builds the gradient of each term separately (zero-fill,
scatter, the smoothing term's gradient, their sum, then log-softmax's backward): about five
passes over an ``N x V`` tensor (a Multi30K step: 4,096 target tokens x 8,000 types, 131 MB).
The gradient has a closed form,

    d loss / d logits = p - q,   q = (1 - eps) * onehot(target) + eps / V,

(zero on ignored rows), so :func:`cross_entropy` saves the log-probabilities and writes the
gradient in one pass. It is tested equal to torch's, loss and gradient, in
``tests/train/test_losses.py``.

With ``inplace=True`` (the trainer's choice: its logits are a fresh tensor nothing else reads)
no ``N x V`` tensor is allocated at all: the log-probabilities are written over the logits, and
the gradient over the log-probabilities. On a CPU that matters more than the passes: glibc
serves a fresh tensor this large by ``mmap``, which the kernel maps page by page
(docs/benchmarks.md, "A Transformer training step").
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["cross_entropy"]


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: Tensor, target: Tensor, ignore_index: int, smoothing: float, inplace: bool
    ) -> Tensor:
        # In place, the kernel reads each row whole before writing it, so aliasing is safe. The
        # logits are not marked dirty (autograd allows that only for a Function with one
        # output when they are a view, as the trainer's flattened logits are); their version
        # counter still moves, so an op that saved them refuses its backward.
        if inplace:
            log_probs = torch._log_softmax(logits, -1, False, out=logits)
        else:
            log_probs = torch.log_softmax(logits, dim=-1)
        keep = target != ignore_index
        safe = target.masked_fill(~keep, 0)  # an ignored row may hold an id outside [0, V)
        nll = log_probs.gather(1, safe[:, None]).squeeze(1).neg()
        per_row = nll if smoothing == 0.0 else nll * (1.0 - smoothing)
        if smoothing != 0.0:
            per_row = per_row - log_probs.sum(dim=-1) * (smoothing / logits.shape[-1])
        ctx.save_for_backward(log_probs, safe, keep)
        ctx.smoothing, ctx.inplace = smoothing, inplace
        return torch.where(keep, per_row, 0.0).sum()

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad: Tensor
    ) -> tuple[Tensor, None, None, None, None]:
        log_probs, safe, keep = ctx.saved_tensors
        smoothing = ctx.smoothing
        # p: over the saved log-probabilities when in place (a second backward through the same
        # graph is then refused by autograd: a saved tensor was modified), else a new tensor.
        out = log_probs.exp_() if ctx.inplace else log_probs.exp()
        if smoothing != 0.0:
            out.sub_(smoothing / log_probs.shape[-1])
        hit = torch.full((safe.shape[0], 1), smoothing - 1.0, dtype=out.dtype, device=out.device)
        out.scatter_add_(1, safe[:, None], hit)
        out.mul_((keep.to(out.dtype) * grad)[:, None])
        return out, None, None, None, None


def cross_entropy(
    logits: Tensor,
    target: Tensor,
    *,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    inplace: bool = False,
) -> Tensor:
    """Summed cross-entropy of ``logits`` ``(N, V)`` (float) against ``target`` ``(N,)`` ids,
    with ``label_smoothing`` in [0, 1); rows whose target is ``ignore_index`` count zero.

    The same value and gradient as ``F.cross_entropy(logits, target, ignore_index=...,
    label_smoothing=..., reduction="sum")``, computed with fewer passes over the logits (see
    the module's docstring). A scalar tensor.

    ``inplace=True`` writes the log-probabilities over ``logits`` (and, in the backward pass,
    the gradient over them): for logits no one reads afterwards. Reading them after is refused
    by autograd where it can tell (a tensor saved for another backward), and a graph so built
    runs backward once. Under ``torch.compile`` it is ignored (the compiled graph owns its
    buffers).
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
    # Under torch.compile the graph plans its own buffers, and a write to an input inside an
    # autograd.Function that does not mark it dirty is not traced faithfully (it gave wrong
    # gradients under DDP): there the loss is computed out of place.
    inplace = bool(inplace) and not torch.compiler.is_compiling()
    result: Tensor = _SmoothedCrossEntropy.apply(
        logits, target.long(), int(ignore_index), smoothing, inplace
    )
    return result


def _shape(x: object) -> str:
    if isinstance(x, Tensor):
        return f"{x.dtype} of shape {tuple(x.shape)}"
    return type(x).__name__

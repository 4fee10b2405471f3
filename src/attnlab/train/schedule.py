"""The learning-rate schedule of the paper (Vaswani et al. 2017, sec. 5.3, eq. 3).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

The rate grows linearly for the first ``warmup`` steps, then decays as the inverse square root
of the step. The two terms meet at ``step == warmup``, the peak, whose value is
``d_model^-0.5 * warmup^-0.5`` (about ``7.0e-4`` for the paper's ``d_model = 512``,
``warmup = 4000``). ``factor`` scales the whole curve (The Annotated Transformer's ``factor``);
the paper's value is 1.

Steps are 1-based, as in the paper: the first optimizer update is step 1 (step 0 would give a
rate of 0). ``torch.optim.lr_scheduler.LambdaLR`` counts from 0; :func:`transformer_lambda`
shifts its counter by one.

The Vision Transformer (Dosovitskiy et al. 2021) trains with another common schedule, linear
warm-up then cosine decay to zero over a fixed number of steps: :func:`cosine_lr` and
:func:`cosine_lambda`, with the same 1-based steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real

import torch
from torch import Tensor

from .._checks import check_int, check_positive_number, check_type

__all__ = [
    "cosine_lambda",
    "cosine_lr",
    "peak_lr",
    "transformer_lambda",
    "transformer_lr",
    "transformer_lr_tensor",
]


def _check_curve(d_model: object, warmup: object, factor: object) -> tuple[float, float, float]:
    return (
        check_positive_number(d_model, "d_model"),
        check_positive_number(warmup, "warmup"),
        check_positive_number(factor, "factor"),
    )


def transformer_lr(
    step: int | float, d_model: int = 512, warmup: int = 4000, factor: float = 1.0
) -> float:
    """The paper's learning rate at ``step`` (Vaswani et al. 2017, sec. 5.3, eq. 3).

    ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``: linear warm-up to the peak
    at ``step == warmup``, of value ``factor * d_model^-0.5 * warmup^-0.5`` (``7.0e-4`` for
    512 / 4000), then decay as ``step^-0.5``.

    Args:
        step: the 1-based optimizer step, a number >= 1.
        d_model: the model width (512 in the base model).
        warmup: the number of warm-up steps (4000 in the paper).
        factor: a scale on the whole curve (1 in the paper).

    Raises:
        ValueError: ``step < 1`` (steps are 1-based) or a non-positive ``d_model``, ``warmup``
            or ``factor``.
    """
    d, w, f = _check_curve(d_model, warmup, factor)
    if not (isinstance(step, Real) and not isinstance(step, bool) and math.isfinite(step)):
        raise ValueError(f"step: expected a finite number >= 1 (steps are 1-based), got {step!r}")
    if step < 1:
        raise ValueError(f"step: expected >= 1 (steps are 1-based), got {step!r}")
    s = float(step)
    return f * d**-0.5 * min(s**-0.5, s * w**-1.5)


def peak_lr(d_model: int = 512, warmup: int = 4000, factor: float = 1.0) -> float:
    """The largest rate of eq. 3, reached at ``step == warmup``:
    ``factor * d_model^-0.5 * warmup^-0.5`` (``6.99e-4`` for 512 / 4000)."""
    d, w, f = _check_curve(d_model, warmup, factor)
    return f * d**-0.5 * w**-0.5


def transformer_lr_tensor(
    steps: Tensor, d_model: int = 512, warmup: int = 4000, factor: float = 1.0
) -> Tensor:
    """Vectorised :func:`transformer_lr` (eq. 3) over a tensor of 1-based steps.

    Shape: ``steps`` of any shape, integer or floating, every value >= 1 -> float64 rates of the
    same shape, on the same device. The values agree with :func:`transformer_lr`'s to rounding
    (torch's float64 ``rsqrt`` is not correctly rounded: relative differences up to ~2e-16).
    """
    d, w, f = _check_curve(d_model, warmup, factor)
    check_type(steps, Tensor, "steps", "a Tensor")
    if steps.dtype == torch.bool or steps.is_complex():
        raise TypeError(f"steps: expected an integer or floating tensor, got dtype {steps.dtype}")
    s = steps.to(torch.float64)
    if s.numel() and not bool((s >= 1).all()):  # NaN fails the comparison too
        bad = s[~(s >= 1)][0].item()
        raise ValueError(f"steps: expected every step >= 1 (steps are 1-based), got {bad!r}")
    return f * d**-0.5 * torch.minimum(s.rsqrt(), s * w**-1.5)


def transformer_lambda(
    d_model: int = 512, warmup: int = 4000, factor: float = 1.0, base_lr: float = 1.0
) -> Callable[[int], float]:
    """A ``lr_lambda`` for ``torch.optim.lr_scheduler.LambdaLR`` that follows eq. 3.

    LambdaLR sets each group's rate to ``initial_lr * lr_lambda(epoch)``, where ``initial_lr``
    is the ``lr`` the optimizer was built with and ``epoch`` counts ``scheduler.step()`` calls
    **from 0**. The returned function maps that counter to the paper's 1-based step
    (``epoch + 1``) and divides by ``base_lr``, so the optimizer's rate before its ``n``-th
    update (``n = epoch + 1``) is ``transformer_lr(n, d_model, warmup, factor)``.

    Args:
        base_lr: the ``lr`` given to the optimizer (1.0 is the simplest choice; with another
            value the rates agree to rounding, within an ulp).

    Example::

        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = LambdaLR(opt, transformer_lambda(512, 4000))
        for batch in batches:
            loss(batch).backward(); opt.step(); sched.step()   # update n used transformer_lr(n)
    """
    d, w, f = _check_curve(d_model, warmup, factor)
    base = check_positive_number(base_lr, "base_lr")

    def lr_lambda(epoch: int) -> float:
        rate = transformer_lr(epoch + 1, d, w, f)
        return rate if base == 1.0 else rate / base

    return lr_lambda


def cosine_lr(step: int | float, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then half a cosine down to 0 at
    ``total``: ``peak * step / warmup`` for ``step <= warmup``, else
    ``peak * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2``; 0 after ``total``.
    Steps are 1-based; ``warmup`` may be 0 (the decay starts at once) and must be < ``total``."""
    peak = check_positive_number(peak, "peak")
    w, n = _check_cosine(warmup, total)
    if not isinstance(step, Real) or isinstance(step, bool) or not math.isfinite(step):
        raise ValueError(f"step: expected a finite number, got {step!r}")
    if step < 1:
        raise ValueError(f"step: expected >= 1 (steps are 1-based), got {step!r}")
    if step <= w:
        return peak * step / w
    progress = min(1.0, (step - w) / (n - w))
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def _check_cosine(warmup: object, total: object) -> tuple[int, int]:
    check_int(warmup, "warmup", minimum=0)
    if not isinstance(total, int) or isinstance(total, bool) or total <= warmup:
        raise ValueError(f"total: expected an int greater than warmup={warmup}, got {total!r}")
    return warmup, total


def cosine_lambda(peak: float, warmup: int, total: int) -> Callable[[int], float]:
    """A ``LambdaLR`` ``lr_lambda`` for :func:`cosine_lr` with the optimizer built at
    ``lr=1.0``: the rate before update ``n`` (``n = counter + 1``) is
    ``cosine_lr(n, peak, warmup, total)``."""
    peak = check_positive_number(peak, "peak")
    _check_cosine(warmup, total)
    return lambda epoch: cosine_lr(epoch + 1, peak, warmup, total)

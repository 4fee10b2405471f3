"""Small tensor operations shared by the modules."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_LEVELS = 1 << 16  # the resolution of a dropout rate: one 16-bit uniform per element


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout (Srivastava et al. 2014): zero each element with probability ``p`` and scale the
    rest by ``1 / (1 - p)``; the identity when not ``training`` or ``p == 0``.

    On CPU the mask is drawn faster than torch's, from torch's generator (so seeds and resumed
    runs behave as with torch's): torch's CPU dropout fills its mask with ``bernoulli_``, one
    element at a time, and a ``torch.rand`` mask still costs one 32-bit draw per element on one
    thread, the largest cost of a 2-thread training step after the matrix products. Here each
    64-bit draw (``torch.randint`` over the int64 range) gives four independent uniform 16-bit
    integers ``u``, and an element is kept when ``u >= t`` with ``t = round(p * 2^16)``: it is
    dropped with probability ``t / 2^16`` (``p`` to within ``2^-17``) and the kept ones are
    scaled by ``2^16 / (2^16 - t)``, exactly unbiased. ``benchmarks/model.py --profile`` shows
    the cost in a training step. On other devices it is F.dropout (CUDA's is fused).
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    threshold = min(round(p * _LEVELS), _LEVELS - 1)
    if threshold == 0:  # p below 2^-17: no element is dropped at this resolution
        return x
    count = x.numel()
    # Uniform 64-bit words (randint's range is 2^64 - 1 wide: one value in 2^64 is drawn twice
    # as often, which nothing here can see); each holds four uniform 16-bit lanes. A factory
    # function, so torch.compile traces it (``random_`` would break the graph).
    words = torch.randint(-(2**63), 2**63 - 1, ((count + 3) // 4,), device=x.device)
    lanes = words.view(torch.int16)[:count].view(x.shape)  # u - 2^15, as signed 16-bit
    # Kept (u >= t) as 0 or the scale, in the input's dtype (bf16 masks stay bf16).
    noise = lanes.ge(threshold - _LEVELS // 2).to(x.dtype).mul_(_LEVELS / (_LEVELS - threshold))
    return x * noise

"""Small tensor operations shared by the modules."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout (Srivastava et al. 2014): zero each element with probability ``p`` and scale the
    rest by ``1 / (1 - p)``; the identity when not ``training`` or ``p == 0``.

    The same distribution as ``torch.nn.functional.dropout``, drawn differently on CPU: torch's
    CPU dropout fills its mask with ``bernoulli_``, which draws one element at a time, while
    ``torch.rand`` + ``ge_`` is vectorised (``benchmarks/model.py --profile`` shows the two
    side by side in a training step, and the step's tokens/s against torch). The mask keeps
    an element when a float32 uniform in [0, 1) is >= p, so the drop rate is p to within
    2^-24. On other devices it is F.dropout (CUDA's is fused).
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    # Uniforms in at least float32: a bfloat16 uniform has 8 bits and would round p.
    draw_dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    noise = torch.rand(x.shape, dtype=draw_dtype, device=x.device)
    noise = noise.ge_(p).mul_(1.0 / (1.0 - p))  # 0 or 1 / (1 - p)
    return x * noise.to(x.dtype)

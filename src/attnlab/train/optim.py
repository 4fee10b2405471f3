"""The optimizer and its learning-rate schedule.

* Adam with ``beta1 = 0.9, beta2 = 0.98, eps = 1e-9`` (Vaswani et al. 2017, sec. 5.3), or AdamW
  with decoupled weight decay on the weight matrices (ViT's recipe).
* The rate of eq. 3 (:func:`attnlab.train.schedule.transformer_lr`), or linear warm-up then cosine
  decay to 0 at the last step, through ``LambdaLR`` on a base rate of 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .config import TrainConfig
from .schedule import cosine_lambda, transformer_lambda

__all__ = ["build_optimizer", "lr_lambda", "planned_steps"]


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam (sec. 5.3) at ``lr=1.0`` (the schedule sets the rate), or AdamW with decoupled
    weight decay on the matrices and kernels only when ``weight_decay > 0``."""
    options = {"lr": 1.0, "betas": config.betas, "eps": config.eps}
    if config.weight_decay == 0:
        return torch.optim.Adam(model.parameters(), **options)
    norms_and_tables = (nn.LayerNorm, nn.Embedding)
    no_decay: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if param.dim() < 2 or isinstance(module, norms_and_tables) or name != "weight":
                no_decay.add(id(param))
    params = list(model.parameters())
    groups = [
        {
            "params": [p for p in params if id(p) not in no_decay],
            "weight_decay": config.weight_decay,
        },
        {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], **options)


def planned_steps(config: TrainConfig, batches_per_epoch: int) -> int | None:
    """The optimizer steps a run takes at most, from ``max_steps`` and ``max_epochs`` (None
    when only ``max_minutes`` bounds it)."""
    per_epoch = math.ceil(batches_per_epoch / config.accumulate)
    limits = [config.max_steps]
    if config.max_epochs is not None:
        limits.append(config.max_epochs * per_epoch)
    known = [n for n in limits if n is not None]
    return min(known) if known else None


def lr_lambda(config: TrainConfig, d_model: int, batches_per_epoch: int) -> Callable[[int], float]:
    """The schedule's multiplier of the base rate 1.0 at each scheduler step."""
    if config.schedule == "transformer":
        return transformer_lambda(d_model, config.warmup, config.lr_factor)
    total = planned_steps(config, batches_per_epoch)  # not None: TrainConfig checks it
    if config.warmup >= total:  # type: ignore[operator]
        raise ValueError(
            f"warmup: {config.warmup} warm-up steps, but training lasts {total} steps; the "
            f"cosine schedule needs warmup < its last step"
        )
    return cosine_lambda(config.lr, config.warmup, total)  # type: ignore[arg-type]

"""The validation pass: the loss per unit (target token, image) over a held-out set, and the
objective's other validation metrics, summed over every replica."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .distributed import all_reduce_sum
from .objectives import Batcher, Objective

__all__ = ["validate"]


@torch.no_grad()
def validate(
    objective: Objective,
    model: nn.Module,
    data: Any,
    batcher: Batcher,
    device: torch.device,
    world_size: int,
) -> dict[str, float]:
    """``{"val_loss": summed loss / count, **objective.validation_metrics(...)}`` over this
    replica's shares of ``batcher``'s batches of ``data``, with ``model`` in eval mode (its mode
    is restored); every replica must call it. Draws no random numbers."""
    names = objective.validation_counts
    was_training = model.training
    model.eval()
    loss = torch.zeros((), dtype=torch.float64, device=device)
    count, sums = 0, dict.fromkeys(names, 0)
    try:
        for indices in batcher.batches(0):
            if not indices:
                continue
            batch = objective.collate(data, indices)
            batch_loss, counts = objective.evaluate_batch(model, batch)
            loss += batch_loss.double()
            for name in names:
                sums[name] += counts[name]
            count += objective.count(batch)
    finally:
        model.train(was_training)
    total, count_all, *totals = all_reduce_sum(
        [loss.item(), count, *sums.values()], device, world_size
    )
    metrics = objective.validation_metrics(dict(zip(names, totals, strict=True)), count_all)
    return {"val_loss": total / count_all, **metrics}

"""One optimizer update: the loss of every micro-batch of a step, on every replica, normalised
by the step's whole count (Vaswani et al. 2017, sec. 5.4: summed over the target tokens, and
divided by their number over every accumulation micro-batch and replica, so the gradient does
not depend on how a step is split), then clipping, the optimizer and the schedule."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from .config import TrainConfig
from .distributed import all_reduce_sum, wrap_ddp
from .objectives import Batch, Objective

__all__ = ["OptimizerStep"]


class OptimizerStep:
    """Updates ``model`` by ``optimizer`` and ``scheduler`` with ``objective``'s loss; with more
    than one replica, through DistributedDataParallel (made here: it broadcasts rank 0's
    weights, so the model must hold the weights to start from)."""

    def __init__(
        self,
        objective: Objective,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: LRScheduler,
        config: TrainConfig,
        device: torch.device,
        world_size: int,
    ) -> None:
        self.objective, self.model = objective, model
        self.ddp = wrap_ddp(model, device) if world_size > 1 else None
        self.optimizer, self.scheduler, self.config = optimizer, scheduler, config
        self.device, self.world_size = device, world_size

    def __call__(
        self,
        data: Any,
        micro_batches: Sequence[list[int]],
        *,
        number: int,
        out_of_time: Callable[[], bool],
    ) -> tuple[float, int, float, bool]:
        """Update on this replica's shares ``micro_batches`` of ``data`` (step ``number``).

        Returns the step's summed loss and count (target tokens, images) over all replicas,
        the learning rate the update used, and whether any replica's ``out_of_time()``, asked
        after its backward passes, said True.
        """
        objective, ddp = self.objective, self.ddp
        module = ddp if ddp is not None else self.model
        batches: list[Batch | None] = [
            objective.collate(data, indices) if indices else None for indices in micro_batches
        ]
        local_count = sum(objective.count(b) for b in batches if b is not None)
        (global_count,) = all_reduce_sum([local_count], self.device, self.world_size)
        if global_count == 0:
            raise ValueError("train_examples: a batch has no target token that is not pad_id")
        # Sum of losses / count of the whole step. DDP averages gradients over replicas, so
        # each replica's share is scaled by world_size to undo that division.
        scale = self.world_size / global_count
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            if batch is None and not (last and ddp is not None):
                continue  # nothing to add to this replica's gradient, and no exchange to join
            sync = ddp is None or last
            no_sync = contextlib.nullcontext() if sync else ddp.no_sync()  # type: ignore[union-attr, operator]
            with no_sync:
                if batch is None:
                    objective.dummy_loss(module).backward()
                    continue
                loss = objective.loss(module, batch)
                (loss * scale).backward()
                loss_sum += loss.detach().double()
        total_loss, votes = all_reduce_sum(
            [loss_sum.item(), float(out_of_time())], self.device, self.world_size
        )
        if not math.isfinite(total_loss):
            raise FloatingPointError(
                f"step {number}: the training loss is {total_loss}; lower lr_factor or "
                f"clip_norm, or check the data"
            )
        if self.config.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total_loss, int(global_count), lr, votes > 0

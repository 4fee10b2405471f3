"""One optimizer update: the loss of every micro-batch of a step, on every replica, normalised
by the step's whole count (Vaswani et al. 2017, sec. 5.4: summed over the target tokens, and
divided by their number over every accumulation micro-batch and replica, so the gradient does
not depend on how a step is split), then clipping, the optimizer and the schedule."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
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
        #: The loss to differentiate: the objective's, or its compiled form (config.compile).
        self.loss: Callable[[nn.Module, Batch], torch.Tensor] = objective.loss
        #: Why the step runs eagerly although config.compile asked otherwise ("" if it doesn't).
        self.why_eager = ""
        #: Seconds of the first compiled step (compiling included), once it has run.
        self.first_compiled_s: float | None = None
        #: Whether self.loss is the compiled one.
        self.compiled = False
        if config.compile:
            self.why_eager = why_not_compile(device)
            if not self.why_eager:
                self.loss, self.compiled = compiled_loss(objective.loss), True

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

        def update() -> tuple[float, int, float, bool]:
            return self._update(data, micro_batches, number=number, out_of_time=out_of_time)

        if self.compiled and self.first_compiled_s is None:
            return self._first_compiled(update)
        return update()

    def _update(
        self,
        data: Any,
        micro_batches: Sequence[list[int]],
        *,
        number: int,
        out_of_time: Callable[[], bool],
    ) -> tuple[float, int, float, bool]:
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
                loss = self.loss(module, batch)
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

    def _first_compiled(
        self, update: Callable[[], tuple[float, int, float, bool]]
    ) -> tuple[float, int, float, bool]:
        """The first step with the compiled loss, timed; if compiling fails, the step again
        eagerly (its gradients discarded first), and eager from then on."""
        start = time.perf_counter()
        try:
            result = update()
        except FloatingPointError:
            raise
        except Exception as error:  # inductor's BackendCompilerFailed, a missing toolchain...
            self.optimizer.zero_grad(set_to_none=True)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            self.why_eager = f"torch.compile failed ({type(error).__name__}: {reason[:200]})"
            self.loss, self.compiled = self.objective.loss, False
            return update()
        finally:
            self.first_compiled_s = time.perf_counter() - start
        return result


def why_not_compile(device: torch.device) -> str:
    """Why a training step on ``device`` cannot be compiled here: one line, ``""`` if it can.
    Inductor turns a CPU graph into C++, so it needs a C++ compiler on the PATH."""
    if device.type == "cpu":
        compiler = os.environ.get("CXX", "g++")
        if shutil.which(compiler) is None and shutil.which("clang++") is None:
            return (
                f"torch.compile needs a C++ compiler for the CPU, and {compiler!r} is not on PATH"
            )
    return ""


def compiled_loss(loss: Callable[[nn.Module, Batch], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss`` through ``torch.compile``: inductor, dynamic shapes (batches vary in sentences
    and length, and share one graph), and ``fallback_random`` so that dropout draws from torch's
    generator exactly as the eager step does (inductor's own random numbers would differ, and a
    compiled run would no longer follow the eager one, nor the same seed give the same model)."""
    compiled: Callable[..., torch.Tensor] = torch.compile(
        loss, dynamic=True, options={"fallback_random": True}
    )
    return compiled

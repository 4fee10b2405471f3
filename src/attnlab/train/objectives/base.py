"""What the training loop asks of a task: the :class:`Objective` protocol.

The loop (:class:`attnlab.train.Trainer`) knows no task. It draws batches of indices from the
objective's batcher, has the objective collate them into tensors, sums the objective's loss
over them and divides by the objective's count (target tokens, images), and asks it for the
validation metrics beyond the loss. A task is one class that does these things for one kind
of model; a task names its own (``Task.objective``), and the trainer is handed it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor, nn

from ..config import TrainConfig

__all__ = ["Batch", "Batcher", "Objective", "autocast"]

Batch = tuple[Tensor, ...]


class Batcher(Protocol):
    """Batches of example indices: :class:`attnlab.data.batching.TokenBatcher` and
    :class:`attnlab.data.images.ImageBatcher`."""

    num_replicas: int
    rank: int
    seed: int

    def __len__(self) -> int:
        """The number of examples."""
        ...

    def batches(self, epoch: int) -> Sequence[list[int]]:
        """This replica's batches of ``epoch`` (possibly empty shares of global batches): a
        list of lists, or :class:`attnlab.data.batching.IndexBatches` (the same, held lean)."""
        ...

    def num_batches(self, epoch: int) -> int:
        """The number of global batches of ``epoch``."""
        ...


class Objective(Protocol):
    """A training task for one kind of model, built as ``cls(model, config, device)``.

    Attributes:
        model_class: the model class it trains.
        unit: what the loss is summed over, plural (``"tokens"``, ``"images"``): the loss is
            reported per unit, the speed in units per second, and the summary counts
            ``train_{unit}``.
        columns: the first columns of ``metrics.csv``
            (:func:`attnlab.train.metrics.metrics_columns`): the speed is ``columns[4]``,
            then ``val_loss`` and the objective's other validation metrics.
        rate_unit: the speed's unit beside the progress bar (``"tok/s"``).
        validation_counts: the names of the integer sums :meth:`evaluate_batch` returns beside
            the loss (summed over batches and replicas for :meth:`validation_metrics`).
    """

    model_class: ClassVar[type[nn.Module]]
    unit: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    rate_unit: ClassVar[str]
    validation_counts: ClassVar[tuple[str, ...]]

    def __init__(self, model: nn.Module, config: TrainConfig, device: torch.device) -> None: ...

    def prepare(self, data: object, name: str) -> Any:
        """``data`` as the dataset the batcher indexes, checked against the model (errors
        name ``name``: ``train_examples`` or ``valid_examples``)."""
        ...

    def batcher(self, data: Any, name: str, **options: Any) -> Batcher:
        """A batcher over ``data`` (``options``: seed / shuffle, num_replicas, rank)."""
        ...

    def collate(self, data: Any, indices: Sequence[int]) -> Batch:
        """The tensors of the examples ``indices`` of ``data``."""
        ...

    def count(self, batch: Batch) -> int:
        """What the batch's loss is summed over (its non-pad target tokens, its images)."""
        ...

    def loss(self, module: nn.Module, batch: Batch) -> Tensor:
        """The summed loss of ``batch``, a float32 scalar (training-only behaviour, such as
        augmentation, when ``module.training``)."""
        ...

    def evaluate_batch(self, module: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, int]]:
        """The summed loss of ``batch`` and its ``validation_counts`` (the evaluation hook)."""
        ...

    def validation_metrics(self, sums: Mapping[str, float], count: float) -> dict[str, float]:
        """The metrics row's validation columns beyond ``val_loss`` from the summed
        ``validation_counts`` over ``count`` units."""
        ...

    def dummy_loss(self, module: nn.Module) -> Tensor:
        """A zero loss that touches every parameter (a replica whose share of a batch is
        empty still joins DistributedDataParallel's gradient exchange)."""
        ...

    def fingerprint(self, data: Any) -> str:
        """A short hash of the training data, saved with checkpoints (a resume on other data
        is refused)."""
        ...


def autocast(device: torch.device, config: TrainConfig) -> contextlib.AbstractContextManager[Any]:
    """bfloat16 autocast on ``device`` when ``config.bf16``, else nothing."""
    if not config.bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

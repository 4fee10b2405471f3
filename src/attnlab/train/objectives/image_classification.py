"""Image classification: a :class:`attnlab.models.vision.VisionTransformer` learns the label of each
image (Dosovitskiy et al. 2021), with label smoothing and optional affine augmentation; each
evaluation also reports the accuracy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...data.images import ImageBatcher, LabelledImages, random_affine
from ...models.vision import VisionTransformer
from ..config import TrainConfig
from ..metrics import IMAGE_METRICS_COLUMNS
from .base import Batch, autocast

__all__ = ["ImageClassificationObjective"]


class ImageClassificationObjective:
    """Summed label-smoothed cross-entropy over the images of a batch of ``batch_size``."""

    model_class: ClassVar[type[nn.Module]] = VisionTransformer
    unit: ClassVar[str] = "images"
    columns: ClassVar[tuple[str, ...]] = IMAGE_METRICS_COLUMNS
    rate_unit: ClassVar[str] = "img/s"
    validation_counts: ClassVar[tuple[str, ...]] = ("correct",)

    def __init__(self, model: nn.Module, config: TrainConfig, device: torch.device) -> None:
        if config.batch_size is None:
            raise ValueError(
                "batch_size: training a VisionTransformer needs the images per batch, got None"
            )
        self.model_config: Any = model.config
        self.config = config
        self.device = device

    def prepare(self, data: object, name: str) -> LabelledImages:
        if not isinstance(data, LabelledImages):
            raise TypeError(
                f"{name}: a VisionTransformer trains on LabelledImages (attnlab.data.images), "
                f"got {type(data).__name__}"
            )
        config = self.model_config
        expected = (config.in_channels, config.image_size, config.image_size)
        if data.image_shape != expected:
            raise ValueError(
                f"{name}: images of shape {data.image_shape} (C, H, W), but the model takes "
                f"{expected}"
            )
        if data.num_classes != config.num_classes:
            raise ValueError(
                f"{name}: {data.num_classes} classes, but the model has num_classes="
                f"{config.num_classes}"
            )
        return data

    def batcher(self, data: LabelledImages, name: str, **options: Any) -> ImageBatcher:
        return ImageBatcher(len(data), self.config.batch_size, **options)  # type: ignore[arg-type]

    def collate(self, data: LabelledImages, indices: Sequence[int]) -> Batch:
        return data.batch(indices)

    def count(self, batch: Batch) -> int:
        return len(batch[1])

    def _loss_and_hits(self, module: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
        """The summed loss over the images of ``batch`` (jittered when ``augment`` and
        training), and which images the model classed right: ``(loss (), correct (B,) bool)``."""
        images, labels = (t.to(self.device, non_blocking=True) for t in batch)
        if self.config.augment and module.training:
            images = random_affine(images)
        with autocast(self.device, self.config):
            logits = module(images).float()  # (B, classes)
        loss = F.cross_entropy(
            logits, labels, label_smoothing=self.config.label_smoothing, reduction="sum"
        )
        return loss, logits.argmax(dim=-1) == labels

    def loss(self, module: nn.Module, batch: Batch) -> Tensor:
        return self._loss_and_hits(module, batch)[0]

    def evaluate_batch(self, module: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, int]]:
        loss, hits = self._loss_and_hits(module, batch)
        return loss, {"correct": int(hits.sum())}

    def validation_metrics(self, sums: Mapping[str, float], count: float) -> dict[str, float]:
        return {"val_accuracy": sums["correct"] / count}

    def dummy_loss(self, module: nn.Module) -> Tensor:
        c = self.model_config
        blank = torch.zeros(1, c.in_channels, c.image_size, c.image_size, device=self.device)
        with autocast(self.device, self.config):
            return module(blank).float().sum() * 0.0

    def fingerprint(self, data: LabelledImages) -> str:
        return data.fingerprint()

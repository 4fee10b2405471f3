"""The ``digits`` task: a :class:`attnlab.VisionTransformer` on scikit-learn's 8x8 handwritten
digits (shipped with attnlab), stratified held-out sets of ``valid_size`` and ``test_size``
images (180 and 360 of the 1,797 by default); scored by accuracy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .base import Setup, Task, register_task, seeded
from .context import TaskContext

__all__ = ["Digits"]


@register_task
@dataclass
class Digits(Task):
    name: str = "digits"
    valid_size: int = 180
    test_size: int = 360
    seed: int = 0

    recipe: ClassVar[str | None] = "digits.toml"
    metric: ClassVar[str] = "accuracy"

    def load(self) -> Any:
        from ..data.images import digits

        return digits(valid_size=self.valid_size, test_size=self.test_size, seed=self.seed)

    @classmethod
    def config_class(cls) -> type:
        from ..models.vision import VisionConfig

        return VisionConfig

    def model_config(self, model: Mapping[str, Any], joint: bool, src_vocab: int, tgt_vocab: int):
        from ..models.vision import VisionConfig

        options = dict(model)
        return VisionConfig.preset(options.pop("preset", "digits"), **options)

    def objective(self) -> type:
        from ..train.objectives import ImageClassificationObjective

        return ImageClassificationObjective

    def validation_columns(self, ctx: TaskContext) -> tuple[str, ...]:
        from ..train.metrics import IMAGE_METRICS_COLUMNS

        return IMAGE_METRICS_COLUMNS[IMAGE_METRICS_COLUMNS.index("val_loss") :]

    def setup(self, ctx: TaskContext, data: Any, *, resume: bool, rank: int, note) -> Setup:
        from ..models.vision import VisionTransformer

        config = self.config_for(ctx)
        model = seeded(ctx.seed, lambda: VisionTransformer(config))
        note(
            f"model: VisionTransformer, {ctx.model.get('preset')} preset, "
            f"{model.num_parameters():,} parameters, {model.config.num_patches} patches of "
            f"{model.config.patch_size}x{model.config.patch_size} pixels; "
            f"{len(data['train']):,} training images"
        )
        return Setup(model, data["train"], data["valid"])

    def scores(
        self,
        model_dir: Path,
        items: Any,
        limit: int | None,
        ctx: TaskContext,
        *,
        examples: int,
        device: str | None,
        **_: Any,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Accuracy of the classifier on the images of a split, and its first errors."""
        import torch

        from ..inference.scores import classify
        from ..models.transformer import load_pretrained

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        model = load_pretrained(model_dir, device=device)
        images, labels = items.images[:limit], items.labels[:limit]
        result = classify(model, images, labels, classes=items.classes)
        return result, {"examples": result.pop("errors")[:examples]}

    @classmethod
    def report(cls, result: Mapping[str, Any], *, show: int = 3, **_: Any) -> list[str]:
        lines = [
            f"{result['split']} ({result['images']:,} images): accuracy "
            f"{result['accuracy']:.2%} ({result['correct']:,} correct)"
        ]
        worst = sorted(result["per_class"].items(), key=lambda kv: (kv[1] is None, kv[1]))[:3]
        lines.append(
            "  hardest classes: " + ", ".join(f"{k} {v:.1%}" for k, v in worst if v is not None)
        )
        for error in result.get("examples", [])[:show]:
            lines.append(
                f"  image {error['index']}: a {error['label']} taken for a {error['predicted']} "
                f"(p = {error['confidence']:.2f})"
            )
        return lines

    @classmethod
    def json_view(cls, result: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        keys = ("accuracy", "correct", "images", "per_class", "split", "task")
        return {k: result[k] for k in keys}

    def score_line(self, result: Mapping[str, Any]) -> str:
        return f"{result['split']}: accuracy {result['accuracy']:.2%}"

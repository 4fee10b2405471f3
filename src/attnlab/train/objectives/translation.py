"""Translation: an encoder-decoder :class:`attnlab.models.transformer.Transformer` learns the target
of each source sentence, teacher-forced (Vaswani et al. 2017, sec. 5)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from ...models.transformer import Transformer
from .tokens import TokenObjective

__all__ = ["TranslationObjective"]


class TranslationObjective(TokenObjective):
    """Next-target-token cross-entropy given the source: ``model(src, tgt_in)``."""

    model_class: ClassVar[type[nn.Module]] = Transformer
    uses_source: ClassVar[bool] = True

    def logits(self, module: nn.Module, src: Tensor, tgt_in: Tensor) -> Tensor:
        return module(src, tgt_in)  # type: ignore[no-any-return]

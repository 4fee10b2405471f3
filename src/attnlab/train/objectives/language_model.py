"""Language modelling: a decoder-only :class:`attnlab.models.transformer.TransformerLM` learns each
next token of its lines (the examples' sources are empty and ignored)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from ...models.transformer import TransformerLM
from .tokens import TokenObjective

__all__ = ["LanguageModelObjective"]


class LanguageModelObjective(TokenObjective):
    """Next-token cross-entropy: ``model(tgt_in)``."""

    model_class: ClassVar[type[nn.Module]] = TransformerLM
    uses_source: ClassVar[bool] = False

    def logits(self, module: nn.Module, src: Tensor, tgt_in: Tensor) -> Tensor:
        return module(tgt_in)  # type: ignore[no-any-return]

"""The training objectives, one module per kind of training. A task names its objective
(``Task.objective()``) and the trainer is handed it (``Trainer(..., objective=...)``):

=====================  ==========================================  ==========================
model                  objective                                   module
=====================  ==========================================  ==========================
Transformer            :class:`TranslationObjective`               ``translation``
TransformerLM          :class:`LanguageModelObjective`             ``language_model``
VisionTransformer      :class:`ImageClassificationObjective`       ``image_classification``
=====================  ==========================================  ==========================

A new objective is a new module with a class that follows :class:`Objective`, named by its
task's ``objective()`` or handed to :class:`~attnlab.train.Trainer` as ``objective``.
"""

from __future__ import annotations

from .base import Batch, Batcher, Objective, autocast
from .image_classification import ImageClassificationObjective
from .language_model import LanguageModelObjective
from .tokens import TokenObjective
from .translation import TranslationObjective

__all__ = [
    "Batch",
    "Batcher",
    "ImageClassificationObjective",
    "LanguageModelObjective",
    "Objective",
    "TokenObjective",
    "TranslationObjective",
    "autocast",
]

"""The training objectives, one module per kind of training. A task names its objective
(``Task.objective``) and the trainer is handed it; for a model trained without a task, the
trainer takes the built-in one for its class (:func:`objective_class`):

=====================  ==========================================  ==========================
model                  objective                                   module
=====================  ==========================================  ==========================
Transformer            :class:`TranslationObjective`               ``translation``
TransformerLM          :class:`LanguageModelObjective`             ``language_model``
VisionTransformer      :class:`ImageClassificationObjective`       ``image_classification``
=====================  ==========================================  ==========================

A new objective is a new module with a class that follows :class:`Objective`, named by its
task (or handed to :class:`~attnlab.train.Trainer` as ``objective``; :func:`register_objective`
makes it the default for its model class).
"""

from __future__ import annotations

from typing import Any

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
    "objective_class",
    "register_objective",
]

_OBJECTIVES: list[Any] = [
    TranslationObjective,
    LanguageModelObjective,
    ImageClassificationObjective,
]


def register_objective(cls: Any) -> Any:
    """Make :class:`attnlab.train.Trainer` train models of ``cls.model_class`` with the
    objective ``cls`` (the newest registration wins); returns ``cls``."""
    _OBJECTIVES.append(cls)
    return cls


def objective_class(model: object) -> Any:
    """The objective class registered for ``model``'s class; TypeError naming the models the
    registered objectives train otherwise."""
    for cls in reversed(_OBJECTIVES):
        if isinstance(model, cls.model_class):
            return cls
    names = [cls.model_class.__name__ for cls in _OBJECTIVES]
    known = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    raise TypeError(f"model: expected an attnlab {known}, got {type(model).__name__}")

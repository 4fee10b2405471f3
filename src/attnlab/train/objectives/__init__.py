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

Deprecated until 0.3.0: a Trainer without ``objective`` takes the one registered for the
model's class (:func:`objective_class`, :func:`register_objective`), with a
``DeprecationWarning``; from 0.3.0 the trainer no longer maps model classes to objectives.
"""

from __future__ import annotations

from typing import Any

from ..._moved import warn_deprecated
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
    """Deprecated (goes in 0.3.0): make a :class:`attnlab.train.Trainer` handed no objective
    train models of ``cls.model_class`` with ``cls`` (the newest registration wins); returns
    ``cls``. Hand the trainer ``objective=cls`` instead."""
    warn_deprecated("register_objective(cls)", "Trainer(..., objective=cls)", outside=__file__)
    _OBJECTIVES.append(cls)
    return cls


def objective_class(model: object) -> Any:
    """Deprecated (goes in 0.3.0): the objective class registered for ``model``'s class.
    Name the objective instead (the table above)."""
    warn_deprecated("objective_class(model)", "the objective's class itself", outside=__file__)
    return registered_objective(model)


def registered_objective(model: object) -> Any:
    """The objective class registered for ``model``'s class, which a Trainer handed no
    objective takes while that spelling is deprecated (not exported: it goes in 0.3.0 with
    the registry); TypeError naming the models the registered objectives train otherwise."""
    for cls in reversed(_OBJECTIVES):
        if isinstance(model, cls.model_class):
            return cls
    names = [cls.model_class.__name__ for cls in _OBJECTIVES]
    known = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    raise TypeError(f"model: expected an attnlab {known}, got {type(model).__name__}")

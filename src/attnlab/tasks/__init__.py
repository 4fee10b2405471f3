"""The tasks a job can name, registered by name (:data:`TASKS`): ``numbers``, ``multi30k``,
``files`` (translation), ``text`` (a language model) and ``digits`` (a Vision Transformer).

Each is one class in one module (:class:`~attnlab.tasks.base.Task`): its ``[task]`` options,
data, tokenizers, model, objective, evaluation and result lines; what it reads of its job
comes as a :class:`~attnlab.tasks.context.TaskContext`. See CONTRIBUTING.md, "A task", for
how to add one."""

# Each module registers its task; in this order `attnlab train --task` offers them.
# isort: off
from . import numbers, multi30k, files, text, digits  # noqa: F401

# isort: on
from .base import TASKS, Setup, Task, get_task, register_task
from .context import EvalOptions, TaskContext, TokenizerOptions
from .translation import TRANSLATION_VALIDATION, TranslationTask


def _import_the_others() -> None:
    """Import every other module of this package: a new task's module registers it with no
    edit here."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_import_the_others()

__all__ = [
    "TASKS",
    "TRANSLATION_VALIDATION",
    "EvalOptions",
    "Setup",
    "Task",
    "TaskContext",
    "TokenizerOptions",
    "TranslationTask",
    "get_task",
    "register_task",
]

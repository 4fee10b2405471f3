"""The recipes: packaged job files (``attnlab/recipes/*.toml``, linked from the repository's
``configs/``) that fill in what a job leaves out. A task names its own (``Task.recipe``);
``finetune.toml`` is what a fine-tuning run (``[model] init_from``) runs. This module is their
one reader: :func:`recipe_text` for the file as written (``attnlab config --recipe``),
:func:`recipe` for its tables (a job's defaults)."""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Mapping
from importlib import resources
from typing import Any

from ..tasks import TASKS

__all__ = [
    "FINETUNE_RECIPE",
    "finetune_defaults",
    "recipe",
    "recipe_names",
    "recipe_text",
    "toml_loads",
]

#: The fine-tuning recipe (packaged, as the tasks' recipes): its [train] and [eval] tables.
FINETUNE_RECIPE = "finetune.toml"


def toml_loads(text: str) -> dict[str, Any]:
    """The tables of TOML ``text`` (tomllib's, or tomli's before Python 3.11).

    Raises:
        ValueError: ``text`` is not valid TOML (tomllib's ``TOMLDecodeError`` is one).
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads(text)


def _recipe_files() -> dict[str, str]:
    """Recipe name -> its packaged file: each task with a recipe by the task's name, and every
    file by its own name (``multi30k-en-de``)."""
    files = {
        entry.name[: -len(".toml")]: entry.name
        for entry in resources.files("attnlab").joinpath("recipes").iterdir()
        if entry.name.endswith(".toml")
    }
    tasks = {name: task.recipe for name, task in TASKS.items() if task.recipe is not None}
    return {**tasks, **{k: v for k, v in sorted(files.items()) if k not in tasks}}


def recipe_names() -> list[str]:
    """What ``attnlab config --recipe`` and ``attnlab train --config`` take as a recipe's name."""
    return list(_recipe_files())


def recipe_text(name: str) -> str:
    """The packaged recipe ``name`` (see :func:`recipe_names`), as the file has it (comments and
    all); ValueError for another name."""
    files = _recipe_files()
    if name not in files:
        raise ValueError(f"recipe: expected one of {', '.join(files)}, got {name!r}")
    return _read(files[name])


@functools.cache
def _read(file: str) -> str:
    return resources.files("attnlab").joinpath("recipes", file).read_text(encoding="utf-8")


@functools.cache
def _tables(file: str) -> dict[str, dict[str, Any]]:
    return toml_loads(_read(file))


def recipe(name: str) -> dict[str, dict[str, Any]]:
    """The tables of task ``name``'s recipe (empty for a task without one), a fresh copy: what
    ``attnlab train --task NAME`` runs where the command line leaves a setting out."""
    file = TASKS[name].recipe if name in TASKS else None
    return copy.deepcopy(_tables(file)) if file is not None else {}


def finetune_defaults(task_recipe: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What a fine-tuning job (``[model] init_from``) runs where it leaves a setting out: its
    task's ``[task]`` and ``[eval]`` tables, then the fine-tuning recipe's ``[train]`` and
    ``[eval]`` (a low learning rate, a short warm-up, keep-best on validation). The task
    recipe's ``[model]``, ``[tokenizer]`` and ``[train]`` are a fresh model's, not used."""
    tuning = copy.deepcopy(_tables(FINETUNE_RECIPE))
    return {
        "task": dict(task_recipe.get("task", {})),
        "train": tuning.get("train", {}),
        "eval": {**task_recipe.get("eval", {}), **tuning.get("eval", {})},
    }

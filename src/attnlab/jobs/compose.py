"""Composing a job, as ``attnlab train`` does and any Python caller can: the task's recipe, then
a job file (or a packaged recipe, or tables), then flags, then ``--set``; a later one wins
(:func:`compose_job`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..tasks import get_task
from .job import OPTIONAL_TABLES, Job
from .recipes import recipe_names, recipe_text, toml_loads

__all__ = ["compose_job"]


def compose_job(
    config: str | os.PathLike | Mapping[str, Any] | None = None,
    *,
    task: str | None = None,
    flags: Mapping[tuple[str, str], Any] | None = None,
    sets: Iterable[tuple[str, str, Any]] = (),
    note: Callable[[str], object] | None = None,
) -> Job:
    """The job of, in this order, a later one winning:

    1. the recipe of its task (``task``, else the task ``config`` names, else ``numbers``),
       or the fine-tuning recipe when ``[model] init_from`` is given;
    2. ``config``: a TOML job file, the name of a packaged recipe
       (:func:`~attnlab.jobs.recipes.recipe_names`), or tables of settings;
    3. ``flags``: settings by ``(table, key)``, as ``attnlab train``'s flags give them. A
       ``("model", "preset")`` chooses the whole model: the other ``[model]`` sizes of the
       recipe and ``config`` are dropped, each named in a line to ``note``. A ``[task]`` key
       the task has no option for is refused;
    4. ``sets``: ``(table, key, value)`` settings, as ``--set TABLE.KEY=VALUE`` gives them
       (a ``distill`` key makes the job a student).

    Every key is checked (:meth:`Job.from_dict`: ValueError naming the table and key, and the
    file when ``config`` is one); the values are checked by :meth:`Job.check`.
    """
    flags = {key: value for key, value in (flags or {}).items() if value is not None}
    start = _tables(config) if config is not None else {}
    if config is None and task is not None:
        start["task"] = {"name": task}
    init_from = flags.get(("model", "init_from"))
    if init_from is not None:  # before the recipe: the fine-tuning recipe fills in
        start["model"] = {**start.get("model", {}), "init_from": init_from}
    try:
        data = Job.from_dict(start).to_dict()  # the recipe under the file
    except (TypeError, ValueError) as e:
        if isinstance(config, (str, os.PathLike)):
            raise ValueError(f"{_name(config)}: {e}") from None
        raise
    if task is not None:
        data["task"]["name"] = task
    preset = flags.pop(("model", "preset"), None)
    if preset is not None:
        data["model"] = _whole_preset(data["model"], preset, note)
    for (table, key), value in flags.items():
        data[table][key] = value
    for table, key, value in sets:
        if table in OPTIONAL_TABLES:  # --set distill.teachers=[...] makes a job a student
            data.setdefault(table, {})
        if table not in data:
            raise ValueError(f"--set {table}.{key}: unknown table {table!r}; use {sorted(data)}")
        data[table][key] = value
    _check_task_flags(data["task"], [key for table, key in flags if table == "task"])
    return Job.from_dict(data)


def _name(config: str | os.PathLike) -> str:
    """How errors name ``config``: its path, or the recipe it names."""
    return f"recipe {config}" if _is_recipe(config) else os.fspath(config)


def _is_recipe(config: str | os.PathLike) -> bool:
    return not Path(config).exists() and os.fspath(config) in recipe_names()


def _tables(config: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """The tables of ``config``: a copy of the tables given, or those of the TOML file or
    packaged recipe it names; FileNotFoundError when it is neither."""
    if isinstance(config, Mapping):
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in config.items()}
    if _is_recipe(config):
        return toml_loads(recipe_text(os.fspath(config)))
    path = Path(config)
    if not path.is_file():
        raise FileNotFoundError(f"{config}: no such file or recipe")
    try:
        return toml_loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason})") from None
    except ValueError as e:  # tomllib's decode error
        raise ValueError(f"{path}: {e}") from None


def _whole_preset(model: dict[str, Any], preset: str, note) -> dict[str, Any]:
    """The ``[model]`` table with ``preset`` chosen whole: each field the preset defines given
    the preset's own value (the job's tables merge over the recipe's, so a field left out
    would come back from it); others (``init_from``) stay."""
    from ..models.transformer import TransformerConfig
    from ..models.vision import VisionConfig

    vision = preset in VisionConfig.preset_names()
    config = (VisionConfig if vision else TransformerConfig).preset(preset)
    dropped = {k: v for k, v in model.items() if k != "preset" and hasattr(config, k)}
    if dropped and note is not None:
        settings = ", ".join(f"{k} = {v}" for k, v in dropped.items())
        note(
            f"--preset {preset}: the model is the preset's; not using [model] {settings} "
            f"(--set model.KEY=VALUE sets one)"
        )
    return {**model, "preset": preset, **{k: getattr(config, k) for k in dropped}}


def _check_task_flags(table: Mapping[str, Any], keys: list[str]) -> None:
    """A ``[task]`` flag the task has no option for: ValueError naming ``[task]`` and the key
    (``attnlab train`` names its flag), before the table's other keys are checked."""
    try:
        cls = get_task(table.get("name", "numbers"))
    except ValueError:
        return  # Job.from_dict names the unknown task
    own = {f.name for f in dataclasses.fields(cls)}
    for key in keys:
        if key not in own:
            raise ValueError(f"[task] {key}: the {cls.name} task has no such option")

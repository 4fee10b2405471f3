"""A job: its five tables (and a student's ``[distill]``, :mod:`attnlab.tasks.distill`),
checked as parsed (every key) and by :meth:`Job.check` (every value, once), which hands the
task its :class:`~attnlab.tasks.context.TaskContext`. The ``[task]`` table is a task object of
:mod:`attnlab.tasks`, which owns its options; what a job leaves out comes from its task's recipe
(:mod:`attnlab.jobs.recipes`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._checks import check_keys, closest, dataclass_from
from .._rundir import JOB_FILE
from ..tasks import Task, get_task
from ..tasks.context import EvalOptions, TaskContext, TokenizerOptions
from ..tasks.distill import DistillOptions
from ..tasks.translation import FINE_TUNABLE, starting_config
from .recipes import FINETUNE_RECIPE, finetune_defaults, recipe, toml_loads

__all__ = [
    "FINETUNE_RECIPE",
    "FINE_TUNABLE",
    "JOB_FILE",
    "OPTIONAL_TABLES",
    "TABLES",
    "DistillOptions",
    "EvalOptions",
    "Job",
    "TokenizerOptions",
    "finetune_defaults",
    "recipe",
    "task_from",
    "toml_loads",
]

TABLES = ("task", "tokenizer", "model", "train", "eval")
#: The tables a job may add: ``[distill]``, a student's teachers (:mod:`attnlab.tasks.distill`).
OPTIONAL_TABLES = ("distill",)
DEFAULT_TASK = "numbers"


def task_from(table: Mapping[str, Any], *, saved: bool = False) -> Task:
    """The task of a ``[task]`` table (its ``name``, default ``numbers``); every key checked
    (ValueError naming ``[task]`` and the key). ``saved``: the table comes from a model's
    ``job.json``, which before tasks were objects held every task's keys: those of other
    tasks, and the None their sizes had for "the task's default", are left out."""
    if not isinstance(table, Mapping):
        raise TypeError(f"[task]: expected a table of settings, got {table!r:.60}")
    cls = get_task(table.get("name", DEFAULT_TASK))
    options = dict(table)
    if saved:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        options = {
            k: v
            for k, v in options.items()
            if k in fields and not (v is None and fields[k].default is not None)
        }
    options.setdefault("name", cls.__dataclass_fields__["name"].default)
    return dataclass_from(cls, options, "[task]")


@dataclass
class Job:
    task: Task = field(default_factory=lambda: get_task(DEFAULT_TASK)())
    tokenizer: TokenizerOptions = field(default_factory=TokenizerOptions)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "small"})
    train: dict[str, Any] = field(default_factory=dict)
    eval: EvalOptions = field(default_factory=EvalOptions)
    distill: DistillOptions | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, saved: bool = False) -> Job:
        """The job of ``data`` (tables of settings) over its task's recipe. Every key of every
        table is checked (ValueError naming the table and key, with the nearest known key);
        the values are checked by :meth:`check`. ``saved``: ``data`` is a model's
        ``job.json`` (see :func:`task_from`)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"expected tables of settings, got {type(data).__name__}")
        unknown = sorted(set(data) - set(TABLES) - set(OPTIONAL_TABLES))
        if unknown:
            near = closest(unknown[0], TABLES + OPTIONAL_TABLES) if len(unknown) == 1 else None
            hint = f"did you mean [{near}]? " if near else ""
            raise ValueError(
                f"unknown tables {unknown}; {hint}a job has [task], [tokenizer], [model], "
                f"[train], [eval], and a student's [distill]"
            )
        task = data.get("task", {})
        name = task.get("name", DEFAULT_TASK) if isinstance(task, Mapping) else None
        defaults = recipe(name) if isinstance(name, str) else {}
        given_model = data.get("model", {})
        init_from = given_model.get("init_from") if isinstance(given_model, Mapping) else None
        if init_from is not None:  # fine-tuning: the model and tokenizers are init_from's
            defaults = finetune_defaults(defaults)

        def table(key: str, fallback: dict[str, Any] | None = None) -> Any:
            given = data.get(key, {})
            if not isinstance(given, Mapping):
                raise TypeError(f"[{key}]: expected a table of settings, got {given!r:.60}")
            return {**defaults.get(key, fallback or {}), **given}

        from ..train.config import TrainConfig

        task_options = task_from(table("task"), saved=saved)
        model = table("model", {} if init_from is not None else {"preset": "small"})
        train = table("train")
        config_class = task_options.config_class()
        check_keys(model, ["preset", "init_from", *_field_names(config_class)], "[model]")
        if "out" in train:
            raise ValueError("[train] out: the run directory is given by --out, not in [train]")
        check_keys(train, [f for f in _field_names(TrainConfig) if f != "out"], "[train]")
        distill = None
        if "distill" in data or "distill" in defaults:  # a student: its teachers' translations
            distill = DistillOptions.from_table(table("distill"))
        return cls(
            task=task_options,
            tokenizer=dataclass_from(TokenizerOptions, table("tokenizer"), "[tokenizer]"),
            model=model,
            train=train,
            eval=EvalOptions.from_table(table("eval")),
            distill=distill,
        )

    def check(self, out: str | os.PathLike = ".") -> TaskContext:
        """Check the values of ``[model]`` and ``[train]`` (the other tables check theirs when
        built): build the model config (for vocabularies of ``[tokenizer] vocab_size``) and the
        TrainConfig of a run into ``out``; then the task checks what its options name
        (:meth:`Task.check`: files there, splits whole), and a student's teachers are checked.
        ValueError (or OSError) naming the table and the setting; no file is written. Returns
        what the task reads of the job, its context, with that TrainConfig: a run checks its
        job once and builds its TrainConfig once."""
        from ..train.config import TrainConfig

        if self.init_from is not None:
            self._check_init_from()
        try:
            self.model_config(self.tokenizer.vocab_size, self.tokenizer.vocab_size)
        except (TypeError, ValueError) as e:
            raise ValueError(f"[model] {e}") from None
        try:
            context = self.context(TrainConfig(out=os.fspath(out), **self.train))
        except (TypeError, ValueError) as e:
            raise ValueError(f"[train] {e}") from None
        keep_best, columns = self.train.get("keep_best"), self.task.validation_columns(context)
        if keep_best is not None and keep_best not in columns:
            hint = self.task.keep_best_hint(context, keep_best)
            raise ValueError(
                f"[train] keep_best: {keep_best!r} is not a validation column of this job; it "
                f"has {', '.join(columns)}{hint}"
            )
        self.task.check()  # what the task's options name: its files, its splits
        if self.distill is not None:
            if not self.task.distillable:
                raise ValueError(
                    f"[distill]: a student learns a translation task from its teachers' "
                    f"translations; task {self.task.name!r} is not one"
                )
            self.distill.check()  # the teachers are there; their digests, for job.json
        return context

    def context(self, train: Any = None) -> TaskContext:
        """What the task reads of this job, with ``train`` (a
        :class:`~attnlab.train.TrainConfig`; None outside a training run). :meth:`check`
        makes a run's."""
        return TaskContext(self.tokenizer, self.model, self.eval, train, self.distill)

    @property
    def init_from(self) -> str | None:
        """``[model] init_from``: the model directory a fine-tuning run starts from (None:
        a fresh model)."""
        value = self.model.get("init_from")
        return None if value is None else str(value)

    def _check_init_from(self) -> None:
        """A fine-tuning run keeps its starting model's architecture and tokenizers: ``[model]``
        may set ``init_from`` and the dropout rates, and other keys only to the starting
        model's own values; ``[tokenizer]`` is not used and must be left at its defaults.
        ValueError naming the setting."""
        if not self.task.fine_tunable:
            raise ValueError(
                f"[model] init_from: fine-tuning starts a translation task from a translation "
                f"model; task {self.task.name!r} is not one"
            )
        if not isinstance(self.model["init_from"], (str, os.PathLike)):
            raise ValueError(
                f"[model] init_from: expected a model directory, got {self.model['init_from']!r}"
            )
        if dataclasses.asdict(self.tokenizer) != dataclasses.asdict(TokenizerOptions()):
            raise ValueError(
                "[tokenizer]: a fine-tuning run keeps the tokenizers of [model] init_from (no new "
                "vocabulary); leave [tokenizer] out"
            )
        start = starting_config(str(self.model["init_from"]))
        for key, value in self.model.items():
            if key in ("init_from", *FINE_TUNABLE):
                continue
            if key == "preset":
                raise ValueError(
                    "[model] preset: a fine-tuning run keeps the architecture of [model] "
                    "init_from; leave preset out"
                )
            if getattr(start, key) != value:
                raise ValueError(
                    f"[model] {key} = {value!r}: a fine-tuning run keeps the architecture of "
                    f"[model] init_from ({key} = {getattr(start, key)!r}); only "
                    f"{', '.join(FINE_TUNABLE)} may change"
                )

    def validation_columns(self) -> tuple[str, ...]:
        """The columns each evaluation during training writes (the task's: ``val_loss``, and
        ``val_accuracy`` for an image task, or a translation task's BLEU columns)."""
        return self.task.validation_columns(self.context())

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> Job:
        """The job of TOML file ``path``; errors name the file."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: config file not found")
        try:
            data = toml_loads(path.read_text(encoding="utf-8"))
        except ValueError as e:  # tomllib's decode error, and UnicodeDecodeError
            raise ValueError(f"{path}: not valid TOML: {e}") from None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        tables = {
            "task": self.task.to_dict(),
            "tokenizer": dataclasses.asdict(self.tokenizer),
            "model": dict(self.model),
            "train": dict(self.train),
            "eval": self.eval.to_dict(),
        }
        if self.distill is not None:
            tables["distill"] = self.distill.to_dict()
        return tables

    def model_config(self, src_vocab: int = 0, tgt_vocab: int = 0):
        """The model's config: the task's (a :class:`attnlab.VisionConfig` for an image task,
        the vocabularies unused; else a :class:`attnlab.TransformerConfig` for these
        vocabularies); a fine-tuning run's is its starting model's with the job's rates."""
        return self.task.config_for(self.context(), src_vocab, tgt_vocab)


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]

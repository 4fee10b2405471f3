"""A job: its five tables (and a student's ``[distill]``, :mod:`attnlab.tasks.distill`),
checked as parsed (every key) and by :meth:`Job.check` (every value), and the recipes that fill
in what a job leaves out. The ``[task]`` table is a task object of :mod:`attnlab.tasks`, which
owns its options."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .._checks import check_keys, closest, dataclass_from
from .._rundir import JOB_FILE
from ..decode.options import ALPHA, BEAM_SIZE
from ..tasks import TASKS, Task, get_task
from ..tasks.distill import DistillOptions

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


def recipe(name: str) -> dict[str, dict[str, Any]]:
    """The tables of task ``name``'s recipe (empty for a task without one), a fresh copy: what
    ``attnlab train --task NAME`` runs where the command line leaves a setting out."""
    return copy.deepcopy(_read_recipe(TASKS[name].recipe)) if name in TASKS else {}


@functools.cache
def _read_recipe(file: str | None) -> dict[str, dict[str, Any]]:
    if file is None:
        return {}
    text = resources.files("attnlab").joinpath("recipes", file).read_text(encoding="utf-8")
    return toml_loads(text)


def toml_loads(text: str) -> dict[str, Any]:
    """The tables of TOML ``text`` (tomllib's, or tomli's before Python 3.11).

    Raises:
        ValueError: ``text`` is not valid TOML (tomllib's ``TOMLDecodeError`` is one).
    """
    return _toml().loads(text)  # type: ignore[no-any-return]


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


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
class TokenizerOptions:
    """BPE over characters with byte fallback, trained on the training split: ``vocab_size``
    subwords (specials included), one vocabulary for both languages when ``joint`` (with
    shared embeddings). A training split read from files (the ``files`` task) is sampled:
    ``sample_size`` pairs at most, drawn with ``[task] seed``, so the tokenizer's memory stays
    bounded whatever the corpus size."""

    vocab_size: int = 8000
    joint: bool = True
    min_frequency: int = 2
    sample_size: int = 1_000_000

    def __post_init__(self) -> None:
        from .._checks import check_positive_int

        check_positive_int(self.sample_size, "sample_size")


@dataclass
class EvalOptions:
    """Decoding for the final test (``beam_size``, ``alpha``) and the validation BLEU measured
    at each evaluation during training on the first ``bleu_sentences`` validation pairs
    (greedy, for speed; 0 turns it off). ``bleu_tokenize``: sacreBLEU's tokenizer for BLEU
    (None: the target language's, as sacreBLEU's command line picks it; see
    :func:`attnlab.inference.scores.bleu_tokenizer`)."""

    beam_size: int = BEAM_SIZE
    alpha: float = ALPHA
    bleu_sentences: int = 200
    max_tokens: int = 4096
    bleu_tokenize: str | None = None

    def __post_init__(self) -> None:
        if self.bleu_tokenize is None:
            return
        from ..inference.scores import bleu_tokenizer

        if not isinstance(self.bleu_tokenize, str):
            raise ValueError(
                f"[eval] bleu_tokenize: expected the name of a sacreBLEU tokenizer, got "
                f"{self.bleu_tokenize!r}"
            )
        try:
            bleu_tokenizer(None, self.bleu_tokenize)
        except ValueError as e:
            raise ValueError(f"[eval] {e}") from None


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
            distill = dataclass_from(DistillOptions, table("distill"), "[distill]")
        return cls(
            task=task_options,
            tokenizer=dataclass_from(TokenizerOptions, table("tokenizer"), "[tokenizer]"),
            model=model,
            train=train,
            eval=dataclass_from(EvalOptions, table("eval"), "[eval]"),
            distill=distill,
        )

    def check(self) -> None:
        """Check the values of ``[model]`` and ``[train]`` (the other tables check theirs when
        built): build the model config (for vocabularies of ``[tokenizer] vocab_size``) and the
        TrainConfig; then the task checks what its options name (:meth:`Task.check`: files
        there, splits whole). ValueError (or OSError) naming the table and the setting; no file
        is written."""
        from ..train.config import TrainConfig

        if self.init_from is not None:
            self._check_init_from()
        try:
            self.model_config(self.tokenizer.vocab_size, self.tokenizer.vocab_size)
        except (TypeError, ValueError) as e:
            raise ValueError(f"[model] {e}") from None
        try:
            TrainConfig(out=".", **self.train)
        except (TypeError, ValueError) as e:
            raise ValueError(f"[train] {e}") from None
        keep_best, columns = self.train.get("keep_best"), self.validation_columns()
        if keep_best is not None and keep_best not in columns:
            hint = self.task.keep_best_hint(self, keep_best)
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
        start = self.starting_config()
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

    def starting_config(self):
        """The config of ``[model] init_from``'s model, as saved (checked to be an
        encoder-decoder translation model with its tokenizers)."""
        from ..inference.modeldir import resolve_model_dir
        from ..models.saved import read_config

        directory = resolve_model_dir(self.model["init_from"], name="[model] init_from")
        try:
            model_type, config = read_config(directory)
        except (OSError, ValueError) as e:
            raise ValueError(f"[model] init_from: {e}") from None
        if model_type != "transformer":
            raise ValueError(
                f"[model] init_from: {directory} holds a {model_type!r} model; fine-tuning "
                f"takes an encoder-decoder translation model"
            )
        return config

    def validation_columns(self) -> tuple[str, ...]:
        """The columns each evaluation during training writes (the task's: ``val_loss``, and
        ``val_accuracy`` for an image task, or a translation task's BLEU columns)."""
        return self.task.validation_columns(self)

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> Job:
        """The job of TOML file ``path``; errors name the file."""
        tomllib = _toml()
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: config file not found")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
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
            "eval": dataclasses.asdict(self.eval),
        }
        if self.distill is not None:
            tables["distill"] = self.distill.to_dict()
        return tables

    def model_config(self, src_vocab: int = 0, tgt_vocab: int = 0):
        """The model's config: the task's (a :class:`attnlab.VisionConfig` for an image task,
        the vocabularies unused; else a :class:`attnlab.TransformerConfig` for these
        vocabularies); a fine-tuning run's is its starting model's with the job's rates."""
        if self.init_from is not None:
            rates = {k: v for k, v in self.model.items() if k in FINE_TUNABLE}
            return dataclasses.replace(self.starting_config(), **rates)
        return self.task.model_config(self.model, self.tokenizer.joint, src_vocab, tgt_vocab)


#: What a fine-tuning run may change in its starting model's config (not its architecture).
FINE_TUNABLE = ("dropout", "attention_dropout", "activation_dropout")
#: The fine-tuning recipe (packaged, as the tasks' recipes): its [train] and [eval] tables.
FINETUNE_RECIPE = "finetune.toml"


def finetune_defaults(task_recipe: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What a fine-tuning job (``[model] init_from``) runs where it leaves a setting out: its
    task's ``[task]`` and ``[eval]`` tables, then the fine-tuning recipe's ``[train]`` and
    ``[eval]`` (a low learning rate, a short warm-up, keep-best on validation). The task
    recipe's ``[model]``, ``[tokenizer]`` and ``[train]`` are a fresh model's, not used."""
    tuning = copy.deepcopy(_read_recipe(FINETUNE_RECIPE))
    return {
        "task": dict(task_recipe.get("task", {})),
        "train": tuning.get("train", {}),
        "eval": {**task_recipe.get("eval", {}), **tuning.get("eval", {})},
    }


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]

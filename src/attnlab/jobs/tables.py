"""A job's tables: the task registry and its recipes, the options of each table, and
:class:`Job`, which checks every key when parsed and every value of ``[model]`` and ``[train]``
in :meth:`Job.check`."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .._checks import check_keys, closest, dataclass_from

__all__ = [
    "FINETUNE_RECIPE",
    "FINE_TUNABLE",
    "JOB_FILE",
    "TABLES",
    "TASKS",
    "TASK_DEFAULTS",
    "TRANSLATION_VALIDATION",
    "EvalOptions",
    "Job",
    "Task",
    "TaskOptions",
    "TokenizerOptions",
    "finetune_defaults",
    "recipe",
    "toml_loads",
]

JOB_FILE = "job.json"
# What a translation job's validation hook (``run._translation_setup``) adds to each evaluation
# during training: BLEU, exact match and chrF of greedy translations of the first validation
# pairs (chrF also ranks one-word outputs, such as the numbers task's, where BLEU is 0).
TRANSLATION_VALIDATION = ("val_bleu", "val_exact", "val_chrf")
TABLES = ("task", "tokenizer", "model", "train", "eval")


@dataclass(frozen=True)
class Task:
    """A task a job can name: what it trains (``kind``: ``translation``, ``language_model`` or
    ``image_classification``) and its recipe, the packaged TOML file in ``attnlab/recipes``
    that fills in what a job leaves out (None: the tables' own defaults)."""

    name: str
    kind: str
    recipe: str | None = None


# The task registry: `attnlab train --task` offers these, in this order.
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("numbers", "translation", "numbers.toml"),
        Task("multi30k", "translation", "multi30k-en-de.toml"),
        Task("files", "translation"),
        Task("text", "language_model"),
        Task("digits", "image_classification", "digits.toml"),
    )
}


class _Recipes(Mapping[str, dict[str, dict[str, Any]]]):
    """Task name -> its recipe's tables (fresh copies), for the tasks that have one."""

    def __getitem__(self, name: str) -> dict[str, dict[str, Any]]:
        if name not in TASKS or TASKS[name].recipe is None:
            raise KeyError(name)
        return recipe(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name, task in TASKS.items() if task.recipe is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# The recipes by task, read from the packaged files (the name jobs had before they moved there).
TASK_DEFAULTS: Mapping[str, dict[str, dict[str, Any]]] = _Recipes()


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


@dataclass
class TaskOptions:
    """What to learn. ``numbers``: English to German number words (num2words), numbers in
    ``[low, high]``; ``multi30k``: Multi30K task 1 from ``data_dir`` (or $ATTNLAB_MULTI30K, or
    downloaded); ``files``: plain parallel text files (``train_src``, ``train_tgt``, ...);
    ``text``: a language model (:class:`attnlab.TransformerLM`) on the lines of ``text_file``,
    ``valid_fraction`` of them held out; ``digits``: a :class:`attnlab.VisionTransformer` on
    scikit-learn's 8x8 handwritten digits (stratified held-out sets of ``valid_size`` and
    ``test_size`` images; default 180 and 360 of the 1,797).

    ``valid_size`` / ``test_size`` default to 500 each for ``numbers``."""

    name: str = "numbers"
    src_lang: str = "en"
    tgt_lang: str = "de"
    data_dir: str | None = None
    low: int = 0
    high: int = 9999
    valid_size: int | None = None
    test_size: int | None = None
    seed: int = 0
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    max_len: int = 200  # training pairs with a side longer than this (in tokens) are left out
    text_file: str | None = None
    valid_fraction: float = 0.05

    def __post_init__(self) -> None:
        if self.name not in TASKS:
            raise ValueError(f"[task] name: expected one of {list(TASKS)}, got {self.name!r}")

    @property
    def is_lm(self) -> bool:
        return TASKS[self.name].kind == "language_model"

    @property
    def is_image(self) -> bool:
        return TASKS[self.name].kind == "image_classification"

    def _sizes(self, valid: int, test: int) -> dict[str, int]:
        return {
            "valid_size": valid if self.valid_size is None else self.valid_size,
            "test_size": test if self.test_size is None else self.test_size,
        }

    def load(self):
        """The corpus: a :class:`attnlab.data.ParallelCorpus`, for ``text`` a dict of line
        lists by split, for ``digits`` a dict of :class:`attnlab.data.images.LabelledImages`."""
        from ..data import corpora

        if self.is_image:
            from ..data.images import digits

            return digits(**self._sizes(180, 360), seed=self.seed)
        if self.is_lm:
            if not self.text_file:
                raise ValueError("[task] text_file: required for the 'text' task")
            return corpora.text_corpus(
                self.text_file, valid_fraction=self.valid_fraction, seed=self.seed
            )
        if self.name == "numbers":
            return corpora.numbers(
                src_lang=self.src_lang,
                tgt_lang=self.tgt_lang,
                low=self.low,
                high=self.high,
                seed=self.seed,
                **self._sizes(500, 500),
            )
        if self.name == "multi30k":
            return corpora.multi30k(self.data_dir, src_lang=self.src_lang, tgt_lang=self.tgt_lang)
        if not (self.train_src and self.train_tgt):
            raise ValueError("[task] train_src, train_tgt: required for the 'files' task")
        pairs = {
            split: (getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt"))
            for split in ("valid", "test")
        }
        for split, (src, tgt) in pairs.items():
            if bool(src) != bool(tgt):
                raise ValueError(f"[task] {split}_src, {split}_tgt: give both or neither")
        return corpora.parallel_files(
            (self.train_src, self.train_tgt),
            valid=pairs["valid"] if pairs["valid"][0] else None,
            test=pairs["test"] if pairs["test"][0] else None,
            src_lang=self.src_lang,
            tgt_lang=self.tgt_lang,
        )


@dataclass
class TokenizerOptions:
    """BPE over characters with byte fallback, trained on the training split: ``vocab_size``
    subwords (specials included), one vocabulary for both languages when ``joint`` (with
    shared embeddings)."""

    vocab_size: int = 8000
    joint: bool = True
    min_frequency: int = 2


@dataclass
class EvalOptions:
    """Decoding for the final test (``beam_size``, ``alpha``) and the validation BLEU measured
    at each evaluation during training on the first ``bleu_sentences`` validation pairs
    (greedy, for speed; 0 turns it off)."""

    beam_size: int = 4
    alpha: float = 0.6
    bleu_sentences: int = 200
    max_tokens: int = 4096


@dataclass
class Job:
    task: TaskOptions = field(default_factory=TaskOptions)
    tokenizer: TokenizerOptions = field(default_factory=TokenizerOptions)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "small"})
    train: dict[str, Any] = field(default_factory=dict)
    eval: EvalOptions = field(default_factory=EvalOptions)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        """The job of ``data`` (tables of settings) over its task's recipe. Every key of every
        table is checked (ValueError naming the table and key, with the nearest known key);
        the values are checked by :meth:`check`."""
        if not isinstance(data, Mapping):
            raise TypeError(f"expected tables of settings, got {type(data).__name__}")
        unknown = sorted(set(data) - set(TABLES))
        if unknown:
            near = closest(unknown[0], TABLES) if len(unknown) == 1 else None
            hint = f"did you mean [{near}]? " if near else ""
            raise ValueError(
                f"unknown tables {unknown}; {hint}a job has [task], [tokenizer], [model], "
                f"[train], [eval]"
            )
        task = data.get("task", {})
        name = task.get("name", TaskOptions.name) if isinstance(task, Mapping) else None
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

        task_options = dataclass_from(TaskOptions, table("task"), "[task]")
        model = table("model", {} if init_from is not None else {"preset": "small"})
        train = table("train")
        config_class = _model_config_class(task_options)
        check_keys(model, ["preset", "init_from", *_field_names(config_class)], "[model]")
        if "out" in train:
            raise ValueError("[train] out: the run directory is given by --out, not in [train]")
        check_keys(train, [f for f in _field_names(TrainConfig) if f != "out"], "[train]")
        return cls(
            task=task_options,
            tokenizer=dataclass_from(TokenizerOptions, table("tokenizer"), "[tokenizer]"),
            model=model,
            train=train,
            eval=dataclass_from(EvalOptions, table("eval"), "[eval]"),
        )

    def check(self) -> None:
        """Check the values of ``[model]`` and ``[train]`` (the other tables check theirs when
        built): build the model config (for vocabularies of ``[tokenizer] vocab_size``) and the
        TrainConfig. ValueError naming the table and the setting; no file is touched."""
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
            translates = not (self.task.is_lm or self.task.is_image)
            hint = (
                f" ({', '.join(TRANSLATION_VALIDATION)} need [eval] bleu_sentences > 0)"
                if translates and keep_best in TRANSLATION_VALIDATION
                else ""
            )
            raise ValueError(
                f"[train] keep_best: {keep_best!r} is not a validation column of this job; it "
                f"has {', '.join(columns)}{hint}"
            )

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
        if self.task.is_lm or self.task.is_image:
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
        from ..modeldir import resolve_model_dir
        from ..pretrained import read_config

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
        """The columns each evaluation during training writes: the objective's (``val_loss``,
        and ``val_accuracy`` for an image task), then :data:`TRANSLATION_VALIDATION` for a
        translation task whose ``[eval] bleu_sentences`` is not 0."""
        from ..train.metrics import IMAGE_METRICS_COLUMNS, METRICS_COLUMNS

        columns = IMAGE_METRICS_COLUMNS if self.task.is_image else METRICS_COLUMNS
        own = columns[columns.index("val_loss") :]
        if self.task.is_image or self.task.is_lm or self.eval.bleu_sentences == 0:
            return own
        return own + TRANSLATION_VALIDATION

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
        return {
            "task": dataclasses.asdict(self.task),
            "tokenizer": dataclasses.asdict(self.tokenizer),
            "model": dict(self.model),
            "train": dict(self.train),
            "eval": dataclasses.asdict(self.eval),
        }

    def model_config(self, src_vocab: int = 0, tgt_vocab: int = 0):
        """The model's config: a :class:`attnlab.VisionConfig` for an image task (the
        vocabularies unused), else a :class:`attnlab.TransformerConfig` for these vocabularies."""
        from ..config import TransformerConfig

        if self.init_from is not None:
            rates = {k: v for k, v in self.model.items() if k in FINE_TUNABLE}
            return dataclasses.replace(self.starting_config(), **rates)
        if self.task.is_image:
            from ..vision import VisionConfig

            options = dict(self.model)
            return VisionConfig.preset(options.pop("preset", "digits"), **options)
        options = dict(self.model)
        preset = options.pop("preset", "small")
        joint = self.tokenizer.joint or self.task.is_lm
        options.update(
            vocab_size=src_vocab,
            tgt_vocab_size=None if joint else tgt_vocab,
            share_embeddings=joint,
        )
        return TransformerConfig.preset(preset, **options)


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


def _model_config_class(task: TaskOptions) -> type:
    """The config dataclass of the task's model: VisionConfig for an image task, else
    TransformerConfig."""
    if task.is_image:
        from ..vision import VisionConfig

        return VisionConfig
    from ..config import TransformerConfig

    return TransformerConfig

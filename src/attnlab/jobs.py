"""The main job: train a model end to end, and evaluate it.

A :class:`Job` is one TOML file (or a task's recipe alone) with five tables::

    [task]       # what to learn: numbers | multi30k | files | text | digits, the data
    [tokenizer]  # BPE: vocabulary size, joint or separate
    [model]      # a TransformerConfig (VisionConfig for digits) preset and fields to override
    [train]      # attnlab.train.TrainConfig fields (batch tokens, schedule, steps, ...)
    [eval]       # beam search for the final test and the BLEU measured while training

What a job leaves out comes from its task's recipe, a packaged TOML file
(``attnlab/recipes/*.toml``, linked from the repository's ``configs/``); the tasks are the
registry :data:`TASKS`. Every key of every table is checked when the job is parsed
(:meth:`Job.from_dict`, with "did you mean" for a near miss), and every value of ``[model]``
and ``[train]`` by :meth:`Job.check`, before any work starts.

:func:`train_job` runs it: load the corpus, train the tokenizers on the training split only,
encode, build the model, train (checkpoints, resume, metrics), average the last checkpoints
into ``OUT/model`` (weights, config, tokenizers, the job), then translate the test split with
beam search and score it (``OUT/results.json``). :func:`evaluate_model` scores a saved model
on a split of its task.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ._checks import check_keys, closest, dataclass_from
from ._io import write_json

__all__ = [
    "TASKS",
    "EvalOptions",
    "Job",
    "Task",
    "TaskOptions",
    "TokenizerOptions",
    "evaluate_model",
    "recipe",
    "train_job",
]

JOB_FILE = "job.json"
RESULTS_FILE = "results.json"
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


def recipe(name: str) -> dict[str, dict[str, Any]]:
    """The tables of task ``name``'s recipe (empty for a task without one), a fresh copy: what
    ``attnlab train --task NAME`` runs where the command line leaves a setting out."""
    return copy.deepcopy(_read_recipe(TASKS[name].recipe)) if name in TASKS else {}


@functools.cache
def _read_recipe(file: str | None) -> dict[str, dict[str, Any]]:
    if file is None:
        return {}
    text = resources.files("attnlab").joinpath("recipes", file).read_text(encoding="utf-8")
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
        from .data import corpora

        if self.is_image:
            from .data.images import digits

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
    """Byte-level BPE trained on the training split: ``vocab_size`` subwords (specials
    included), one vocabulary for both languages when ``joint`` (with shared embeddings)."""

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

        def table(key: str, fallback: dict[str, Any] | None = None) -> Any:
            given = data.get(key, {})
            if not isinstance(given, Mapping):
                raise TypeError(f"[{key}]: expected a table of settings, got {given!r:.60}")
            return {**defaults.get(key, fallback or {}), **given}

        from .train.config import TrainConfig

        task_options = dataclass_from(TaskOptions, table("task"), "[task]")
        model, train = table("model", {"preset": "small"}), table("train")
        config_class = _model_config_class(task_options)
        check_keys(model, ["preset", *_field_names(config_class)], "[model]")
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
        from .train.config import TrainConfig

        try:
            self.model_config(self.tokenizer.vocab_size, self.tokenizer.vocab_size)
        except (TypeError, ValueError) as e:
            raise ValueError(f"[model] {e}") from None
        try:
            TrainConfig(out=".", **self.train)
        except (TypeError, ValueError) as e:
            raise ValueError(f"[train] {e}") from None

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
        from .model import TransformerConfig

        if self.task.is_image:
            from .vision import VisionConfig

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


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _model_config_class(task: TaskOptions) -> type:
    """The config dataclass of the task's model: VisionConfig for an image task, else
    TransformerConfig."""
    if task.is_image:
        from .vision import VisionConfig

        return VisionConfig
    from .config import TransformerConfig

    return TransformerConfig


def _tokenizers(job: Job, corpus, directory: Path, reuse: bool, rank: int):
    """Train (or, resuming, reload) the tokenizers on the training split only. In a
    distributed run rank 0 trains and saves them; the other ranks wait, then load them."""
    import torch.distributed as dist

    from .data.tokenizer import Tokenizer, load_tokenizers, save_tokenizers

    distributed = dist.is_available() and dist.is_initialized()
    if rank != 0:
        dist.barrier()  # rank 0 has written them
        return load_tokenizers(directory)
    if reuse and directory.is_dir():
        if distributed:
            dist.barrier()
        return load_tokenizers(directory)
    train = corpus["train"]
    options = job.tokenizer
    kwargs = {"min_frequency": options.min_frequency}
    if job.task.is_lm:  # one vocabulary for the one stream of text
        src = tgt = Tokenizer.train(train, options.vocab_size, **kwargs)
        save_tokenizers(directory, src, None)
    elif options.joint:
        texts = [s for pair in train for s in pair]
        src = tgt = Tokenizer.train(texts, options.vocab_size, **kwargs)
        save_tokenizers(directory, src, None)
    else:
        src = Tokenizer.train([s for s, _ in train], options.vocab_size, **kwargs)
        tgt = Tokenizer.train([t for _, t in train], options.vocab_size, **kwargs)
        save_tokenizers(directory, src, tgt)
    if distributed:
        dist.barrier()
    return src, tgt


def train_job(
    job: Job,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run ``job`` into directory ``out``; return the summary (also in ``out/results.json``).

    ``log`` receives one line per stage (the CLI prints them). With ``resume`` the tokenizers
    are reloaded and training continues from the newest checkpoint. Under ``torchrun`` (after
    :func:`attnlab.train.init_distributed`) every rank trains its share of each batch with
    DistributedDataParallel; only rank 0 writes files, logs and scores the test split (the
    others return ``{}``).
    """
    from .data.batching import TokenBatcher
    from .train import TrainConfig, Trainer, world

    started = time.perf_counter()
    job.check()  # before any work: reading the corpus, training tokenizers, creating `out`
    out = Path(out)
    train_config = TrainConfig(out=str(out), **job.train)
    rank, _ = world()
    if rank != 0:
        log = lambda message: None  # noqa: E731 - one voice in a distributed run
    out.mkdir(parents=True, exist_ok=True)
    corpus = job.task.load()
    splits = corpus if job.task.is_lm or job.task.is_image else corpus.splits
    what = (
        job.task.name
        if job.task.is_lm or job.task.is_image
        else f"{corpus.name} {corpus.src_lang}->{corpus.tgt_lang}"
    )
    log(f"task {what}: " + ", ".join(f"{k} {len(v):,}" for k, v in splits.items()))
    padding: float | None = None
    tokenizer_dir: Path | None = None
    if job.task.is_image:
        model = _build_model(job)
        train_examples, valid_examples, on_evaluate = corpus["train"], corpus["valid"], None
        log(
            f"model: VisionTransformer, {job.model.get('preset')} preset, "
            f"{model.num_parameters():,} parameters, {model.config.num_patches} patches of "
            f"{model.config.patch_size}x{model.config.patch_size} pixels; "
            f"{len(train_examples):,} training images"
        )
    else:
        tokenizer_dir = out / "tokenizers"
        src_tok, tgt_tok = _tokenizers(job, corpus, tokenizer_dir, reuse=resume, rank=rank)
        joint = " (joint)" if job.tokenizer.joint else ""
        log(f"tokenizers: {src_tok.vocab_size:,} subwords{joint}")
        setup = _lm_setup if job.task.is_lm else _translation_setup
        model, train_examples, valid_examples, on_evaluate = setup(job, corpus, src_tok, tgt_tok)
        padding = TokenBatcher.for_examples(
            train_examples, train_config.max_tokens, seed=train_config.seed
        ).padding_fraction(0)
        log(
            f"model: {job.model.get('preset', 'small')} preset, {model.num_parameters():,} "
            f"parameters; {len(train_examples):,} training examples ({train_examples.dropped:,} "
            f"longer than {job.task.max_len} tokens left out), padding {padding:.1%} of the "
            f"batches"
        )
    if rank == 0:
        write_json(out / JOB_FILE, job.to_dict())
    trainer = Trainer(
        model,
        train_examples,
        valid_examples,
        train_config,
        tokenizers_dir=tokenizer_dir,
        on_evaluate=on_evaluate,
        progress=progress,
    )
    summary = trainer.train(resume=resume)
    if rank != 0:
        return {}
    model_dir = out / "model"
    write_json(model_dir / JOB_FILE, job.to_dict())
    log(f"trained: {model_dir}")
    split = "valid" if job.task.is_lm else "test"
    result = evaluate_model(model_dir, split=split, corpus=corpus)
    result.update(
        {
            "training": summary,
            "model_dir": str(model_dir),
            "wall_time_s": time.perf_counter() - started,
        }
    )
    if padding is not None:
        result["padding_fraction"] = padding
    write_json(out / RESULTS_FILE, result)
    return result


def _build_model(job: Job):
    """A fresh model for an image task, seeded by ``[train] seed`` so that a job's initial
    weights (hence its accuracy) are reproducible."""
    import torch

    from .vision import VisionTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(job.train.get("seed", 0)))
        return VisionTransformer(job.model_config())


def _translation_setup(job: Job, corpus, src_tok, tgt_tok):
    """The encoder-decoder model, framed examples, and the validation BLEU hook."""
    from .data.batching import make_examples
    from .evaluate import Translator, score
    from .model import Transformer

    def encode(split: str):
        pairs = corpus[split]
        src = src_tok.encode_batch([s for s, _ in pairs])
        tgt = tgt_tok.encode_batch([t for _, t in pairs])
        return make_examples(list(zip(src, tgt, strict=True)), max_len=job.task.max_len)

    model = Transformer(job.model_config(src_tok.vocab_size, tgt_tok.vocab_size))
    valid_pairs = corpus["valid"][: job.eval.bleu_sentences]

    def on_evaluate(step: int, trained) -> dict[str, float]:
        """BLEU and exact match of greedy translations of the first validation pairs."""
        if not valid_pairs:
            return {}
        translator = Translator(trained, src_tok, tgt_tok, beam_size=1)
        hyps = translator.translate([s for s, _ in valid_pairs])
        scores = score(hyps, [t for _, t in valid_pairs])
        return {"val_bleu": scores.bleu, "val_exact": scores.exact_match}

    return model, encode("train"), encode("valid"), on_evaluate


def _lm_setup(job: Job, corpus, tokenizer, _):
    """The decoder-only model and its framed lines (validation: loss, hence perplexity)."""
    from .data.batching import make_lm_examples
    from .model import TransformerLM

    def encode(split: str):
        return make_lm_examples(tokenizer.encode_batch(corpus[split]), max_len=job.task.max_len)

    model = TransformerLM(job.model_config(tokenizer.vocab_size, tokenizer.vocab_size))
    return model, encode("train"), encode("valid"), None


def _evaluate_lm(model_dir: Path, corpus: dict, split: str, limit: int | None) -> dict:
    from .data.tokenizer import load_tokenizers
    from .evaluate import lm_perplexity
    from .model import load_pretrained

    if split not in corpus:
        raise ValueError(f"split: a text task has {sorted(corpus)}, not {split!r}")
    lines = corpus[split][:limit] if limit else corpus[split]
    tokenizer, _ = load_tokenizers(model_dir)
    result = lm_perplexity(load_pretrained(model_dir), tokenizer, lines)
    result.update({"split": split, "task": "text"})
    return result


def _evaluate_images(
    model_dir: Path, corpus: dict, split: str, limit: int | None, examples: int
) -> dict:
    import torch

    from .evaluate import classify
    from .model import load_pretrained

    if split not in corpus:
        raise ValueError(f"split: the digits task has {sorted(corpus)}, not {split!r}")
    data = corpus[split]
    images, labels = data.images[:limit], data.labels[:limit]
    model = load_pretrained(model_dir, device="cuda" if torch.cuda.is_available() else "cpu")
    result = classify(model, images, labels, classes=data.classes)
    result.update({"split": split, "task": "digits"})
    result["examples"] = result.pop("errors")[:examples]
    return result


def evaluate_model(
    model_dir: str | os.PathLike,
    *,
    split: str | None = None,
    corpus=None,
    job: Job | None = None,
    beam_size: int | None = None,
    limit: int | None = None,
    examples: int = 10,
) -> dict[str, Any]:
    """Translate ``split`` (default ``test``) of the model's task (from its ``job.json``) with
    beam search and score it. Returns ``{"bleu", "chrf", "exact_match", "sentences",
    signatures, "split", "examples": a few (source, reference, hypothesis)}``. For a language
    model (the ``text`` task): its perplexity on ``split`` (default ``valid``)."""
    from .evaluate import Translator, score

    model_dir = Path(model_dir)
    if job is None:
        path = model_dir / JOB_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: missing; the model was not saved by `attnlab train`, so its task is "
                f"unknown"
            )
        try:
            job = Job.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None
    if corpus is None:
        corpus = job.task.load()
    if split is None:
        split = "valid" if job.task.is_lm else "test"
    if job.task.is_lm:
        return _evaluate_lm(model_dir, corpus, split, limit)
    if job.task.is_image:
        return _evaluate_images(model_dir, corpus, split, limit, examples)
    pairs = corpus[split]
    if limit is not None:
        pairs = pairs[:limit]
    translator = Translator.load(
        model_dir,
        beam_size=beam_size or job.eval.beam_size,
        alpha=job.eval.alpha,
        max_tokens=job.eval.max_tokens,
    )
    hyps = translator.translate([s for s, _ in pairs])
    scores = score(hyps, [t for _, t in pairs])
    result = scores.to_dict()
    result["split"] = split
    result["task"] = job.task.name
    result["examples"] = [
        {"source": s, "reference": t, "hypothesis": h}
        for (s, t), h in list(zip(pairs, hyps, strict=True))[:examples]
    ]
    return result

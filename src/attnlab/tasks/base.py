"""What every task is: :class:`Task`, the ``[task]`` table of a job and what the job layer asks of
it, and the registry that names the tasks (:func:`register_task`, :func:`get_task`).

A task is a dataclass whose fields are its ``[task]`` options; its methods say how it loads its
data, builds its tokenizers and model, evaluates a trained model and writes its result lines.
The job layer (:mod:`attnlab.jobs`) looks a task up by name and calls these methods; it never
asks which task it runs. A new task is one module with one registered class, plus, if it has
one, a recipe in ``attnlab/recipes``::

    @register_task
    @dataclass
    class Reverse(TranslationTask):
        name: str = "reverse"
        ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..decode.options import DecodingOptions
from .context import TaskContext

__all__ = [
    "TASKS",
    "Setup",
    "Task",
    "epoch_lines",
    "get_task",
    "note_token_examples",
    "register_task",
    "seeded",
    "shared_tokenizers",
]

#: Task name -> its class, in the order ``attnlab train --task`` offers them.
TASKS: dict[str, type[Task]] = {}

T = TypeVar("T", bound="type[Task]")


def register_task(cls: T) -> T:
    """Class decorator: register task class ``cls`` under its ``name`` field's default."""
    name = cls.__dataclass_fields__["name"].default
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__}: a task's name field needs a default, its name")
    if name in TASKS and TASKS[name] is not cls:
        raise ValueError(f"task {name!r}: already registered by {TASKS[name].__name__}")
    TASKS[name] = cls
    return cls


def get_task(name: object) -> type[Task]:
    """The class of the task named ``name``; ValueError naming ``[task] name`` otherwise."""
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"[task] name: expected one of {list(TASKS)}, got {name!r}")
    return TASKS[name]


@dataclass
class Setup:
    """What a task hands the trainer: the model, its training and validation data (as the
    task's objective takes them), the hook run at each evaluation, where the tokenizers are
    saved (None: the task has none), and what the job adds to its result (``extras``) and
    prints as it goes."""

    model: Any
    train: Any
    valid: Any
    on_evaluate: Callable[[int, Any], dict[str, float]] | None = None
    tokenizers_dir: Path | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    batcher: Any = None  # the training batches, when the task planned them (else the trainer's)


@dataclass
class Task:
    """A task a job can name: its ``[task]`` options are this dataclass's fields.

    Class attributes a task sets: ``recipe`` (its packaged TOML file in ``attnlab/recipes``,
    None for none), ``command`` (the command that uses its models: ``translate`` or
    ``evaluate``), ``decodes`` (its models are scored by decoding, so beam size and length
    penalty apply), ``fine_tunable`` (``[model] init_from`` may start it from a trained model),
    ``distillable`` (a ``[distill]`` table may train it on teachers' translations),
    ``metric`` (what scores a model that does not decode, as its errors name it),
    ``flags`` (the ``[task]`` options that ``attnlab train`` flags set).

    What a task reads of its job comes as a :class:`~attnlab.tasks.context.TaskContext`.
    """

    name: str = ""

    recipe: ClassVar[str | None] = None
    command: ClassVar[str] = "evaluate"
    decodes: ClassVar[bool] = False
    fine_tunable: ClassVar[bool] = False
    distillable: ClassVar[bool] = False
    metric: ClassVar[str] = ""

    def __post_init__(self) -> None:
        own = type(self).__dataclass_fields__["name"].default
        if self.name != own:
            raise ValueError(f"[task] name: this is the {own!r} task, got {self.name!r}")

    # -- the job's parts: a subclass overrides these ----------------------------------------

    def check(self) -> None:
        """Check what the options name (files exist, splits are whole) before any work; a
        ValueError or OSError names the option. The default checks nothing."""

    def prepare(
        self,
        ctx: TaskContext,
        *,
        note: Callable[[str], object],
        rank: int = 0,
        resume: bool = False,
        verify: bool = False,
    ) -> bool:
        """Prepare, before training starts (``attnlab prepare``, and ``attnlab train`` before
        its process group exists), what training would otherwise prepare on its first start:
        a task whose data is on disk makes its tokenizers and token shards ready in the cache
        that :meth:`setup` then only opens. ``rank`` 0 prepares, another rank waits for it
        without a deadline; ``resume``: the run's own tokenizers (in ``ctx.out``) when it
        resumes; ``verify``: the files read in full for their digests. Returns False when the
        task has nothing to prepare (its data is small and held in memory): the default."""
        return False

    def heading(self) -> str:
        """How ``attnlab train`` names the run (``numbers en->de``)."""
        return self.name

    def load(self) -> Any:
        """The task's data, by split."""
        raise NotImplementedError

    def describe(self, data: Any) -> str:
        """The line that says what was loaded (``task numbers en->de: train 9,000, ...``)."""
        return f"task {self.name}: " + ", ".join(f"{k} {len(v):,}" for k, v in data.items())

    @classmethod
    def config_class(cls) -> type:
        """The dataclass of ``[model]``: :class:`attnlab.TransformerConfig` by default."""
        from ..models.config import TransformerConfig

        return TransformerConfig

    def model_config(self, model: Mapping[str, Any], joint: bool, src_vocab: int, tgt_vocab: int):
        """The model's config from the job's ``[model]`` table, for these vocabularies: by
        default a :class:`attnlab.TransformerConfig` of its preset (``small``), its embeddings
        shared when ``joint``."""
        from ..models.config import TransformerConfig

        options = dict(model)
        preset = options.pop("preset", "small")
        options.update(
            vocab_size=src_vocab,
            tgt_vocab_size=None if joint else tgt_vocab,
            share_embeddings=joint,
        )
        return TransformerConfig.preset(preset, **options)

    def config_for(self, ctx: TaskContext, src_vocab: int = 0, tgt_vocab: int = 0):
        """The config of the model ``ctx`` trains, for these vocabularies: :meth:`model_config`
        of its ``[model]`` table (a fine-tunable task's starts from its starting model's)."""
        return self.model_config(ctx.model, ctx.tokenizer.joint, src_vocab, tgt_vocab)

    def objective(self) -> type:
        """The training objective of this task's model (an
        :class:`~attnlab.train.objectives.Objective` class), which the trainer is handed."""
        raise NotImplementedError

    def validation_columns(self, ctx: TaskContext) -> tuple[str, ...]:
        """The columns each evaluation during training writes."""
        from ..train.metrics import METRICS_COLUMNS

        return METRICS_COLUMNS[METRICS_COLUMNS.index("val_loss") :]

    def keep_best_hint(self, ctx: TaskContext, column: str) -> str:
        """Why ``column`` is not a validation column of ``ctx``, when there is a reason to say."""
        return ""

    def setup(self, ctx: TaskContext, data: Any, *, resume: bool, rank: int, note) -> Setup:
        """Tokenizers (trained or reloaded into ``ctx.out/tokenizers``), the model and its
        data."""
        raise NotImplementedError

    def final_split(self, data: Any) -> str | None:
        """The split a trained model is scored on at the end (None: none to score)."""
        return "test"

    def evaluate(
        self,
        model_dir: Path,
        data: Any,
        ctx: TaskContext,
        *,
        split: str,
        limit: int | None = None,
        examples: int = 10,
        device: str | None = None,
        decoding: DecodingOptions | None = None,
        engine: str = "torch",
    ) -> dict[str, Any]:
        """Score the model of ``model_dir`` on ``split`` of ``data`` (its first ``limit`` items):
        the task's :meth:`scores`, then the split and the task's name, then the rest (its
        decoding, ``examples`` examples). A task that decodes does so with ``decoding`` (None:
        the job's ``[eval]``) on ``engine``; another is scored by torch and refuses both."""
        if not self.decodes:
            if engine != "torch":
                raise ValueError(
                    f"engine {engine}: the {self.name} task's model is scored by torch "
                    f"({self.metric})"
                )
            if decoding is not None:
                raise ValueError(
                    f"decoding: the {self.name} task's model is scored without beam search "
                    f"({self.metric}); pass None"
                )
        splits = getattr(data, "splits", data)  # a ParallelCorpus, or a dict by split
        if split not in splits:
            raise ValueError(f"split: the {self.name} task has {sorted(splits)}, not {split!r}")
        how = dict(examples=examples, device=device, decoding=decoding, engine=engine)
        scores, rest = self.scores(model_dir, data[split], limit, ctx, **how)
        return {**scores, "split": split, "task": self.name, **rest}

    def scores(
        self, model_dir: Path, items: Any, limit: int | None, ctx: TaskContext, **how: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """:meth:`evaluate`'s scores of the model of ``model_dir`` on the first ``limit`` of
        ``items`` (a split), and what its result holds after the split and the task's name.
        ``how``: ``examples``, ``device``, ``decoding`` and ``engine``, as :meth:`evaluate`
        takes them."""
        raise NotImplementedError

    def score_line(self, result: Mapping[str, Any]) -> str:
        """The result's headline scores, one line (for ``train.log``)."""
        raise NotImplementedError

    @classmethod
    def report(
        cls,
        result: Mapping[str, Any],
        *,
        show: int = 3,
        beam_size: int | None = None,
        tokenized: bool = False,
    ) -> list[str]:
        """The lines ``attnlab train`` and ``attnlab evaluate`` print for ``result`` (``show``
        examples; a translation's decoding, and its tokenised BLEU when ``tokenized``)."""
        raise NotImplementedError

    @classmethod
    def json_view(
        cls, result: Mapping[str, Any], *, tokenized: bool = False, model: str = "the model"
    ) -> dict[str, Any]:
        """What ``attnlab evaluate --json`` prints of ``result`` (all of it by default); a
        ValueError naming ``model`` when ``tokenized`` (``--tokenized-bleu``) cannot be met."""
        return dict(result)

    def after_training(
        self, ctx: TaskContext, model_dir: Path, data: Any, setup: Setup, note
    ) -> None:
        """What the task adds to ``setup.extras`` once trained (fine-tuning: its scores
        before and after). The default adds nothing."""

    # -- helpers ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def seeded(seed: int, build: Callable[[], Any]) -> Any:
    """``build()`` under ``seed`` (the global generator left as it was), so that a job's
    initial weights, hence its result, are the same on every run."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return build()


def note_token_examples(
    ctx: TaskContext, model: Any, train: Any, max_len: int, note, *, corpora: Sequence[str] = ()
) -> tuple[float, Any]:
    """Say what a token model trains on (``note``: its size, the examples kept and left out
    for ``max_len``, the padding of epoch 0's token-budget batches); returns that padding and
    the batcher that planned them, for the trainer to reuse (planning an epoch of millions of
    pairs takes a second). Examples that mix several corpora (named ``corpora``) also say what
    an epoch holds of each and how many epochs the run covers."""
    from ..data.batching import TokenBatcher
    from ..train.distributed import world

    config = ctx.train
    assert config is not None, "a training run's context"
    rank, size = world()
    batcher = TokenBatcher.for_examples(
        train, config.max_tokens, seed=config.seed, num_replicas=size, rank=rank
    )
    padding = batcher.padding_fraction(0)
    note(
        f"model: {ctx.model.get('preset', 'small')} preset, {model.num_parameters():,} "
        f"parameters; {len(train):,} training examples ({train.dropped:,} longer than "
        f"{max_len} tokens left out), padding {padding:.1%} of the batches"
    )
    mixture = getattr(train, "mixture", None)
    if mixture is not None:
        for line in epoch_lines(mixture, corpora, config, batcher.num_batches(0)):
            note(line)
    return padding, batcher


def epoch_lines(mixture: Any, names: Sequence[str], config: Any, batches: int) -> list[str]:
    """What an epoch of ``mixture`` (a :class:`~attnlab.data.mixture.Mixture`) holds of each
    corpus (``names``, else ``corpus0``, ...), and how many epochs the run of ``config`` (a
    :class:`~attnlab.train.TrainConfig`) covers at ``batches`` batches an epoch."""
    from ..train.optim import planned_steps

    names = list(names) or [f"corpus{k}" for k in range(len(mixture.sizes))]
    parts = []
    for name, size, count in zip(names, mixture.sizes, mixture.counts.tolist(), strict=True):
        seen = "all" if count == size else f"{count / size:.1%}" if size else "empty"
        parts.append(f"{name} {count:,} of {size:,} ({seen}; {count / mixture.epoch_size:.1%})")
    lines = [f"an epoch: {mixture.epoch_size:,} pairs: {', '.join(parts)}"]
    steps = planned_steps(config, batches)
    per_epoch = -(-batches // config.accumulate)
    if steps is None:
        lines.append(f"an epoch: {per_epoch:,} steps; the run is bounded by max_minutes alone")
    else:
        covered = steps / per_epoch if per_epoch else 0.0
        lines.append(
            f"an epoch: {per_epoch:,} steps; the run's {steps:,} steps cover {covered:.2f} epochs"
        )
    return lines


def shared_tokenizers(directory: Path, *, reuse: bool, rank: int, train: Callable[[], tuple]):
    """The tokenizers of a run: reloaded from ``directory`` when ``reuse`` (resuming) and it
    exists, else ``train()`` -> ``(src, tgt)`` saved there (``tgt is src``: one shared). In a
    distributed run rank 0 trains and saves them; the other ranks wait, then load them."""
    import torch.distributed as dist

    from ..data.tokenizer import load_tokenizers, save_tokenizers

    distributed = dist.is_available() and dist.is_initialized()
    if rank != 0:
        dist.barrier()  # rank 0 has written them
        return load_tokenizers(directory)
    if reuse and directory.is_dir():
        found = load_tokenizers(directory)
    else:
        src, tgt = train()
        save_tokenizers(directory, src, None if tgt is src else tgt)
        found = (src, tgt)
    if distributed:
        dist.barrier()
    return found

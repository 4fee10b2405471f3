"""What a task reads of the job that runs it: :class:`TaskContext`, made by the job layer
(:meth:`attnlab.jobs.Job.check`) and handed down, so that a task never holds, or calls back
into, the job. Its parts are the job's tables other than ``[task]`` (the task itself):
:class:`TokenizerOptions`, the ``[model]`` table, :class:`EvalOptions`, the
:class:`~attnlab.train.TrainConfig` of ``[train]`` (built once, for the run's directory) and a
student's :class:`~attnlab.tasks.distill.DistillOptions`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .._checks import check_keys, check_positive_int
from ..decode.options import DecodingOptions
from ..inference.bounds import MAX_TOKENS
from ..train.config import TrainConfig
from .distill import DistillOptions

__all__ = ["EvalOptions", "TaskContext", "TokenizerOptions"]

#: The keys of ``[eval]`` that are the final test's decoding (:class:`DecodingOptions` fields).
DECODING_KEYS = ("beam_size", "alpha")


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
        check_positive_int(self.sample_size, "sample_size")


@dataclass
class EvalOptions:
    """The ``[eval]`` table: ``decoding`` for the final test (its beam and length penalty,
    the table's ``beam_size`` and ``alpha``), and the validation BLEU
    measured at each evaluation during training on the first ``bleu_sentences`` validation
    pairs (greedy, for speed; 0 turns it off). ``bleu_tokenize``: sacreBLEU's tokenizer for
    BLEU (None: the target language's, as sacreBLEU's command line picks it; see
    :func:`attnlab.inference.scores.bleu_tokenizer`). Read from and written as the table's
    flat keys (:meth:`from_table`, :meth:`to_dict`), as ``job.json`` has them."""

    decoding: DecodingOptions = field(default_factory=DecodingOptions)
    bleu_sentences: int = 200
    max_tokens: int = MAX_TOKENS
    bleu_tokenize: str | None = None

    #: The keys of the ``[eval]`` table, in ``job.json``'s order.
    KEYS: ClassVar[tuple[str, ...]] = (
        "beam_size", "alpha", "bleu_sentences", "max_tokens", "bleu_tokenize",
    )  # fmt: skip

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

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> EvalOptions:
        """The options of an ``[eval]`` table; ValueError naming ``[eval]`` and the key."""
        check_keys(table, cls.KEYS, "[eval]")
        options = dict(table)
        given = {key: options.pop(key, None) for key in DECODING_KEYS}
        try:
            decoding = DecodingOptions().updated(**given)
        except ValueError as e:
            raise ValueError(f"[eval] {e}") from None
        return cls(decoding=decoding, **options)

    def to_dict(self) -> dict[str, Any]:
        """The ``[eval]`` table, flat, as ``job.json`` holds it."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        decoding = own.pop("decoding")
        return {key: getattr(decoding, key) for key in DECODING_KEYS} | own


@dataclass(frozen=True)
class TaskContext:
    """What a task reads of its job: the ``tokenizer``, ``model`` (the ``[model]`` table),
    ``eval`` and ``distill`` tables, and ``train``, the run's
    :class:`~attnlab.train.TrainConfig` (None outside a training run: scoring a saved model,
    preparing data ahead of a run)."""

    tokenizer: TokenizerOptions = field(default_factory=TokenizerOptions)
    model: Mapping[str, Any] = field(default_factory=lambda: {"preset": "small"})
    eval: EvalOptions = field(default_factory=EvalOptions)
    train: TrainConfig | None = None
    distill: DistillOptions | None = None

    @property
    def init_from(self) -> str | None:
        """``[model] init_from``: the model a fine-tuning run starts from (None: a fresh one)."""
        value = self.model.get("init_from")
        return None if value is None else str(value)

    @property
    def seed(self) -> int:
        """``[train] seed``: a new model's initial weights are drawn with it."""
        return self.train.seed if self.train is not None else 0

    @property
    def out(self) -> Path:
        """The run's directory (``--out``)."""
        if self.train is None:
            raise ValueError("out: this context is not a training run's (no [train] config)")
        return Path(self.train.out)

    def student(self) -> TaskContext:
        """This context once a student's teachers have translated its data: no ``[distill]``."""
        return dataclasses.replace(self, distill=None)

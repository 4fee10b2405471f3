"""The input bounds of translation: how long a source may be, and what becomes of one that is
longer. A source over the model's ``max_len`` tokens, or over ``CHARS_PER_TOKEN * max_len``
characters (checked before tokenizing, so that tokenizing is bounded too), is cut to its first
``max_len`` tokens or refused (:data:`TOO_LONG_CHOICES`), and reported as a :class:`TooLong`.
:class:`attnlab.inference.translator.Translator` applies them (:func:`bound_sources`); the CLI and
the explorer report them."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..data.tokens import TokenizerProtocol

__all__ = ["CHARS_PER_TOKEN", "MAX_TOKENS", "TOO_LONG_CHOICES", "TooLong", "bound_sources"]

#: A source longer than this many characters per token of the model's ``max_len`` is cut (or
#: refused) before it is tokenized, so that tokenizing is bounded too. Subword tokens average a
#: few characters (a byte-fallback token is a quarter of a character or more), so text this
#: long is well over ``max_len`` tokens with any ordinary vocabulary.
CHARS_PER_TOKEN = 20
#: What :class:`~attnlab.inference.translator.Translator` does with a source over the model's
#: ``max_len``: ``"cut"`` keeps its first ``max_len`` tokens, ``"refuse"`` does not translate it.
TOO_LONG_CHOICES = ("cut", "refuse")
#: Source tokens per batch (padded: the longest source times the rows), the default of the
#: Translator, ``attnlab translate``/``serve --max-tokens`` and the translation service's batcher:
#: how much decoding work one batch may hold.
MAX_TOKENS = 4096


@dataclass(frozen=True)
class TooLong:
    """A source over the model's ``max_len``, as
    :meth:`Translator.translate <attnlab.inference.translator.Translator.translate>` reports it.

    ``index``: its position in the texts; ``length``: its length in ``unit``, ``"tokens"``, or
    ``"characters"`` when it is over ``CHARS_PER_TOKEN * limit`` characters and was never
    tokenized whole; ``limit``: the model's ``max_len`` (tokens); ``refused``: True where it was
    not translated (its translation is ``""``), False where its first ``limit`` tokens were.
    """

    index: int
    length: int
    unit: str
    limit: int
    refused: bool

    def describe(self) -> str:
        """One line without the text's name: ``"90 tokens, more than the model's max_len of
        64: cut to its first 64 tokens"``."""
        action = "refused" if self.refused else f"cut to its first {self.limit:,} tokens"
        if self.unit == "characters":
            most = CHARS_PER_TOKEN * self.limit
            return (
                f"{self.length:,} characters, more than {most:,} ({CHARS_PER_TOKEN} per token of "
                f"the model's max_len of {self.limit:,}): {action}"
            )
        return f"{self.length:,} tokens, more than the model's max_len of {self.limit:,}: {action}"

    def __str__(self) -> str:
        return f"texts[{self.index}]: {self.describe()}"


def bound_sources(
    tokenizer: TokenizerProtocol,
    texts: Sequence[str],
    limit: int,
    refuse: bool,
    on_too_long: Callable[[TooLong], object] | None,
) -> tuple[list[list[int]], list[TooLong]]:
    """The source ids of ``texts`` (strings) by ``tokenizer``, each at most ``limit`` tokens
    (a refused one empty), and a :class:`TooLong` for each text over the bounds, in order.

    A text over them keeps its first ``limit`` tokens (a tokenizer that ends its sources in
    EOS keeps that EOS last), or with ``refuse`` none. Each is passed to ``on_too_long``;
    without it a cut text is a warning and a refused one a ValueError naming the first, raised
    before any report.
    """
    most_chars = CHARS_PER_TOKEN * limit
    # Cut before tokenizing: the tokenizer's time and memory grow with the text.
    encoded = tokenizer.encode_batch([t[:most_chars] for t in texts]) if texts else []
    found: list[TooLong] = []
    for i, text in enumerate(texts):
        if len(text) > most_chars:
            found.append(TooLong(i, len(text), "characters", limit, refuse))
        elif len(encoded[i]) > limit:
            found.append(TooLong(i, len(encoded[i]), "tokens", limit, refuse))
    if refuse and found and on_too_long is None:
        raise ValueError(f"{found[0]} (too_long='refuse'; 'cut' keeps the first tokens)")
    # A tokenizer that frames its sources (Marian's ends them in EOS) keeps its frame.
    framed = tokenizer.add_eos
    for report in found:
        ids = encoded[report.index]
        cut = [*ids[: limit - 1], ids[-1]] if framed else ids[:limit]
        encoded[report.index] = [] if refuse else cut
        if on_too_long is not None:
            on_too_long(report)
        else:
            # The caller of Translator.translate / n_best (through _encode_sources).
            warnings.warn(str(report), stacklevel=4)
    return encoded, found

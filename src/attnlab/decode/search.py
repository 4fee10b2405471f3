"""Decoding: greedy search, beam search and sampling, on top of the KV cache.

Every function takes a :class:`attnlab.Transformer` with source ids, or a
:class:`attnlab.TransformerLM` with prompt ids, and returns a :class:`Generation`. Decoding is
incremental: the source is encoded once, each decoder layer projects the memory's keys and
values once (:meth:`attnlab.Transformer.new_cache`), and each step feeds one new token per row
through the decoder (:class:`attnlab.KVCache`).

* :func:`greedy_search`: the most probable next token at each step.
* :func:`beam_search`: the paper's decoding (Vaswani et al. 2017, sec. 6.1): beam size 4,
  length penalty ``alpha = 0.6`` (Wu et al. 2016, eq. 14: ``lp(Y) = ((5 + |Y|) / 6)^alpha``,
  a hypothesis ranks by ``log P(Y | X) / lp(Y)``), maximum output length = input length + 50,
  batched over sentences and beams; a sentence stops once no live hypothesis can beat its
  finished ones.
* :func:`sample`: ancestral sampling with temperature, top-k and top-p (nucleus, Holtzman et
  al. 2020) filtering.

Conventions: outputs never contain ``pad_id`` or ``bos_id`` (they are not generated); a row
ends with ``eos_id`` or when it reaches its maximum length; a batch decodes exactly as its rows
one at a time (padding is moved out of the way, each row has its own maximum length, rows that
finish leave the batch). The model runs in eval mode (every module's mode is restored
afterwards) without gradients.

Speed: an encoder-decoder :class:`attnlab.Transformer` decodes on the lean step of
:mod:`attnlab.decode.fast` (packed weights, one key/value store, beam search without reordering
the cache), tested equal to the reference (``model.decode`` with its cache), which
``fast=False`` forces and which serves every other model (``why_not_fast_path`` says why).
Fewer than :data:`~attnlab.decode.session.SINGLE_THREAD_ROWS` rows per step decode on one
CPU thread, unless the process may run on two physical cores
(:func:`attnlab.decode.session.separate_cores`). The session, input checks and guards that
the three share are in :mod:`attnlab.decode.session`.
``quantize="int8"`` trades exactness for speed: int8 weights, and activations quantized with
one scale per call over the batch, so an int8 output can depend on the batch it is in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import (
    check_optional_int,
    check_positive_int,
    check_positive_number,
    check_type,
    is_number,
)
from ..models.transformer import Transformer, TransformerLM
from .constraints import Guide, allocate
from .ensemble import Ensemble, open_session
from .options import ALPHA, BEAM_SIZE, DecodingOptions
from .session import EvalMode, Masker, Scoring, Threads, argmax, check_lengths

__all__ = [
    "Generation",
    "Scorer",
    "TokenCallback",
    "as_scorer",
    "beam_search",
    "decode",
    "greedy_search",
    "length_penalty",
    "sample",
]

#: What the searches decode with: one model, an :class:`~attnlab.decode.ensemble.Ensemble`, or a
#: list of models (their ensemble).
Scorer = Transformer | TransformerLM | Ensemble | Sequence[Transformer | TransformerLM]


def as_scorer(model: Scorer) -> Transformer | TransformerLM | Ensemble:
    """``model`` as a search takes it: a list or tuple of models becomes their
    :class:`~attnlab.decode.ensemble.Ensemble`; a model or an Ensemble is returned as it is."""
    if isinstance(model, (list, tuple)):
        return Ensemble(model)
    return model  # type: ignore[return-value]


#: ``on_token(rows, tokens)`` of :func:`greedy_search` and :func:`sample`: the ``(N,)`` indices
#: of the inputs still decoding and the ``(N,)`` tokens they chose at this step.
TokenCallback = Callable[[Tensor, Tensor], object]


@dataclass
class Generation:
    """The output of a decoding function, one row per input.

    Attributes:
        sequences: ``(B, T)`` int64 generated ids (without BOS, without the prompt), ending
            with ``eos_id`` when the row finished, then ``pad_id``.
        lengths: ``(B,)`` tokens in each row, EOS included.
        log_probs: ``(B,)`` float32 ``log P(sequence | input)`` under the model (the sum of
            each chosen token's log-probability, before any temperature or filtering).
        scores: ``(B,)`` what the search ranked by: ``log_probs / lp(length)`` for beam
            search, ``log_probs`` otherwise.
        finished: ``(B,)`` bool, True where the row ended with EOS (False: it reached its
            maximum length).
        token_log_probs: ``(B, T)`` float32, each generated token's log-probability under the
            model (``log_probs`` is their sum), 0 past a row's end.
    """

    sequences: Tensor
    lengths: Tensor
    log_probs: Tensor
    scores: Tensor
    finished: Tensor
    eos_id: int
    token_log_probs: Tensor | None = None

    def token_scores(self) -> list[list[float]]:
        """Each row's per-token log-probabilities as lists, EOS's included where it ended."""
        if self.token_log_probs is None:
            raise ValueError("token_scores: this Generation carries no token_log_probs")
        values = self.token_log_probs.tolist()
        return [row[: int(n)] for row, n in zip(values, self.lengths, strict=True)]

    def tolist(self, *, keep_eos: bool = False) -> list[list[int]]:
        """The generated ids of each row as lists, without padding (and without EOS unless
        ``keep_eos``)."""
        rows = self.sequences.tolist(), self.lengths.tolist(), self.finished.tolist()
        return [seq[: n - (done and not keep_eos)] for seq, n, done in zip(*rows, strict=True)]


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """Wu et al. (2016), eq. 14: ``((5 + length) / 6) ** alpha``."""
    return ((5.0 + length) / 6.0) ** alpha


# -- greedy and sampling: one hypothesis per row -----------------------------------------------


def _decode_rows(
    model: Scorer,
    inputs: object,
    choose: Callable[[Tensor], Tensor],
    max_new_tokens: int | None,
    min_new_tokens: int,
    fast: bool,
    quantize: str | None,
    on_token: TokenCallback | None = None,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> Generation:
    """One token per row per step, chosen by ``choose(log_probs (N, V)) -> ids (N,)``; rows
    that finish leave the batch (and the cache). ``on_token(rows, tokens)`` sees each step's
    choices as they are made; ``prefixes`` force each row's first tokens."""
    check_lengths(max_new_tokens, min_new_tokens)
    if on_token is not None and not callable(on_token):
        raise TypeError(f"on_token: expected a callable or None, got {type(on_token).__name__}")
    model = as_scorer(model)
    session = open_session(model, inputs, fast, quantize)
    eos = session.config.eos_id
    with EvalMode(model), Threads(session.start.shape[0], session.start.device):
        limit = session.max_new_tokens(max_new_tokens)
        guide = None
        if prefixes is not None:
            guide = Guide(prefixes, None, beam=1, limit=limit, eos_id=eos, banned=session.banned())
        batch, width = limit.shape[0], int(limit.max())
        device = limit.device
        log_probs = torch.zeros(batch, device=device)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        rows = torch.arange(batch, device=device)  # the inputs still decoding
        row_limit, row_log_probs = limit, log_probs.clone()  # of those rows
        chosen: list[tuple[Tensor, Tensor, Tensor]] = []  # (rows, tokens, log P) of each step
        ids = session.begin(1, width)
        mask = Masker(session, min_new_tokens)
        limit_steps = set(limit.tolist())  # where some row reaches its maximum length
        for step in range(width):
            scores = mask(session.step(ids), step)
            if guide is not None:
                guide.mask(scores, step, rows)
            token = choose(scores)
            token_log_prob = scores.gather(1, token.unsqueeze(1)).view(-1)
            row_log_probs += token_log_prob
            chosen.append((rows, token, token_log_prob))
            if on_token is not None:
                on_token(rows, token)
            # EOS cannot come before min_new_tokens, nor a row end before its limit: no check.
            if step < min_new_tokens and step + 1 not in limit_steps:
                ids = token.unsqueeze(1)
                continue
            ended = token == eos
            done = ended | (row_limit <= step + 1)
            if bool(done.any()):
                out = rows[done]
                log_probs[out], lengths[out], finished[out] = (
                    row_log_probs[done],
                    step + 1,
                    ended[done],
                )
                if bool(done.all()):
                    break
                keep = (~done).nonzero().squeeze(1)
                rows, token = rows[keep], token[keep]
                row_limit, row_log_probs = row_limit[keep], row_log_probs[keep]
                session.select(keep)
            ids = token.unsqueeze(1)
        width = int(lengths.max())
        sequences = torch.full((batch, width), session.config.pad_id, device=device)
        token_log_probs = torch.zeros(batch, width, device=device)
        for step, (where, token, token_log_prob) in enumerate(chosen):
            sequences[where, step] = token
            token_log_probs[where, step] = token_log_prob
    return Generation(
        sequences=sequences,
        lengths=lengths,
        log_probs=log_probs,
        scores=log_probs.clone(),
        finished=finished,
        eos_id=eos,
        token_log_probs=token_log_probs,
    )


def greedy_search(
    model: Scorer,
    inputs: Tensor | Sequence[Sequence[int]],
    *,
    max_new_tokens: int | None = None,
    min_new_tokens: int = 0,
    fast: bool = True,
    quantize: str | None = None,
    on_token: TokenCallback | None = None,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> Generation:
    """Greedy decoding: at each step the most probable token.

    Args:
        model: a :class:`attnlab.Transformer` (``inputs`` are source ids) or a
            :class:`attnlab.TransformerLM` (``inputs`` are prompts; the output continues them).
        inputs: ``(B, S)`` ids padded with ``pad_id``, or a list of id lists.
        max_new_tokens: the longest output; default the source length + 50 per row (the
            paper's, sec. 6.1) for a Transformer, 50 for a language model. With learned
            positions, outputs also stop where the model's ``max_len`` positions end.
        min_new_tokens: EOS is not generated before this many tokens.
        fast: decode with the lean step of :mod:`attnlab.decode.fast` when the model allows it
            (:func:`attnlab.decode.fast.why_not_fast_path`); False forces the readable
            reference (``model.decode`` with its cache). Both compute the same numbers.
        quantize: ``"int8"`` runs the decoder's linear maps and the output projection with int8
            weights (fast path only; see :mod:`attnlab.decode.fast`); None keeps the model's
            dtype. Int8 activations are quantized over the whole batch: a sentence's int8
            output may differ with the batch around it.
        on_token: ``on_token(rows, tokens)`` after each step, as the tokens are chosen (to
            stream them): ``rows`` ``(N,)`` are the indices of the inputs still decoding and
            ``tokens`` ``(N,)`` the token each chose (EOS included). One pass over the cache:
            streaming costs nothing beyond the callback.
        prefixes: per input, target ids its output must start with (a forced prefix,
            :mod:`attnlab.decode.constraints`); the search continues from them. None: no prefix.

    Returns: a :class:`Generation`; ``scores`` are the log-probabilities.
    """
    return _decode_rows(
        model, inputs, argmax, max_new_tokens, min_new_tokens, fast, quantize, on_token, prefixes
    )


def sample(
    model: Scorer,
    inputs: Tensor | Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    max_new_tokens: int | None = None,
    min_new_tokens: int = 0,
    fast: bool = True,
    quantize: str | None = None,
    on_token: TokenCallback | None = None,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> Generation:
    """Ancestral sampling: draw each token from the model's distribution, reshaped.

    The log-probabilities are divided by ``temperature`` (< 1 sharper, > 1 flatter), then only
    the ``top_k`` most probable tokens are kept, then only the smallest set of most probable
    tokens whose probability reaches ``top_p`` (nucleus sampling; the most probable token is
    always kept); the token is drawn from what remains, renormalised.

    Args: as :func:`greedy_search`, and
        temperature: a number > 0.
        top_k: keep the k most probable tokens (None: all).
        top_p: in (0, 1] (None or 1: no nucleus filtering).
        generator: a ``torch.Generator`` for reproducible draws (on the model's device).
        fast, quantize, on_token, prefixes: as :func:`greedy_search`.

    Returns: a :class:`Generation`; ``log_probs`` and ``scores`` are the model's own
    log-probabilities of the drawn tokens (temperature 1, unfiltered).
    """
    temperature = check_positive_number(temperature, "temperature")
    check_optional_int(top_k, "top_k")
    if top_p is not None and not (is_number(top_p) and 0 < top_p <= 1):
        raise ValueError(f"top_p: expected a number in (0, 1] or None, got {top_p!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator, got {type(generator).__name__}")

    def choose(log_probs: Tensor) -> Tensor:
        logits = log_probs / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, -math.inf)
        if top_p is not None and top_p < 1:
            logits = _nucleus(logits, top_p)
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return _decode_rows(
        model, inputs, choose, max_new_tokens, min_new_tokens, fast, quantize, on_token, prefixes
    )


def _nucleus(logits: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose probability reaches ``top_p``."""
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # the mass of the more probable tokens
    drop = before >= top_p  # already reached without this token (never the first)
    ordered = ordered.masked_fill(drop, -math.inf)
    return torch.full_like(logits, -math.inf).scatter(-1, order, ordered)


# -- beam search -------------------------------------------------------------------------------


def beam_search(
    model: Scorer,
    inputs: Tensor | Sequence[Sequence[int]],
    *,
    beam_size: int = BEAM_SIZE,
    alpha: float = ALPHA,
    max_new_tokens: int | None = None,
    min_new_tokens: int = 0,
    fast: bool = True,
    quantize: str | None = None,
    n_best: int = 1,
    prefixes: Sequence[Sequence[int]] | None = None,
    constraints: Sequence[Sequence[object]] | None = None,
    continuations: Tensor | None = None,
) -> Generation:
    """Beam search with the length penalty of Wu et al. (2016), as the paper (sec. 6.1).

    Each sentence keeps ``beam_size`` live hypotheses. At each step every live hypothesis is
    extended by every token and the extensions are ranked by ``log P``. Those among the best
    ``beam_size`` that end in EOS are finished; the best ``beam_size`` that do not end in EOS
    (looking as far as rank ``2 x beam_size``) live on. A hypothesis reaching the maximum
    length finishes without EOS. Finished hypotheses are ranked by ``log P / lp``, with
    ``lp = ((5 + length) / 6)^alpha`` (the length counts EOS), and each sentence keeps its
    ``beam_size`` best. A sentence stops when no live hypothesis can still beat its
    ``n_best``-th finished one: a live ``log P`` only falls as tokens are added, so
    ``log P / lp(maximum length)`` bounds every score it can reach. (Stopping as soon as
    ``beam_size`` hypotheses have finished, as fairseq and transformers' ``early_stopping=True``
    do, can return a truncation that an early EOS ranked into the set while the better
    hypothesis was still live.) A sentence also stops at its maximum length or when nothing is
    left alive; the answer is its best finished hypothesis. So ``beam_size=1`` is greedy
    search, and a beam wider than the number of possible outputs searches them all. Sentences
    that stop leave the batch.

    With ``constraints`` the search is lexically constrained (dynamic beam allocation, Post &
    Vilar 2018; :mod:`attnlab.decode.constraints`): every output contains every phrase of its input.

    Args: as :func:`greedy_search`, and
        beam_size: hypotheses per sentence (4 in the paper; 1 is greedy search).
        alpha: the length penalty's exponent (0.6 in the paper; 0: plain log-probability).
        fast, quantize: as :func:`greedy_search`. On the fast path the beams of a sentence
            share its memory's keys and values, and the self-attention cache is never
            reordered (see :class:`attnlab.decode.fast.FastDecoder`).
        n_best: finished hypotheses to return per sentence, 1 to ``beam_size``.
        prefixes: as :func:`greedy_search`'s.
        constraints: per input, the phrases its output must contain (each a list of target
            ids, or a :class:`attnlab.decode.constraints.Phrase` with alternative tokenisations), at
            most ``beam_size`` per input; None or ``[]``: none. A request no output can meet
            (an empty phrase, EOS in a phrase, phrases longer than the length limit) raises
            :class:`attnlab.decode.constraints.GuideError`, a ValueError naming the input.
        continuations: with ``constraints``, ``(V,)`` bool: the tokens that continue the word
            before them; none may follow a completed phrase, so a phrase ends where a word does
            (the Translator derives it from its tokenizer). None: any token may.

    Returns: a :class:`Generation` with the best finished hypothesis of each sentence;
    ``scores`` are ``log_probs / lp(lengths)``. With ``n_best = n`` it has ``B n`` rows, the
    ``n`` best of sentence ``i`` at rows ``i n`` to ``i n + n - 1``, best first; a sentence
    that finished fewer (a short maximum length) has rows of score ``-inf`` and length 0.
    """
    check_positive_int(beam_size, "beam_size")
    check_positive_int(n_best, "n_best")
    if n_best > beam_size:
        raise ValueError(f"n_best: expected at most beam_size ({beam_size}), got {n_best}")
    if not (is_number(alpha) and math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha: expected a finite number >= 0, got {alpha!r}")
    check_lengths(max_new_tokens, min_new_tokens)
    model = as_scorer(model)
    session = open_session(model, inputs, fast, quantize)
    rows = session.start.shape[0] * beam_size
    with EvalMode(model), Threads(rows, session.start.device):
        limit = session.max_new_tokens(max_new_tokens)
        guide = None
        if prefixes is not None or constraints is not None:
            eos, banned = session.config.eos_id, session.banned()
            guide = Guide(
                prefixes,
                constraints,
                beam=beam_size,
                limit=limit,
                eos_id=eos,
                banned=banned,
                continuations=continuations,
            )
        search = _BeamSearch(session, limit, beam_size, float(alpha), min_new_tokens, guide)
        return search.run(n_best)


class _BeamSearch:
    """The state of a batched beam search; see :func:`beam_search`."""

    def __init__(
        self,
        session: Scoring,
        limit: Tensor,
        beam: int,
        alpha: float,
        min_new_tokens: int,
        guide: Guide | None = None,
    ) -> None:
        self.session, self.limit, self.beam, self.alpha = session, limit, beam, alpha
        self.min_new_tokens, self.guide = min_new_tokens, guide
        self.eos = session.config.eos_id
        batch, self.width = limit.shape[0], int(limit.max())
        device = self.device = limit.device
        # Finished hypotheses of every sentence, best first: (B, K) scores, (B, K, width) ids.
        self.done_scores = torch.full((batch, beam), -math.inf, device=device)
        self.done_log_probs = torch.zeros(batch, beam, device=device)
        self.done_lengths = torch.zeros(batch, beam, dtype=torch.long, device=device)
        self.done_ids = torch.full((batch, beam, self.width), session.config.pad_id, device=device)
        self.done_token_log_probs = torch.zeros(batch, beam, self.width, device=device)
        self.done_eos = torch.zeros(batch, beam, dtype=torch.bool, device=device)

    def run(self, n_best: int = 1) -> Generation:
        session, k, eos, guide = self.session, self.beam, self.eos, self.guide
        batch, device = self.limit.shape[0], self.device
        sentences = torch.arange(batch, device=device)  # the sentences still searching
        # Live hypotheses: log P (n, K), ids and their log P so far (n, K, t). Only beam 0 is
        # live at first.
        live = torch.full((batch, k), -math.inf, device=device)
        live[:, 0] = 0.0
        history = torch.zeros(batch, k, 0, dtype=torch.long, device=device)
        history_log_probs = torch.zeros(batch, k, 0, device=device)
        ids = session.begin(k, self.width)
        mask = Masker(session, self.min_new_tokens)
        constrained = guide if guide is not None and guide.constrained else None
        if constrained is not None:
            constrained.start(k)
        vocab = session.vocab_size
        rank = torch.arange(min(2 * k, k * vocab), device=device)[None, :]
        for step in range(self.width):
            n = sentences.shape[0]
            scores = mask(session.step(ids), step)  # (n K, V)
            if guide is not None:
                guide.mask(scores, step, sentences, k)
            total = (live.view(n * k, 1) + scores).view(n, k * vocab)
            top, index = total.topk(min(2 * k, k * vocab), dim=1)  # (n, 2K), best first
            counts = rank < k  # an EOS among these finishes its hypothesis
            if constrained is not None:
                top, index, counts = self._widen(sentences, scores, live, top, index, counts, step)
            origin, token = index // vocab, index % vocab
            token_log_probs = scores.view(n, k * vocab).gather(1, index)
            length = step + 1
            last = length >= self.limit[sentences]  # (n,): this step ends these sentences
            ended = ((token == eos) & counts) | last[:, None]  # EOS counts in the top K
            ended &= torch.isfinite(top)
            if constrained is not None:
                kmp, met, just = constrained.advance(sentences, origin, token, length)
                ended &= (token == eos) | constrained.all_met(met)
            extended = torch.cat([history.gather(1, _expand(origin, history)), token[..., None]], 2)
            extended_log_probs = torch.cat(
                [
                    history_log_probs.gather(1, _expand(origin, history_log_probs)),
                    token_log_probs[..., None],
                ],
                2,
            )
            self._finish(sentences, top, extended, extended_log_probs, ended, token == eos, length)

            # The best K extensions that did not end live on (EOS past rank K is dropped);
            # under constraints, K chosen round-robin over the banks (Post & Vilar 2018).
            live_top = top.masked_fill(ended | (token == eos), -math.inf)
            if constrained is not None:
                pick = allocate(live_top, constrained.bank(sentences, kmp, met), k)
                live = live_top.gather(1, pick)
                constrained.update(kmp, met, just, pick)
            else:
                live, pick = live_top.topk(k, dim=1)  # (n, K)
            origin = origin.gather(1, pick)
            history = extended.gather(1, _expand(pick, extended))
            history_log_probs = extended_log_probs.gather(1, _expand(pick, extended_log_probs))
            token = token.gather(1, pick)

            stop = last | self._settled(sentences, live, n_best)
            if bool(stop.all()):
                break
            keep = (~stop).nonzero().squeeze(1)
            rows = (keep[:, None] * k + origin[keep]).reshape(-1)  # cache rows to continue
            pruned = keep.shape[0] < n
            session.select(rows, cross=pruned)
            if pruned:
                kept = (t[keep] for t in (sentences, live, history, history_log_probs, token))
                sentences, live, history, history_log_probs, token = kept
                if constrained is not None:
                    constrained.keep(keep)
            ids = token.reshape(-1, 1)
        return self._result(n_best)

    def _widen(
        self,
        sentences: Tensor,
        scores: Tensor,
        live: Tensor,
        top: Tensor,
        index: Tensor,
        counts: Tensor,
        step: int,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The beam's best extensions ``(top, index)`` ``(n, 2K)`` and the candidates dynamic
        beam allocation adds (:meth:`attnlab.decode.constraints.Guide.extra_candidates`), each once:
        a repeated or impossible one scores ``-inf``. An EOS among the added ones finishes."""
        n, k = live.shape
        vocab = scores.shape[1]
        assert self.guide is not None
        extra = self.guide.extra_candidates(sentences, scores.view(n, k, vocab), step)  # (n, E)
        valid = extra >= 0
        extra = extra.clamp(min=0)
        extra_top = live.gather(1, extra // vocab) + scores.view(n, k * vocab).gather(1, extra)
        index = torch.cat([index, extra], dim=1)
        top = torch.cat([top, extra_top.masked_fill(~valid, -math.inf)], dim=1)
        c = index.shape[1]
        earlier = torch.ones(c, c, dtype=torch.bool, device=index.device).tril(-1)
        repeated = ((index[:, :, None] == index[:, None, :]) & earlier[None]).any(2)
        top = top.masked_fill(repeated, -math.inf)
        counts = torch.cat([counts.expand(n, -1), torch.ones_like(extra, dtype=torch.bool)], 1)
        return top, index, counts

    def _finish(
        self,
        sentences: Tensor,
        log_probs: Tensor,
        ids: Tensor,
        token_log_probs: Tensor,
        ended: Tensor,
        with_eos: Tensor,
        length: int,
    ) -> None:
        """Merge the candidates that ``ended`` into the sentences' K best finished ones."""
        if not bool(ended.any()):
            return
        penalty = length_penalty(length, self.alpha)
        scores = torch.where(ended, log_probs / penalty, -math.inf)
        n, c = scores.shape
        padded = torch.full((n, c, self.width), self.session.config.pad_id, device=self.device)
        padded[:, :, :length] = ids
        padded_log_probs = torch.zeros(n, c, self.width, device=self.device)
        padded_log_probs[:, :, :length] = token_log_probs
        all_scores = torch.cat([self.done_scores[sentences], scores], dim=1)
        best, pick = all_scores.topk(self.beam, dim=1)
        merged = {
            "done_log_probs": (self.done_log_probs[sentences], log_probs),
            "done_lengths": (
                self.done_lengths[sentences],
                torch.full_like(with_eos, length, dtype=torch.long),
            ),
            "done_ids": (self.done_ids[sentences], padded),
            "done_token_log_probs": (self.done_token_log_probs[sentences], padded_log_probs),
            "done_eos": (self.done_eos[sentences], with_eos),
        }
        self.done_scores[sentences] = best
        for name, (old, new) in merged.items():
            both = torch.cat([old, new], dim=1)
            getattr(self, name)[sentences] = both.gather(1, _expand(pick, both))

    def _settled(self, sentences: Tensor, live: Tensor, n_best: int) -> Tensor:
        """``(n,)`` True where no live hypothesis can beat the ``n_best``-th finished one (its
        best reachable score is ``log P / lp(maximum length)``), or none is left alive."""
        best = live.amax(dim=1)  # live[:, 0] for the ordinary beam, sorted best first
        bound = best / length_penalty(self.limit[sentences], self.alpha)
        return (self.done_scores[sentences, n_best - 1] >= bound) | torch.isneginf(best)

    def _result(self, n_best: int = 1) -> Generation:
        """The ``n_best`` best finished hypotheses of each sentence, as rows."""
        lengths = self.done_lengths[:, :n_best].reshape(-1)
        ids = self.done_ids[:, :n_best].reshape(-1, self.width)
        width = int(lengths.max())
        token_log_probs = self.done_token_log_probs[:, :n_best].reshape(-1, self.width)
        return Generation(
            sequences=ids[:, :width],
            lengths=lengths,
            log_probs=self.done_log_probs[:, :n_best].reshape(-1),
            scores=self.done_scores[:, :n_best].reshape(-1),
            finished=self.done_eos[:, :n_best].reshape(-1),
            eos_id=self.eos,
            token_log_probs=token_log_probs[:, :width],
        )


def _expand(index: Tensor, like: Tensor) -> Tensor:
    """``index`` ``(n, m)`` broadcast over the trailing dimensions of ``like`` for gather."""
    return index.view(*index.shape, *([1] * (like.dim() - 2))).expand(*index.shape, *like.shape[2:])


# -- the one entry point: DecodingOptions -> a search ------------------------------------------


def decode(
    model: Scorer,
    inputs: Tensor | Sequence[Sequence[int]],
    options: DecodingOptions | None = None,
    *,
    max_new_tokens: int | None = None,
    prefixes: Sequence[Sequence[int]] | None = None,
    constraints: Sequence[Sequence[object]] | None = None,
    continuations: Tensor | None = None,
    quantize: str | None = None,
    generator: torch.Generator | None = None,
    fast: bool = True,
) -> Generation:
    """Decode ``inputs`` as ``options`` say (:class:`~attnlab.decode.options.DecodingOptions`,
    default its defaults): :func:`sample` when ``options.sample``, else :func:`greedy_search`
    for a beam of 1 (one best, unconstrained), else :func:`beam_search`, with ``options.n_best``
    hypotheses per input. The Translator, the
    explorer and training's validation all decode through here.

    Args:
        model: a model, an :class:`~attnlab.decode.ensemble.Ensemble` or a list of models.
        inputs: as the searches'.
        max_new_tokens: the longest output for every row (None: ``options.max_new_tokens``,
            and where that is None each row's source length + 50).
        prefixes, constraints, continuations, quantize, fast: as :func:`beam_search`'s
            (prefixes also for greedy search and sampling).
        generator: the random generator of a sampled decoding (None: a new one seeded with
            ``options.seed`` where it is set).
    """
    options = DecodingOptions() if options is None else options
    check_type(options, DecodingOptions, "options", "a DecodingOptions")
    limit = options.max_new_tokens if max_new_tokens is None else max_new_tokens
    guided = prefixes if prefixes is not None and any(prefixes) else None
    options.check_constraints(constraints is not None)
    if options.sample:
        scorer = as_scorer(model)
        if generator is None:
            device = next(scorer.parameters()).device
            generator = options.generator(device)
        return sample(
            scorer,
            inputs,
            temperature=options.temperature,
            top_k=options.top_k,
            top_p=options.top_p,
            generator=generator,
            max_new_tokens=limit,
            fast=fast,
            quantize=quantize,
            prefixes=guided,
        )
    if options.beam_size == 1 and constraints is None:
        return greedy_search(
            model, inputs, max_new_tokens=limit, fast=fast, quantize=quantize, prefixes=guided
        )
    return beam_search(
        model,
        inputs,
        beam_size=options.beam_size,
        alpha=options.alpha,
        max_new_tokens=limit,
        fast=fast,
        quantize=quantize,
        n_best=options.n_best,
        prefixes=guided,
        constraints=constraints,
        continuations=continuations,
    )

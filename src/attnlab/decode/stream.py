"""Greedy decoding of sentences that come and go: iteration-level batching (Yu et al. 2022,
"Orca").

A batch decoded whole runs until its last sentence ends: at the sizes attnlab trains, a step
costs about the same for one row as for thirty, so a batch whose last sentence runs on alone
(a model that never ends a sentence runs to its length limit, source + 50 tokens) costs as
many steps of one row, while the sentences that came meanwhile wait. :class:`GreedyStream`
takes new sentences between any two steps: they join the rows still decoding
(:meth:`attnlab.decode.fast.FastDecoder.join`), and each row leaves as it ends. Each sentence
decodes as :func:`attnlab.decode.search.greedy_search` decodes it alone (tested equal, token for
token, in ``tests/decode/test_stream.py``); the translation service's batcher steps it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.transformer import Transformer
from .fast import FastDecoder, why_not_fast_path
from .session import EvalMode, Masker, Session, Threads, argmax

__all__ = ["Finished", "GreedyStream", "why_not_stream"]


def why_not_stream(model: object, quantize: str | None = None) -> str:
    """Why ``model`` cannot decode as a :class:`GreedyStream` ("" when it can): the stream runs
    on the fast step of one encoder-decoder model with the paper's positions."""
    if not isinstance(model, Transformer):
        return f"expected an attnlab Transformer, got {type(model).__name__}"
    why = why_not_fast_path(model, quantize)
    if why:
        return why
    if model.config.positional in ("rotary", "alibi"):
        return f"positional={model.config.positional!r} takes one position per step, not per row"
    return ""


@dataclass(frozen=True)
class Finished:
    """A sentence that left the stream: its ``key``, its ``ids`` (EOS last where it ended),
    each token's log-probability, their sum ``log_prob``, and whether it ended with EOS
    (False: it reached its length limit)."""

    key: Hashable
    ids: list[int]
    token_log_probs: list[float]
    log_prob: float
    finished: bool


class GreedyStream:
    """Greedy decoding of a changing set of sources (see the module docstring).

    Args:
        model: an attnlab Transformer on the fast step (:func:`why_not_stream` is "").
        quantize: None or ``"int8"``, as :func:`attnlab.decode.search.decode`'s.

    :meth:`add` admits sources, each with its own length limit and a key; :meth:`step` feeds
    every row one token and returns the sentences that ended.
    """

    def __init__(self, model: Transformer, quantize: str | None = None) -> None:
        why = why_not_stream(model, quantize)
        if why:
            raise ValueError(f"model: cannot decode as a stream: {why}")
        self.model, self.quantize = model, quantize
        self.eos = model.config.eos_id
        self.device = next(model.parameters()).device
        self.masker: Masker | None = None  # the searches' own (pad and BOS never come next)
        self.decoder: FastDecoder | None = None
        self._reset()

    def _reset(self) -> None:
        self.decoder = None
        # One entry per row of the decoder; a row that ended stays (its key None) until the
        # next join or until a quarter of the rows have ended: leaving costs a copy of the
        # cache, while a row more in a step costs little.
        self.keys: list[Hashable | None] = []
        self.live = 0
        self.ids = torch.zeros(0, dtype=torch.long, device=self.device)  # each row's next input
        self.limits = torch.zeros(0, dtype=torch.long, device=self.device)
        self.steps = torch.zeros(0, dtype=torch.long, device=self.device)
        self.sums = torch.zeros(0, device=self.device)  # log P so far, float32 as the searches
        self.alive = torch.zeros(0, dtype=torch.bool, device=self.device)
        self.tokens: list[list[int]] = []
        self.token_log_probs: list[list[float]] = []

    @property
    def rows(self) -> int:
        """The sentences decoding now."""
        return self.live

    def add(
        self, sources: Sequence[Sequence[int]], limits: Sequence[int], keys: Sequence[Hashable]
    ) -> None:
        """Admit ``sources`` (non-empty id lists), each at most ``limits[i]`` (>= 1) tokens
        long, known by ``keys[i]``; they take their first step at the next :meth:`step`."""
        if not (len(sources) == len(limits) == len(keys)):
            raise ValueError(
                f"add: {len(sources)} sources, {len(limits)} limits and {len(keys)} keys; "
                f"expected one of each per sentence"
            )
        if not sources:
            return
        if min(limits) < 1:
            raise ValueError(f"limits: expected each >= 1, got {min(limits)}")
        config = self.model.config
        if config.positional == "learned" and max(limits) > config.max_len:
            raise ValueError(
                f"limits: at most the model's max_len={config.max_len} (learned positions), "
                f"got {max(limits)}"
            )
        session = Session(self.model, sources, fast=True, quantize=self.quantize)
        with EvalMode(self.model):
            first = session.begin(1, max(limits)).view(-1)
        new = session.fast
        assert new is not None  # why_not_stream checked the fast path
        if self.masker is None:
            self.masker = Masker(session, 0)
        if self.decoder is None:
            self.decoder = new
        else:  # the rows that ended leave in the same copy
            self._keep(self.alive.nonzero().view(-1), lambda rows: self.decoder.join(new, rows))
        count = len(sources)
        self.keys += list(keys)
        self.live += count
        self.ids = torch.cat([self.ids, first])
        self.limits = torch.cat([self.limits, torch.tensor(list(limits), device=self.device)])
        self.steps = torch.cat([self.steps, self.steps.new_zeros(count)])
        self.sums = torch.cat([self.sums, self.sums.new_zeros(count)])
        self.alive = torch.cat([self.alive, self.alive.new_ones(count)])
        self.tokens += [[] for _ in range(count)]
        self.token_log_probs += [[] for _ in range(count)]

    def _keep(self, keep: Tensor, cache: Callable[[Tensor], None]) -> None:
        """Keep the rows ``keep`` of the bookkeeping; ``cache(keep)`` does it for the cache."""
        rows = keep.tolist()
        self.keys = [self.keys[r] for r in rows]
        self.tokens = [self.tokens[r] for r in rows]
        self.token_log_probs = [self.token_log_probs[r] for r in rows]
        self.ids, self.limits, self.alive = self.ids[keep], self.limits[keep], self.alive[keep]
        self.steps, self.sums = self.steps[keep], self.sums[keep]
        cache(keep)

    def step(self) -> list[Finished]:
        """One token for every row; the sentences that ended with it (EOS, or their limit)."""
        if self.decoder is None:
            return []
        with torch.no_grad(), Threads(len(self.keys), self.device):
            logits = self.decoder.step(self.ids)
            log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
            assert self.masker is not None  # made by the first add
            token = argmax(self.masker(log_probs, 0))
            token_log_prob = log_probs.gather(1, token.unsqueeze(1)).view(-1)
        self.sums += token_log_prob
        self.steps += 1
        self.ids = token
        for row, (t, p) in enumerate(zip(token.tolist(), token_log_prob.tolist(), strict=True)):
            self.tokens[row].append(t)
            self.token_log_probs[row].append(p)
        ended = token == self.eos
        done = self.alive & (ended | (self.steps >= self.limits))
        if not bool(done.any()):
            return []
        out = []
        sums, flags = self.sums.tolist(), ended.tolist()
        for row in done.nonzero().view(-1).tolist():
            key, ids, lps = self.keys[row], self.tokens[row], self.token_log_probs[row]
            out.append(Finished(key, ids, lps, sums[row], flags[row]))
            self.keys[row], self.tokens[row], self.token_log_probs[row] = None, [], []
        self.alive &= ~done
        self.live -= len(out)
        if not self.live:
            self._reset()
        elif 4 * (len(self.keys) - self.live) >= len(self.keys):
            decoder = self.decoder
            self._keep(self.alive.nonzero().view(-1), lambda rows: decoder.select(rows))
        return out

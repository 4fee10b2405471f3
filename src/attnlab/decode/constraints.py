"""Guided decoding: forced prefixes and lexical constraints, for :mod:`attnlab.decode.search`.

* A forced **prefix** is target ids an output must start with: at step ``t < len(prefix)`` every
  token but ``prefix[t]`` is set to ``-inf`` (its own log-probability is kept, so the output's
  score is still ``log P(output | input)``), and the search continues from there. That is the
  interactive-translation primitive: the translator types the start, the model completes it.
* A **constraint** is a target :class:`Phrase` that must appear in the output, its tokens
  contiguous and in order; several per sentence, in any order between them. The search is beam
  search with dynamic beam allocation (Post & Vilar 2018, "Fast Lexically Constrained Decoding
  with Dynamic Beam Allocation"; the method fairseq implements): at each step the candidates
  are the ordinary beam's best extensions plus, for every live hypothesis, its best next token
  and every token that advances one of its unmet phrases; each candidate's *bank* is how many
  constraint tokens it has produced, and the beam is filled round-robin over the banks (the best
  of each bank, highest bank first, then the second best of each, ...), so hypotheses that have
  placed more of the constraints are never crowded out by ones that have placed none. EOS is
  allowed only once every phrase is met, and a hypothesis that reaches the length limit counts
  as finished only if every phrase is met. Everything else (the length penalty, when a sentence
  stops, the KV cache) is :func:`attnlab.decode.search.beam_search`'s.

A phrase may have several tokenisations (:attr:`Phrase.alternatives`): a BPE word is one token
sequence after a space and another at the start of a sentence; the phrase is met when any of
them appears. Progress on each alternative is tracked with its Knuth-Morris-Pratt automaton, so
a partial match that fails falls back to the longest suffix that is still a prefix of the
phrase (a token sequence holding the phrase is always recognised).

Why the guarantee holds: with ``L`` the sum over phrases of their longest alternative, the best
hypothesis of the highest bank always has a candidate one bank higher (the next token of its
most advanced alternative), and round-robin keeps the highest bank's best; so within ``L``
steps after the prefix some live hypothesis has met every phrase, and it can then end. A request
with ``len(prefix) + L`` above the length limit, an empty phrase, a phrase holding EOS, pad or
BOS, or more phrases than the beam has hypotheses is refused with a :class:`GuideError` naming
the input and the phrase.

A phrase says what the output must hold, not how often: a phrase given twice (or two phrases
with a spelling in common) is met by one occurrence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import is_int

__all__ = ["UNMET", "Guide", "GuideError", "Phrase", "allocate", "as_phrase", "check_request"]

#: Why a constrained search returns nothing for an input: no beam that reached the length limit
#: held every phrase (the Translator refuses that line; the explorer answers 422).
UNMET = "no translation within the length limit holds every phrase"


class GuideError(ValueError):
    """A prefix or constraint that no output can satisfy: ``index`` is the input's row,
    ``phrase`` the phrase's text at fault (None: the prefix, or the request as a whole) and
    ``reason`` why, in one line without them."""

    def __init__(self, index: int, reason: str, phrase: str | None = None) -> None:
        where = f"phrase {phrase!r}: " if phrase is not None else ""
        super().__init__(f"input {index}: {where}{reason}")
        self.index, self.reason, self.phrase = index, reason, phrase


#: Where an alternative of a :class:`Phrase` may match: anywhere, only at the output's start
#: (a word spelled without its leading space), or anywhere but the start (spelled with it).
WHERE = ("any", "start", "inside")


@dataclass(frozen=True)
class Phrase:
    """A target phrase that an output must contain: ``alternatives`` are its token sequences
    (met when any one appears contiguously); ``where`` says, per alternative, where it may
    match (:data:`WHERE`; None: anywhere); ``text`` names it in errors."""

    alternatives: tuple[tuple[int, ...], ...]
    text: str = ""
    where: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.where is not None and (
            len(self.where) != len(self.alternatives) or not set(self.where) <= set(WHERE)
        ):
            raise ValueError(f"where: expected one of {WHERE} per alternative, got {self.where!r}")

    @property
    def longest(self) -> int:
        return max((len(a) for a in self.alternatives), default=0)


def as_phrase(value: object, name: str) -> Phrase:
    """A :class:`Phrase` from a Phrase or a list of ids (one alternative); TypeError otherwise."""
    if isinstance(value, Phrase):
        return value
    is_list = isinstance(value, Sequence) and not isinstance(value, (str, bytes))
    if is_list and all(is_int(t) for t in value):  # type: ignore[union-attr]
        return Phrase((tuple(int(t) for t in value),))  # type: ignore[union-attr]
    raise TypeError(f"{name}: expected a Phrase or a list of int ids, got {value!r}")


def check_request(
    index: int,
    prefix: Sequence[int],
    phrases: Sequence[Phrase],
    beam: int,
    limit: int,
    forbidden: set[int],
) -> None:
    """Raise :class:`GuideError` where no output of at most ``limit`` tokens can start with
    ``prefix`` and hold every phrase (``index`` names the input): a prefix or phrase holding a
    ``forbidden`` id (EOS, pad, BOS), an empty phrase, more phrases than ``beam``, or
    ``len(prefix)`` plus the phrases' longest alternatives over ``limit`` (the bound within which
    the search is sure to place them all; see the module's docstring)."""
    bad = [t for t in prefix if t in forbidden]
    if bad:
        raise GuideError(
            index,
            f"the prefix holds id {bad[0]} (EOS, pad or BOS), which an output cannot contain "
            f"before its end",
        )
    if len(phrases) > beam:
        raise GuideError(
            index,
            f"{len(phrases)} phrases, but a beam of {beam} tracks at most {beam}; raise the "
            f"beam size or give fewer phrases",
        )
    for phrase in phrases:
        name = phrase.text or str(list(phrase.alternatives[0]) if phrase.alternatives else [])
        if not any(phrase.alternatives):
            raise GuideError(index, "empty phrase", name)
        bad = [t for a in phrase.alternatives for t in a if t in forbidden]
        if bad:
            raise GuideError(
                index,
                f"holds id {bad[0]} (EOS, pad or BOS), which an output cannot contain before "
                f"its end",
                name,
            )
    need = len(prefix) + sum(p.longest for p in phrases)
    if need > limit:
        what = (
            "the prefix"
            if not phrases
            else "the phrases"
            if not prefix
            else ("the prefix and the phrases")
        )
        raise GuideError(
            index,
            f"{what} need{'s' if what == 'the prefix' else ''} up to {need} tokens, more than "
            f"the translation's limit of {limit} tokens",
        )


def _placed(phrase: Phrase) -> list[tuple[tuple[int, ...], str]]:
    """``phrase``'s alternatives with where each may match."""
    where = phrase.where or ("any",) * len(phrase.alternatives)
    return list(zip(phrase.alternatives, where, strict=True))


def _failure(seq: Sequence[int]) -> list[int]:
    """KMP failure function: ``f[i]`` is the length of the longest proper prefix of ``seq[:i]``
    that is also its suffix (``f[0] = f[1] = 0``)."""
    f = [0] * (len(seq) + 1)
    k = 0
    for i in range(1, len(seq)):
        while k and seq[i] != seq[k]:
            k = f[k]
        if seq[i] == seq[k]:
            k += 1
        f[i + 1] = k
    return f


def _transition(seq: Sequence[int], fail: list[int], state: int, token: int) -> int:
    """The KMP state after ``token`` from ``state`` (matched tokens of ``seq``)."""
    if state == len(seq):
        state = fail[state]
    while state and seq[state] != token:
        state = fail[state]
    return state + 1 if seq[state] == token else 0


class Guide:
    """Prefixes and constraints of one batch, and the constraint state of its hypotheses.

    Args:
        prefixes: per input, the ids its output starts with (``[]``: none), or None.
        constraints: per input, its phrases (:class:`Phrase` or id lists), or None.
        beam: hypotheses per input (1 for greedy search and sampling).
        limit: ``(B,)`` each input's maximum output length.
        eos_id, banned: EOS and the ids never generated (pad, BOS): neither may be in a prefix
            or a phrase.
        continuations: ``(V,)`` bool, the tokens that continue the word before them (a
            subword without a leading space); none may follow a completed phrase, so that a
            phrase ends where a word does. None: no such rule.

    Raises :class:`GuideError` (a ValueError) for a request no output can satisfy.
    """

    def __init__(
        self,
        prefixes: Sequence[Sequence[int]] | None,
        constraints: Sequence[Sequence[object]] | None,
        *,
        beam: int,
        limit: Tensor,
        eos_id: int,
        banned: Sequence[int],
        continuations: Tensor | None = None,
    ) -> None:
        batch, device = limit.shape[0], limit.device
        self.device, self.eos = device, eos_id
        self.continuations = None
        if continuations is not None:
            if continuations.dtype != torch.bool or continuations.dim() != 1:
                raise ValueError("continuations: expected a (V,) bool tensor")
            self.continuations = continuations.to(device)
        forbidden = {eos_id, *banned}
        prefix_rows = self._prefix_rows(prefixes, batch)
        phrase_rows = self._phrase_rows(constraints, batch)
        for i in range(batch):
            check_request(i, prefix_rows[i], phrase_rows[i], beam, int(limit[i]), forbidden)
        # Forced prefixes: (B, P) ids, -1 past each row's prefix.
        width = max((len(p) for p in prefix_rows), default=0)
        self.prefix = torch.full((batch, width), -1, dtype=torch.long)
        for i, p in enumerate(prefix_rows):
            self.prefix[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        self.prefix = self.prefix.to(device)
        self.prefix_width = width
        #: True when some input has constraints (the search then widens its candidates).
        self.constrained = any(phrase_rows)
        if self.constrained:
            self._build_tables(phrase_rows)

    # -- checks ---------------------------------------------------------------------------------

    @staticmethod
    def _prefix_rows(prefixes: object, batch: int) -> list[list[int]]:
        if prefixes is None:
            return [[] for _ in range(batch)]
        if not isinstance(prefixes, Sequence) or isinstance(prefixes, (str, bytes)):
            raise TypeError(f"prefixes: expected a list of id lists, got {type(prefixes).__name__}")
        if len(prefixes) != batch:
            raise ValueError(f"prefixes: {len(prefixes)} rows for {batch} inputs; one each")
        rows = []
        for i, row in enumerate(prefixes):
            if not isinstance(row, Sequence) or not all(is_int(t) for t in row):
                raise TypeError(f"prefixes[{i}]: expected a list of int ids, got {row!r}")
            rows.append([int(t) for t in row])
        return rows

    @staticmethod
    def _phrase_rows(constraints: object, batch: int) -> list[list[Phrase]]:
        if constraints is None:
            return [[] for _ in range(batch)]
        if not isinstance(constraints, Sequence) or isinstance(constraints, (str, bytes)):
            raise TypeError(
                f"constraints: expected a list (per input) of phrase lists, got "
                f"{type(constraints).__name__}"
            )
        if len(constraints) != batch:
            raise ValueError(f"constraints: {len(constraints)} rows for {batch} inputs; one each")
        rows: list[list[Phrase]] = []
        for i, row in enumerate(constraints):
            if not isinstance(row, Sequence) or isinstance(row, (str, bytes)):
                raise TypeError(f"constraints[{i}]: expected a list of phrases, got {row!r}")
            rows.append([as_phrase(p, f"constraints[{i}][{j}]") for j, p in enumerate(row)])
        return rows

    # -- tables ---------------------------------------------------------------------------------

    def _build_tables(self, rows: list[list[Phrase]]) -> None:
        """Per input: its alternatives' KMP transition tables over the input's own alphabet
        (the tokens of its phrases; every other token sends each automaton to state 0)."""
        batch = len(rows)
        # One automaton per (phrase, alternative): two phrases that share a token sequence (a
        # phrase given twice) each keep theirs, so one occurrence meets both.
        alts = [
            list({(g, a): (g, a, w) for g, p in enumerate(ph) for a, w in _placed(p) if a}.values())
            for ph in rows
        ]
        n_alt = max(len(a) for a in alts)
        n_groups = max(len(ph) for ph in rows)
        longest = max(len(a) for row in alts for _, a, _ in row)
        alphabets = [sorted({t for _, a, _ in row for t in a}) for row in alts]
        size = max(len(a) for a in alphabets)
        table = torch.zeros(batch, n_alt, longest + 1, size + 1, dtype=torch.long)
        nxt = torch.full((batch, n_alt, longest + 1), -1, dtype=torch.long)
        group = torch.full((batch, n_alt), -1, dtype=torch.long)
        length = torch.zeros(batch, n_alt, dtype=torch.long)
        where = torch.zeros(batch, n_alt, dtype=torch.long)
        failure = torch.zeros(batch, n_alt, longest + 1, dtype=torch.long)
        alphabet = torch.full((batch, size), -2, dtype=torch.long)  # -2 matches no token
        group_length = torch.zeros(batch, n_groups, dtype=torch.long)
        group_real = torch.zeros(batch, n_groups, dtype=torch.bool)
        for i, row in enumerate(alts):
            alphabet[i, : len(alphabets[i])] = torch.tensor(alphabets[i])
            for g, phrase in enumerate(rows[i]):
                group_length[i, g], group_real[i, g] = phrase.longest, True
            for v, (g, seq, place) in enumerate(row):
                group[i, v], length[i, v] = g, len(seq)
                where[i, v] = WHERE.index(place)
                nxt[i, v, : len(seq)] = torch.tensor(seq)
                fail = _failure(seq)
                failure[i, v, : len(fail)] = torch.tensor(fail)
                for state in range(len(seq) + 1):
                    for a, token in enumerate(alphabets[i]):
                        table[i, v, state, a] = _transition(seq, fail, state, token)
        d = self.device
        self.table, self.next_token = table.to(d), nxt.to(d)
        self.alt_group, self.alt_length = group.to(d), length.to(d)
        self.alt_where, self.failure = where.to(d), failure.to(d)
        self.alphabet, self.group_length = alphabet.to(d), group_length.to(d)
        self.group_real = group_real.to(d)
        self.n_alt, self.n_groups = n_alt, n_groups

    # -- state ------------------------------------------------------------------------------------

    def start(self, beam: int) -> None:
        """The state of every input's ``beam`` first hypotheses: nothing matched; the padding
        groups (inputs with fewer phrases) count as met."""
        if not self.constrained:
            return
        batch = self.table.shape[0]
        self.kmp = torch.zeros(batch, beam, self.n_alt, dtype=torch.long, device=self.device)
        met = ~self.group_real
        self.met = met[:, None, :].expand(batch, beam, self.n_groups).clone()
        #: (n, K): the hypothesis's last token completed a phrase (a word must end there).
        self.just = torch.zeros(batch, beam, dtype=torch.bool, device=self.device)

    def keep(self, index: Tensor) -> None:
        """Keep the state of the inputs ``index`` (sentences leaving the search)."""
        if self.constrained:
            self.kmp, self.met, self.just = self.kmp[index], self.met[index], self.just[index]

    def mask(self, scores: Tensor, step: int, inputs: Tensor, beam: int = 1) -> Tensor:
        """In place on ``scores`` ``(N, V)`` (rows ``inputs.repeat_interleave(beam)``): the
        forced prefix token at ``step``, and no EOS for a hypothesis with an unmet phrase."""
        if step < self.prefix_width:
            rows = inputs.repeat_interleave(beam) if beam > 1 else inputs
            token = self.prefix[rows, step]
            forced = (token >= 0).nonzero().squeeze(1)
            if forced.numel():
                keep = scores[forced, token[forced]]
                scores[forced] = -math.inf
                scores[forced, token[forced]] = keep
        if self.constrained:
            unmet = ~self.met.all(dim=2).view(-1)
            scores[:, self.eos].masked_fill_(unmet, -math.inf)
            if self.continuations is not None:
                ended = self.just.view(-1).nonzero().squeeze(1)
                if ended.numel():
                    rows = scores[ended]
                    rows[:, self.continuations] = -math.inf
                    scores[ended] = rows
        return scores

    def extra_candidates(self, inputs: Tensor, scores: Tensor, step: int) -> Tensor:
        """Flat indices ``origin * V + token`` ``(n, E)`` of the candidates DBA adds to the
        beam's best: each hypothesis's best token, and the next token of each of its unmet
        alternatives (-1 where there is none). ``scores`` ``(n, K, V)``."""
        n, k, vocab = scores.shape
        origin = torch.arange(k, device=scores.device)
        best = scores.argmax(dim=2) + origin * vocab  # (n, K)
        nxt = self.next_token[inputs]  # (n, A, L+1)
        state = self.kmp.clamp(max=nxt.shape[2] - 1)  # (n, K, A)
        token = nxt[:, None].expand(n, k, *nxt.shape[1:]).gather(3, state[..., None])[..., 0]
        group = self.alt_group[inputs][:, None].expand(n, k, self.n_alt)
        met = self.met.gather(2, group.clamp(min=0))
        where = self.alt_where[inputs][:, None, :]
        misplaced = ((where == 1) & (self.kmp != step)) | ((where == 2) & (step == 0))
        token = token.masked_fill(met | (group < 0) | misplaced, -1)
        advance = torch.where(token >= 0, token + origin[None, :, None] * vocab, -1)
        return torch.cat([best, advance.view(n, k * self.n_alt)], dim=1)

    def advance(
        self, inputs: Tensor, origin: Tensor, token: Tensor, length: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The state of each candidate ``(origin, token)`` ``(n, C)`` of an output now
        ``length`` tokens long: ``(kmp (n, C, A), met (n, C, G), just (n, C))``, ``just`` where
        this token completed a phrase."""
        n, c = token.shape
        kmp = self.kmp.gather(1, origin[..., None].expand(n, c, self.n_alt))
        met = self.met.gather(1, origin[..., None].expand(n, c, self.n_groups))
        alphabet = self.alphabet[inputs]  # (n, S)
        hit = token[..., None] == alphabet[:, None, :]  # (n, C, S)
        size = alphabet.shape[1]
        letter = torch.where(hit.any(2), hit.to(torch.int8).argmax(2), size)  # (n, C)
        table = self.table[inputs]  # (n, A, L+1, S+1)
        width = table.shape[2] * table.shape[3]
        flat = (
            torch.arange(self.n_alt, device=token.device)[None, None, :] * width
            + kmp * table.shape[3]
            + letter[..., None]
        )  # (n, C, A)
        kmp = table.reshape(n, -1).gather(1, flat.view(n, -1)).view(n, c, self.n_alt)
        # A match that began at the output's start: void for an "inside" alternative (fall
        # back to its longest border, which begins later), the only valid one for a "start"
        # alternative.
        where = self.alt_where[inputs][:, None, :]
        from_start = kmp == length
        border = self.failure[inputs][:, None].expand(n, c, -1, -1)
        border = border.gather(3, kmp[..., None].clamp(max=border.shape[3] - 1))[..., 0]
        kmp = torch.where((where == 2) & from_start, border, kmp)
        kmp = kmp.masked_fill((where == 1) & ~from_start, 0)
        size = self.alt_length[inputs][:, None, :]
        done = (kmp == size) & (size > 0)
        before = met
        group = self.alt_group[inputs].clamp(min=0)[:, None, :].expand(n, c, self.n_alt)
        met = met.to(torch.uint8).scatter_reduce(2, group, done.to(torch.uint8), reduce="amax")
        met = met.bool()
        alt_met = met.gather(2, group) | (self.alt_group[inputs] < 0)[:, None, :]
        kmp = kmp.masked_fill(alt_met, 0)
        just = (met & ~before).any(dim=2)
        return kmp, met, just

    def bank(self, inputs: Tensor, kmp: Tensor, met: Tensor) -> Tensor:
        """Constraint tokens a state has produced: the longest alternative of each met phrase,
        plus the most advanced partial match."""
        group_length = self.group_length[inputs][:, None, :]
        real = self.group_real[inputs][:, None, :]
        return (group_length * (met & real)).sum(2) + kmp.amax(2)

    def all_met(self, met: Tensor) -> Tensor:
        return met.all(dim=-1)

    def update(self, kmp: Tensor, met: Tensor, just: Tensor, pick: Tensor) -> None:
        """The live hypotheses' state: candidates ``pick`` ``(n, K)`` of :meth:`advance`'s."""
        n, k = pick.shape
        self.kmp = kmp.gather(1, pick[..., None].expand(n, k, self.n_alt))
        self.met = met.gather(1, pick[..., None].expand(n, k, self.n_groups))
        self.just = just.gather(1, pick)


def allocate(scores: Tensor, bank: Tensor, k: int) -> Tensor:
    """Dynamic beam allocation: ``k`` candidate indices per row ``(n, k)`` out of ``scores``
    ``(n, C)`` (``-inf``: not a candidate) in banks ``bank`` ``(n, C)``, round-robin: the best of
    every bank (highest bank first), then the second best of every bank, and so on."""
    valid = torch.isfinite(scores)
    # Rank within the bank: candidates of the same bank with a higher score (or an equal one
    # earlier in the list).
    same = (bank[:, :, None] == bank[:, None, :]) & valid[:, None, :]
    c = scores.shape[1]
    earlier = torch.ones(c, c, dtype=torch.bool, device=scores.device).tril(-1)
    better = (scores[:, None, :] > scores[:, :, None]) | (
        (scores[:, None, :] == scores[:, :, None]) & earlier[None]
    )
    rank = (same & better).sum(2)
    top = int(bank.max()) + 1 if bank.numel() else 1
    key = rank * (top + 1) + (top - bank)
    key = key.masked_fill(~valid, torch.iinfo(torch.long).max)
    return key.topk(min(k, c), dim=1, largest=False).indices

"""Decoding with several models at once: an :class:`Ensemble`, and the scoring interface the
searches of :mod:`attnlab.decode.search` run over.

A search asks a *session* for the log-probabilities of the next token of every row, and tells
it which rows live on (:class:`attnlab.decode.session.Session` for one model). An ensemble's
session holds one such session per model, each with its own KV cache (or fast decoder step),
feeds every one the same ids, and scores the next token with the log of the mean of the
models' probabilities::

    log p(y | x) = log (1/N) sum_m p_m(y | x) = logsumexp_m(log p_m(y | x)) - log N

(fairseq's EnsembleModel averages the same way, in probability space, not in log space). So
greedy search, beam search, sampling, n-best lists, prefixes and constraints all decode an
ensemble unchanged, and the scores they report are the ensemble's. The mean is taken in
float64: for N copies of one model it returns that model's float32 log-probabilities exactly
(``log(N p) - log N`` rounds back to ``log p``), so the copies decode what the model decodes.
An ensemble of one model is that model's session itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..models.config import TransformerConfig
from ..models.transformer import Transformer, TransformerLM
from .session import Session

__all__ = ["Ensemble", "EnsembleSession", "open_session"]


class Ensemble(nn.Module):
    """Models that decode together: the mean of their next-token probabilities at every step.

    Args:
        models: Transformers (encoder-decoders), or TransformerLMs, of the same target
            vocabulary: the same ``vocab_size`` and the same ``pad_id``, ``bos_id`` and
            ``eos_id``. Their shapes, depths and positional kinds may differ. A ValueError
            names the first model that differs from ``models[0]`` and how.

    ``config`` is the first model's (the searches read its special ids); the output limit of a
    row is the smallest any member allows (learned positions end at each one's ``max_len``).
    """

    def __init__(self, models: Sequence[Transformer | TransformerLM]) -> None:
        super().__init__()
        if isinstance(models, nn.Module) or not isinstance(models, Sequence) or not models:
            raise TypeError("models: expected a non-empty list of attnlab models")
        first = models[0]
        for i, model in enumerate(models):
            if not isinstance(model, (Transformer, TransformerLM)):
                raise TypeError(
                    f"models[{i}]: expected an attnlab Transformer or TransformerLM, got "
                    f"{type(model).__name__}"
                )
            why = incompatible(first, model)
            if why:
                raise ValueError(
                    f"models[{i}]: {why} in models[0]; the models of an ensemble share their "
                    f"target vocabulary and special ids"
                )
        self.models = nn.ModuleList(models)

    @property
    def members(self) -> list[Transformer | TransformerLM]:
        """The models, in order."""
        return list(self.models)  # type: ignore[arg-type]

    @property
    def config(self) -> TransformerConfig:
        """The first model's config (the special ids every member shares)."""
        return self.members[0].config

    def __len__(self) -> int:
        return len(self.models)

    def forward(self, *args: object, **kwargs: object) -> Tensor:  # pragma: no cover
        raise TypeError("Ensemble: decode it with attnlab.decode.search (it has no forward)")


def incompatible(first: Transformer | TransformerLM, other: Transformer | TransformerLM) -> str:
    """Why ``other`` cannot decode together with ``first`` (one line), or ``""``."""
    if isinstance(first, Transformer) != isinstance(other, Transformer):
        kinds = (type(first).__name__, type(other).__name__)
        return f"a {kinds[1]}, against a {kinds[0]}"
    a, b = first.config, other.config
    size_a, size_b = vocabulary(first), vocabulary(other)
    if size_a != size_b:
        return f"a target vocabulary of {size_b:,} tokens, against {size_a:,}"
    for name in ("pad_id", "bos_id", "eos_id"):
        if getattr(a, name) != getattr(b, name):
            return f"{name} {getattr(b, name)}, against {getattr(a, name)}"
    return ""


def vocabulary(model: Transformer | TransformerLM) -> int:
    """The size of ``model``'s output vocabulary (its output projection's rows)."""
    return int(model.lm_head.weight.shape[0])


class EnsembleSession:
    """The session of an :class:`Ensemble`: one :class:`~attnlab.decode.session.Session` per
    model, each with its own cache, stepped together; the same interface as a Session (what
    the searches call: ``start``, ``config``, ``vocab_size``, ``max_new_tokens``, ``begin``,
    ``step``, ``select``, ``banned``)."""

    def __init__(self, ensemble: Ensemble, inputs: object, fast: bool, quantize: str | None):
        self.sessions = [Session(m, inputs, fast, quantize) for m in ensemble.members]
        first = self.sessions[0]
        self.model = ensemble
        self.config = first.config
        self.start, self.input_lengths = first.start, first.input_lengths
        self.prompt_length = first.prompt_length
        self.vocab_size = first.vocab_size
        self.log_n = math.log(len(self.sessions))
        #: Why each member decodes on the reference path, "" where all take the fast one.
        self.why_not_fast_path = "; ".join(
            f"models[{i}]: {s.why_not_fast_path}"
            for i, s in enumerate(self.sessions)
            if s.why_not_fast_path
        )

    def max_new_tokens(self, requested: int | None) -> Tensor:
        """Each input's maximum output length ``(B,)``: the smallest any member allows."""
        limits = [s.max_new_tokens(requested) for s in self.sessions]
        return torch.stack(limits).amin(dim=0)

    def begin(self, rows_per_input: int, capacity: int) -> Tensor:
        """Every member's cache built (``rows_per_input`` rows per input); the first ids
        ``(B rows_per_input, P)``, the same for every member."""
        firsts = [s.begin(rows_per_input, capacity) for s in self.sessions]
        return firsts[0]

    def step(self, ids: Tensor) -> Tensor:
        """The ensemble's float32 next-token log-probabilities ``(N, V)``: the log of the mean
        of the members' probabilities, computed in float64."""
        each = torch.stack([s.step(ids) for s in self.sessions]).double()
        return (torch.logsumexp(each, dim=0) - self.log_n).float()

    def select(self, rows: Tensor, *, cross: bool = True) -> None:
        """Keep the cache rows ``rows`` ``(N',)`` of every member."""
        for s in self.sessions:
            s.select(rows, cross=cross)

    def banned(self) -> list[int]:
        return self.sessions[0].banned()


def open_session(
    model: Transformer | TransformerLM | Ensemble,
    inputs: object,
    fast: bool = True,
    quantize: str | None = None,
) -> Session | EnsembleSession:
    """The session a search decodes ``inputs`` with: a model's own, or an ensemble's (one
    member: that member's own session, so it decodes exactly as the model alone)."""
    if isinstance(model, Ensemble):
        if len(model) == 1:
            return Session(model.members[0], inputs, fast, quantize)
        return EnsembleSession(model, inputs, fast, quantize)
    return Session(model, inputs, fast, quantize)

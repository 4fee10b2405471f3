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
  batched over sentences and beams; a sentence stops when every beam has finished.
* :func:`sample`: ancestral sampling with temperature, top-k and top-p (nucleus, Holtzman et
  al. 2020) filtering.

Conventions: outputs never contain ``pad_id`` or ``bos_id`` (they are not generated); a row
ends with ``eos_id`` or when it reaches its maximum length; a batch decodes exactly as its rows
one at a time (padding is moved out of the way, each row has its own maximum length, rows that
finish leave the batch). The model runs in eval mode (every module's mode is restored
afterwards) without gradients.

Speed: an encoder-decoder :class:`attnlab.Transformer` decodes on the lean step of
:mod:`attnlab.fastdecode` (packed weights, one key/value store, beam search without reordering
the cache), tested equal to the reference (``model.decode`` with its cache), which
``fast=False`` forces and which serves every other model (``why_not_fast_path`` says why).
Fewer than :data:`SINGLE_THREAD_ROWS` rows per step decode on one CPU thread.
``quantize="int8"`` trades exactness for speed: int8 weights, and activations quantized with
one scale per call over the batch, so an int8 output can depend on the batch it is in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_positive_int, check_positive_number
from .fastdecode import FastDecoder, check_quantize, why_not_fast_path
from .layers import DecoderCache
from .model import Transformer, TransformerLM

__all__ = ["Generation", "beam_search", "greedy_search", "length_penalty", "sample"]

#: Output length allowance over the source length (Vaswani et al. 2017, sec. 6.1).
EXTRA_LENGTH = 50
#: Default maximum of new tokens for a language model.
LM_MAX_NEW_TOKENS = 50


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
    """

    sequences: Tensor
    lengths: Tensor
    log_probs: Tensor
    scores: Tensor
    finished: Tensor
    eos_id: int

    def tolist(self, *, keep_eos: bool = False) -> list[list[int]]:
        """The generated ids of each row as lists, without padding (and without EOS unless
        ``keep_eos``)."""
        rows = []
        for seq, length, done in zip(self.sequences, self.lengths, self.finished, strict=True):
            n = int(length) - (1 if bool(done) and not keep_eos else 0)
            rows.append(seq[:n].tolist())
        return rows


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """Wu et al. (2016), eq. 14: ``((5 + length) / 6) ** alpha``."""
    return ((5.0 + length) / 6.0) ** alpha


# -- argument checks ---------------------------------------------------------------------------


def _check_optional_count(value: object, name: str, minimum: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name}: expected {what} or None, got {value!r}")


def _check_lengths(max_new_tokens: object, min_new_tokens: object) -> None:
    _check_optional_count(max_new_tokens, "max_new_tokens", 1)
    if (
        not isinstance(min_new_tokens, int)
        or isinstance(min_new_tokens, bool)
        or min_new_tokens < 0
    ):
        raise ValueError(f"min_new_tokens: expected an int >= 0, got {min_new_tokens!r}")
    if isinstance(max_new_tokens, int) and min_new_tokens > max_new_tokens:
        raise ValueError(
            f"min_new_tokens: {min_new_tokens} exceeds max_new_tokens={max_new_tokens}"
        )


def _as_ids(inputs: object, name: str, pad_id: int, device: torch.device) -> Tensor:
    """A ``(B, T)`` int64 tensor from a tensor or a list of id lists (right-padded)."""
    if isinstance(inputs, Tensor):
        if inputs.dim() == 1:
            raise ValueError(
                f"{name}: expected a (B, T) batch, got shape {tuple(inputs.shape)}; use "
                f"ids[None] for one sequence"
            )
        if inputs.dim() != 2:
            raise ValueError(f"{name}: expected shape (B, T), got {tuple(inputs.shape)}")
        if inputs.dtype.is_floating_point or inputs.dtype.is_complex or inputs.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer dtype, got {inputs.dtype}")
        ids = inputs.to(device=device, dtype=torch.long)
    elif isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        rows = [list(row) for row in inputs] if inputs else []
        if not rows:
            raise ValueError(f"{name}: empty batch")
        for i, row in enumerate(rows):
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in row):
                raise TypeError(f"{name}: row {i} holds something other than int ids")
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), max(width, 1)), pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        ids = ids.to(device)
    else:
        raise TypeError(
            f"{name}: expected a (B, T) integer tensor or a list of id lists, got "
            f"{type(inputs).__name__}"
        )
    if ids.numel() == 0:
        raise ValueError(f"{name}: empty batch or sequence, shape {tuple(ids.shape)}")
    empty = (ids == pad_id).all(dim=1)
    if bool(empty.any()):
        first = int(empty.nonzero()[0])
        raise ValueError(f"{name}: row {first} is empty (only pad_id={pad_id})")
    return ids


# -- the decoding session: one model, its cache, one step at a time ----------------------------


class _Session:
    """Incremental decoding of one batch: :meth:`step` feeds ids, returns next-token logits.

    For a Transformer the first ids are BOS; for a language model, the prompt (left-padded,
    its positions counting real tokens only, so each row decodes as it would alone).
    """

    def __init__(
        self,
        model: Transformer | TransformerLM,
        inputs: object,
        fast: bool = True,
        quantize: str | None = None,
    ) -> None:
        if not isinstance(model, (Transformer, TransformerLM)):
            raise TypeError(
                f"model: expected an attnlab Transformer or TransformerLM, got "
                f"{type(model).__name__}"
            )
        if not isinstance(fast, bool):
            raise TypeError(f"fast: expected a bool, got {fast!r}")
        check_quantize(quantize)
        #: Why this batch decodes on the reference path ("" when it takes the fast one).
        self.why_not_fast_path = why_not_fast_path(model, quantize) if fast else "fast=False"
        if quantize is not None and self.why_not_fast_path:
            raise ValueError(
                f"quantize={quantize!r} runs on the fast decoder step only, which this model "
                f"cannot take: {self.why_not_fast_path}"
            )
        self.quantize = quantize
        self.fast: FastDecoder | None = None
        self.model = model
        config = model.config
        self.config = config
        device = next(model.parameters()).device
        pad = config.pad_id
        if isinstance(model, Transformer):
            self.source = _pack(_as_ids(inputs, "src_ids", pad, device), pad, real_first=True)
            self.input_lengths = (self.source != pad).sum(dim=1)
            self.start = torch.full((self.source.shape[0], 1), config.bos_id, device=device)
            self.prompt_length = 1
            self.position_limit = config.max_len if config.positional == "learned" else None
        else:
            ids = _as_ids(inputs, "ids", pad, device)
            self.input_lengths = (ids != pad).sum(dim=1)
            self.start = _pack(ids, pad, real_first=False)
            self.prompt_length = self.start.shape[1]
            limit = config.max_len if config.positional == "learned" else None
            if limit is not None and int(self.input_lengths.max()) > limit:
                raise ValueError(
                    f"ids: a prompt of {int(self.input_lengths.max())} tokens exceeds the "
                    f"model's max_len={limit} (learned positions)"
                )
            self.position_limit = limit
        self.vocab_size = model.lm_head.out_features
        self.cache: DecoderCache | None = None

    def max_new_tokens(self, requested: int | None) -> Tensor:
        """Each row's maximum output length ``(B,)``: ``requested``, or for a Transformer the
        source length + 50 (for a language model 50); capped where learned positions end."""
        if requested is not None:
            limit = torch.full_like(self.input_lengths, requested)
        elif isinstance(self.model, Transformer):
            limit = self.input_lengths + EXTRA_LENGTH
        else:
            limit = torch.full_like(self.input_lengths, LM_MAX_NEW_TOKENS)
        if self.position_limit is not None:
            # Token n is predicted from the input at position n - 1 (after BOS at 0), or at
            # P + n - 2 after a prompt of P tokens: keep that below max_len.
            if isinstance(self.model, Transformer):
                room = torch.full_like(limit, self.position_limit)
            else:
                room = self.position_limit - self.input_lengths + 1
            limit = torch.minimum(limit, room)
        return limit

    def begin(self, rows_per_input: int, capacity: int) -> Tensor:
        """Build the cache (``rows_per_input`` rows per input: beams); return the first ids."""
        model = self.model
        expand = torch.arange(self.start.shape[0], device=self.start.device)
        expand = expand.repeat_interleave(rows_per_input)
        if isinstance(model, Transformer):
            memory = model.encode(self.source)
            mask = model.source_mask(self.source)
            if not self.why_not_fast_path:
                self.fast = FastDecoder(
                    model,
                    memory,
                    mask,
                    beam=rows_per_input,
                    capacity=capacity,
                    quantize=self.quantize,
                )
                return self.start[expand]
            self.cache = model.new_cache(memory, mask, capacity=capacity)
            if rows_per_input > 1:
                self.cache.select(expand)
        else:
            self.cache = model.new_cache(capacity=capacity + self.prompt_length)
        return self.start[expand]

    def step(self, ids: Tensor) -> Tensor:
        """Feed ``ids`` ``(N, T)``; the float32 log-probabilities of the next token ``(N, V)``."""
        if self.fast is not None:
            return torch.log_softmax(self.fast.step(ids.view(-1)), dim=-1, dtype=torch.float32)
        if isinstance(self.model, Transformer):
            logits = self.model.decode(ids, cache=self.cache)
        else:
            logits = self.model(ids, cache=self.cache)
        return F.log_softmax(logits[:, -1].float(), dim=-1)

    def select(self, rows: Tensor, *, cross: bool = True) -> None:
        """Keep the cache rows ``rows`` (see :meth:`attnlab.layers.DecoderCache.select`)."""
        if self.fast is not None:
            self.fast.select(rows, cross=cross)
        elif self.cache is not None:
            self.cache.select(rows, cross=cross)
        else:
            raise RuntimeError("select() before begin(): the session has no cache yet")

    def banned(self) -> list[int]:
        """Ids never generated: pad and BOS (unless one of them is EOS)."""
        c = self.config
        return sorted({c.pad_id, c.bos_id} - {c.eos_id})


def _pack(ids: Tensor, pad_id: int, *, real_first: bool) -> Tensor:
    """Move each row's real tokens together, in their order: to the front (right padding: a
    source then encodes as it would alone) or to the end (left padding: prompts then end
    together, where decoding continues)."""
    real = ids != pad_id
    key = real if not real_first else ~real
    # A stable sort on "is pad" (or "is real") keeps the real tokens' order.
    order = torch.sort(key.to(torch.int8), dim=1, stable=True).indices
    return ids.gather(1, order)


#: Below this many rows per step (sentences x beams) decoding runs on one CPU thread: its
#: matrix products are too small to share, and waking a second thread for each of a step's
#: ~100 ops costs more than it saves (the issue's batch-1 greedy at 2 threads ran at half its
#: 1-thread speed; measured again in benchmarks/decode.py).
SINGLE_THREAD_ROWS = 8


class _Threads:
    """Run with one intra-op thread when a step's work is that small (CPU only); restore the
    caller's setting afterwards. torch's thread count is global to the process."""

    def __init__(self, rows: int, device: torch.device) -> None:
        self.single = device.type == "cpu" and rows < SINGLE_THREAD_ROWS
        self.before = 1

    def __enter__(self) -> None:
        self.before = torch.get_num_threads()
        if self.single and self.before > 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if torch.get_num_threads() != self.before:
            torch.set_num_threads(self.before)


class _EvalMode:
    """Run with the model in eval mode and without autograd; restore every module's mode."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.modes = [(m, m.training) for m in model.modules()]
        self.model = model
        self.grad = torch.no_grad()

    def __enter__(self) -> None:
        self.model.eval()
        self.grad.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.grad.__exit__(*exc)
        for module, training in self.modes:
            module.training = training


class _Masker:
    """Sets the log-probabilities of ids that must not come next to -inf, in place: pad and BOS
    always, EOS before ``min_new_tokens``."""

    def __init__(self, session: _Session, min_new_tokens: int) -> None:
        device = session.start.device
        banned = session.banned()
        self.banned = torch.tensor(banned, dtype=torch.long, device=device)
        eos = session.config.eos_id
        self.early = torch.tensor(sorted({*banned, eos}), dtype=torch.long, device=device)
        self.min_new_tokens = min_new_tokens

    def __call__(self, log_probs: Tensor, step: int) -> Tensor:
        banned = self.early if step < self.min_new_tokens else self.banned
        if banned.numel():
            log_probs.index_fill_(1, banned, -math.inf)
        return log_probs


# -- greedy and sampling: one hypothesis per row -----------------------------------------------


def _decode_rows(
    model: Transformer | TransformerLM,
    inputs: object,
    choose: Callable[[Tensor], Tensor],
    max_new_tokens: int | None,
    min_new_tokens: int,
    fast: bool,
    quantize: str | None,
) -> Generation:
    """One token per row per step, chosen by ``choose(log_probs (N, V)) -> ids (N,)``; rows
    that finish leave the batch (and the cache)."""
    _check_lengths(max_new_tokens, min_new_tokens)
    session = _Session(model, inputs, fast, quantize)
    eos = session.config.eos_id
    with _EvalMode(model), _Threads(session.start.shape[0], session.start.device):
        limit = session.max_new_tokens(max_new_tokens)
        batch, width = limit.shape[0], int(limit.max())
        device = limit.device
        log_probs = torch.zeros(batch, device=device)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        rows = torch.arange(batch, device=device)  # the inputs still decoding
        row_limit, row_log_probs = limit, log_probs.clone()  # of those rows
        chosen: list[tuple[Tensor, Tensor]] = []  # (rows, tokens) of each step
        ids = session.begin(1, width)
        mask = _Masker(session, min_new_tokens)
        limit_steps = set(limit.tolist())  # where some row reaches its maximum length
        for step in range(width):
            scores = mask(session.step(ids), step)
            token = choose(scores)
            row_log_probs += scores.gather(1, token.unsqueeze(1)).view(-1)
            chosen.append((rows, token))
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
        sequences = torch.full((batch, int(lengths.max())), session.config.pad_id, device=device)
        for step, (where, token) in enumerate(chosen):
            sequences[where, step] = token
    return Generation(
        sequences=sequences,
        lengths=lengths,
        log_probs=log_probs,
        scores=log_probs.clone(),
        finished=finished,
        eos_id=eos,
    )


def greedy_search(
    model: Transformer | TransformerLM,
    inputs: Tensor | Sequence[Sequence[int]],
    *,
    max_new_tokens: int | None = None,
    min_new_tokens: int = 0,
    fast: bool = True,
    quantize: str | None = None,
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
        fast: decode with the lean step of :mod:`attnlab.fastdecode` when the model allows it
            (:func:`attnlab.fastdecode.why_not_fast_path`); False forces the readable
            reference (``model.decode`` with its cache). Both compute the same numbers.
        quantize: ``"int8"`` runs the decoder's linear maps and the output projection with int8
            weights (fast path only; see :mod:`attnlab.fastdecode`); None keeps the model's
            dtype. Int8 activations are quantized over the whole batch: a sentence's int8
            output may differ with the batch around it.

    Returns: a :class:`Generation`; ``scores`` are the log-probabilities.
    """
    return _decode_rows(
        model,
        inputs,
        _argmax,
        max_new_tokens,
        min_new_tokens,
        fast,
        quantize,
    )


def _argmax(scores: Tensor) -> Tensor:
    """``scores.argmax(dim=-1)`` of ``(N, V)`` scores, the same indices (the first maximum; NaN
    counts as the maximum), faster for many rows: torch's CPU argmax over a long last dimension
    is not vectorised (about 250 us for 32 x 8,000 on one core), its ``amax`` is. The maxima of
    chunks of a row pick the first chunk holding the row's maximum, then the maximum within it.
    """
    rows, vocab = scores.shape
    chunk = _ARGMAX_CHUNKS.get(vocab)
    if chunk is None:
        chunk = _ARGMAX_CHUNKS[vocab] = next((c for c in range(128, 15, -1) if vocab % c == 0), 0)
    if rows < 8 or not chunk or scores.device.type != "cpu" or not scores.is_contiguous():
        return scores.argmax(dim=-1)
    chunks = scores.view(rows, vocab // chunk, chunk)
    best = chunks.amax(dim=-1).argmax(dim=-1)  # (N,): the first chunk with the maximum
    within = chunks[torch.arange(rows, device=scores.device), best].argmax(dim=-1)
    return best * chunk + within


_ARGMAX_CHUNKS: dict[int, int] = {}


def sample(
    model: Transformer | TransformerLM,
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
        fast, quantize: as :func:`greedy_search`.

    Returns: a :class:`Generation`; ``log_probs`` and ``scores`` are the model's own
    log-probabilities of the drawn tokens (temperature 1, unfiltered).
    """
    temperature = check_positive_number(temperature, "temperature")
    _check_optional_count(top_k, "top_k", 1)
    if top_p is not None and not (
        isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and 0 < top_p <= 1
    ):
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

    return _decode_rows(model, inputs, choose, max_new_tokens, min_new_tokens, fast, quantize)


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
    model: Transformer | TransformerLM,
    inputs: Tensor | Sequence[Sequence[int]],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
    min_new_tokens: int = 0,
    fast: bool = True,
    quantize: str | None = None,
    n_best: int = 1,
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
    search, and a beam wider than the number of possible outputs searches them all. Sentences that stop leave the batch.

    Args: as :func:`greedy_search`, and
        beam_size: hypotheses per sentence (4 in the paper; 1 is greedy search).
        alpha: the length penalty's exponent (0.6 in the paper; 0: plain log-probability).
        fast, quantize: as :func:`greedy_search`. On the fast path the beams of a sentence
            share its memory's keys and values, and the self-attention cache is never
            reordered (see :class:`attnlab.fastdecode.FastDecoder`).
        n_best: finished hypotheses to return per sentence, 1 to ``beam_size``.

    Returns: a :class:`Generation` with the best finished hypothesis of each sentence;
    ``scores`` are ``log_probs / lp(lengths)``. With ``n_best = n`` it has ``B n`` rows, the
    ``n`` best of sentence ``i`` at rows ``i n`` to ``i n + n - 1``, best first; a sentence
    that finished fewer (a short maximum length) has rows of score ``-inf`` and length 0.
    """
    check_positive_int(beam_size, "beam_size")
    check_positive_int(n_best, "n_best")
    if n_best > beam_size:
        raise ValueError(f"n_best: expected at most beam_size ({beam_size}), got {n_best}")
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool)) or not (
        math.isfinite(alpha) and alpha >= 0
    ):
        raise ValueError(f"alpha: expected a finite number >= 0, got {alpha!r}")
    _check_lengths(max_new_tokens, min_new_tokens)
    session = _Session(model, inputs, fast, quantize)
    rows = session.start.shape[0] * beam_size
    with _EvalMode(model), _Threads(rows, session.start.device):
        limit = session.max_new_tokens(max_new_tokens)
        search = _BeamSearch(session, limit, beam_size, float(alpha), min_new_tokens)
        return search.run(n_best)


class _BeamSearch:
    """The state of a batched beam search; see :func:`beam_search`."""

    def __init__(
        self, session: _Session, limit: Tensor, beam: int, alpha: float, min_new_tokens: int
    ) -> None:
        self.session, self.limit, self.beam, self.alpha = session, limit, beam, alpha
        self.min_new_tokens = min_new_tokens
        self.eos = session.config.eos_id
        batch, self.width = limit.shape[0], int(limit.max())
        device = self.device = limit.device
        # Finished hypotheses of every sentence, best first: (B, K) scores, (B, K, width) ids.
        self.done_scores = torch.full((batch, beam), -math.inf, device=device)
        self.done_log_probs = torch.zeros(batch, beam, device=device)
        self.done_lengths = torch.zeros(batch, beam, dtype=torch.long, device=device)
        self.done_ids = torch.full((batch, beam, self.width), session.config.pad_id, device=device)
        self.done_eos = torch.zeros(batch, beam, dtype=torch.bool, device=device)

    def run(self, n_best: int = 1) -> Generation:
        session, k, eos = self.session, self.beam, self.eos
        batch, device = self.limit.shape[0], self.device
        sentences = torch.arange(batch, device=device)  # the sentences still searching
        # Live hypotheses: log P (n, K), ids so far (n, K, t). Only beam 0 is live at first.
        live = torch.full((batch, k), -math.inf, device=device)
        live[:, 0] = 0.0
        history = torch.zeros(batch, k, 0, dtype=torch.long, device=device)
        ids = session.begin(k, self.width)
        mask = _Masker(session, self.min_new_tokens)
        vocab = session.vocab_size
        rank = torch.arange(min(2 * k, k * vocab), device=device)[None, :]
        for step in range(self.width):
            n = sentences.shape[0]
            scores = mask(session.step(ids), step)  # (n K, V)
            total = (live.view(n * k, 1) + scores).view(n, k * vocab)
            top, index = total.topk(min(2 * k, k * vocab), dim=1)  # (n, 2K), best first
            origin, token = index // vocab, index % vocab
            length = step + 1
            last = length >= self.limit[sentences]  # (n,): this step ends these sentences
            ended = ((token == eos) & (rank < k)) | last[:, None]  # EOS counts in the top K
            ended &= torch.isfinite(top)
            extended = torch.cat([history.gather(1, _expand(origin, history)), token[..., None]], 2)
            self._finish(sentences, top, extended, ended, token == eos, length)

            # The best K extensions that did not end live on (EOS past rank K is dropped).
            live_top = top.masked_fill(ended | (token == eos), -math.inf)
            live, pick = live_top.topk(k, dim=1)  # (n, K)
            origin = origin.gather(1, pick)
            history = extended.gather(1, _expand(pick, extended))
            token = token.gather(1, pick)

            stop = last | self._settled(sentences, live, n_best)
            if bool(stop.all()):
                break
            keep = (~stop).nonzero().squeeze(1)
            rows = (keep[:, None] * k + origin[keep]).reshape(-1)  # cache rows to continue
            pruned = keep.shape[0] < n
            session.select(rows, cross=pruned)
            if pruned:
                sentences, live, history, token = (
                    sentences[keep],
                    live[keep],
                    history[keep],
                    token[keep],
                )
            ids = token.reshape(-1, 1)
        return self._result(n_best)

    def _finish(
        self,
        sentences: Tensor,
        log_probs: Tensor,
        ids: Tensor,
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
        all_scores = torch.cat([self.done_scores[sentences], scores], dim=1)
        best, pick = all_scores.topk(self.beam, dim=1)
        merged = {
            "done_log_probs": (self.done_log_probs[sentences], log_probs),
            "done_lengths": (
                self.done_lengths[sentences],
                torch.full_like(with_eos, length, dtype=torch.long),
            ),
            "done_ids": (self.done_ids[sentences], padded),
            "done_eos": (self.done_eos[sentences], with_eos),
        }
        self.done_scores[sentences] = best
        for name, (old, new) in merged.items():
            both = torch.cat([old, new], dim=1)
            getattr(self, name)[sentences] = both.gather(1, _expand(pick, both))

    def _settled(self, sentences: Tensor, live: Tensor, n_best: int) -> Tensor:
        """``(n,)`` True where no live hypothesis can beat the ``n_best``-th finished one (its
        best reachable score is ``log P / lp(maximum length)``), or none is left alive."""
        bound = live[:, 0] / length_penalty(self.limit[sentences], self.alpha)
        return (self.done_scores[sentences, n_best - 1] >= bound) | torch.isneginf(live[:, 0])

    def _result(self, n_best: int = 1) -> Generation:
        """The ``n_best`` best finished hypotheses of each sentence, as rows."""
        lengths = self.done_lengths[:, :n_best].reshape(-1)
        ids = self.done_ids[:, :n_best].reshape(-1, self.width)
        return Generation(
            sequences=ids[:, : int(lengths.max())],
            lengths=lengths,
            log_probs=self.done_log_probs[:, :n_best].reshape(-1),
            scores=self.done_scores[:, :n_best].reshape(-1),
            finished=self.done_eos[:, :n_best].reshape(-1),
            eos_id=self.eos,
        )


def _expand(index: Tensor, like: Tensor) -> Tensor:
    """``index`` ``(n, m)`` broadcast over the trailing dimensions of ``like`` for gather."""
    return index.view(*index.shape, *([1] * (like.dim() - 2))).expand(*index.shape, *like.shape[2:])

"""The machinery under :mod:`attnlab.decode.search`: what greedy search, sampling and beam search
share.

* :class:`Session`: one model, one batch and its cache, fed one step at a time (the fast
  decoder step of :mod:`attnlab.decode.fast` where the model allows it, else the reference).
* :func:`as_ids` and :func:`check_lengths`: the decoding functions' input checks; :func:`pack`
  moves padding out of the way so that every row decodes as it would alone.
* :class:`Threads`, :class:`EvalMode`: the process state a decoding run sets and restores.
* :class:`Masker`: the ids that must not come next (pad, BOS; EOS before ``min_new_tokens``).
* :func:`argmax`: greedy search's choice, vectorised for many rows.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_bool, check_int, check_optional_int, is_int
from ..models.config import TransformerConfig
from ..models.transformer import Transformer, TransformerLM
from ..nn.cache import DecoderCache
from .fast import FastDecoder, check_quantize, why_not_fast_path

#: Output length allowance over the source length (Vaswani et al. 2017, sec. 6.1).
EXTRA_LENGTH = 50
#: Default maximum of new tokens for a language model.
LM_MAX_NEW_TOKENS = 50


def output_limit(source_length: int, max_new_tokens: int | None, max_len: int) -> int:
    """The longest output of a translation, in tokens, the one rule every decoder keeps:
    ``max_new_tokens``, or the source's length + :data:`EXTRA_LENGTH` (sec. 6.1), at most
    ``max_len``."""
    return min(source_length + EXTRA_LENGTH if max_new_tokens is None else max_new_tokens, max_len)


# -- argument checks ---------------------------------------------------------------------------


def check_lengths(max_new_tokens: object, min_new_tokens: object) -> None:
    """The decoding functions' length arguments: ``max_new_tokens`` a positive int or None,
    ``min_new_tokens`` an int >= 0 and not above it."""
    most = check_optional_int(max_new_tokens, "max_new_tokens")
    least = check_int(min_new_tokens, "min_new_tokens", minimum=0, plain=True)
    if most is not None and least > most:
        raise ValueError(f"min_new_tokens: {least} exceeds max_new_tokens={most}")


def as_ids(inputs: object, name: str, pad_id: int, device: torch.device) -> Tensor:
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
            if not all(is_int(t) for t in row):
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


class Scoring(Protocol):
    """What a search asks of what it decodes with, one model (:class:`Session`) or several
    (:class:`attnlab.decode.ensemble.EnsembleSession`): the first ids, the next token's
    log-probabilities of every row, and which rows live on."""

    #: The config whose special ids (pad, BOS, EOS) the search uses.
    config: TransformerConfig
    #: ``(B, P)``: the first ids of each input (BOS, or a left-padded prompt).
    start: Tensor
    #: ``(B,)``: each input's real tokens.
    input_lengths: Tensor
    vocab_size: int

    def max_new_tokens(self, requested: int | None) -> Tensor: ...

    def begin(self, rows_per_input: int, capacity: int) -> Tensor: ...

    def step(self, ids: Tensor) -> Tensor: ...

    def select(self, rows: Tensor, *, cross: bool = True) -> None: ...

    def banned(self) -> list[int]: ...


class Session:
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
        check_bool(fast, "fast", TypeError)
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
        self.position_limit = config.max_len if config.positional == "learned" else None
        if isinstance(model, Transformer):
            self.source = pack(as_ids(inputs, "src_ids", pad, device), pad, real_first=True)
            self.input_lengths = (self.source != pad).sum(dim=1)
            self.start = torch.full((self.source.shape[0], 1), config.bos_id, device=device)
            self.prompt_length = 1
        else:
            ids = as_ids(inputs, "ids", pad, device)
            self.input_lengths = (ids != pad).sum(dim=1)
            self.start = pack(ids, pad, real_first=False)
            self.prompt_length = self.start.shape[1]
            limit = self.position_limit
            if limit is not None and int(self.input_lengths.max()) > limit:
                raise ValueError(
                    f"ids: a prompt of {int(self.input_lengths.max())} tokens exceeds the "
                    f"model's max_len={limit} (learned positions)"
                )
        self.vocab_size = model.lm_head.out_features
        self.cache: DecoderCache | None = None

    def max_new_tokens(self, requested: int | None) -> Tensor:
        """Each row's maximum output length ``(B,)``: ``requested``, or for a Transformer the
        source length + 50 (for a language model 50); capped where learned positions end."""
        if requested is not None:
            limit = torch.full_like(self.input_lengths, requested)
        elif isinstance(self.model, Transformer):
            most = int(self.input_lengths.max()) + EXTRA_LENGTH  # no cap here but the positions'
            lengths = self.input_lengths.tolist()
            limit = self.input_lengths.new_tensor([output_limit(n, None, most) for n in lengths])
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
        """Keep the cache rows ``rows`` (see :meth:`attnlab.nn.cache.DecoderCache.select`)."""
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


def pack(ids: Tensor, pad_id: int, *, real_first: bool) -> Tensor:
    """Move each row's real tokens together, in their order: to the front (right padding: a
    source then encodes as it would alone) or to the end (left padding: prompts then end
    together, where decoding continues)."""
    real = ids != pad_id
    key = real if not real_first else ~real
    # A stable sort on "is pad" (or "is real") keeps the real tokens' order.
    order = torch.sort(key.to(torch.int8), dim=1, stable=True).indices
    return ids.gather(1, order)


#: Below this many rows per step (sentences x beams) decoding runs on one CPU thread unless
#: this process may run on two physical cores (:func:`separate_cores`): a small step's matrix
#: products are too small to share, so waking a second thread for each of its ~100 ops costs
#: more than it saves where the two CPUs are one core's hyperthreads, while on two separate
#: cores the second thread streams half of the weights through its own caches (both measured
#: in docs/benchmarks.md, "Decoding").
SINGLE_THREAD_ROWS = 8


@functools.cache
def separate_cores() -> int:
    """How many distinct physical cores this process may run on, from Linux's CPU topology
    (``/sys/devices/system/cpu/cpuN/topology``); 1 where that cannot be read (another OS, a
    sandbox), which keeps small batches on one thread. Read once per process."""
    return count_cores(Path("/sys/devices/system/cpu"))


def count_cores(root: Path) -> int:
    """:func:`separate_cores` from the topology under ``root``."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 1
    cores = set()
    for cpu in cpus:
        topology = root / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return 1
        cores.add((package, core))
    return max(1, len(cores))


class Threads:
    """Run with one intra-op thread when a step's work is that small and a second thread would
    only share the first one's core (CPU only); restore the caller's setting afterwards.
    torch's thread count is global to the process."""

    def __init__(self, rows: int, device: torch.device) -> None:
        small = device.type == "cpu" and rows < SINGLE_THREAD_ROWS
        self.single = small and separate_cores() < 2
        self.before = 1

    def __enter__(self) -> None:
        self.before = torch.get_num_threads()
        if self.single and self.before > 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if torch.get_num_threads() != self.before:
            torch.set_num_threads(self.before)


class EvalMode:
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


class Masker:
    """Sets the log-probabilities of ids that must not come next to -inf, in place: pad and BOS
    always, EOS before ``min_new_tokens``."""

    def __init__(self, session: Scoring, min_new_tokens: int) -> None:
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


def argmax(scores: Tensor) -> Tensor:
    """``scores.argmax(dim=-1)`` of ``(N, V)`` scores, the same indices (the first maximum; NaN
    counts as the maximum), faster for many rows: torch's CPU argmax over a long last dimension
    is not vectorised (about 250 us for 32 x 8,000 on one core), its ``amax`` is. The maxima of
    chunks of a row pick the first chunk holding the row's maximum, then the maximum within it.
    """
    rows, vocab = scores.shape
    chunk = ARGMAX_CHUNKS.get(vocab)
    if chunk is None:
        chunk = ARGMAX_CHUNKS[vocab] = next((c for c in range(128, 15, -1) if vocab % c == 0), 0)
    if rows < 8 or not chunk or scores.device.type != "cpu" or not scores.is_contiguous():
        return scores.argmax(dim=-1)
    chunks = scores.view(rows, vocab // chunk, chunk)
    best = chunks.amax(dim=-1).argmax(dim=-1)  # (N,): the first chunk with the maximum
    within = chunks[torch.arange(rows, device=scores.device), best].argmax(dim=-1)
    return best * chunk + within


ARGMAX_CHUNKS: dict[int, int] = {}

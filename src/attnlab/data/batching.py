"""Token-budget batching: examples -> batches of padded id tensors (Vaswani et al. 2017, sec. 5.1).

The paper batches "sentence pairs ... by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens". Here a batch is a list of example indices whose *padded* size, ``len(batch) *
longest``, stays within ``max_tokens`` on each side, so the tensors a batch becomes never
exceed the budget, whatever the lengths.

* :class:`ExamplesProtocol`: what training asks of examples (their lengths, their tensors, a
  fingerprint, the first out-of-vocabulary id), which the in-memory :class:`Examples` and the
  memory-mapped :class:`~attnlab.data.shards.ShardExamples` both implement.
* :func:`make_examples` frames id pairs for teacher forcing (``[bos] + ids + [eos]`` on the
  target) and drops pairs longer than ``max_len``; :func:`make_lm_examples` does the same for
  a decoder-only model (no source).
* :class:`TokenBatcher` sorts examples by length (seeded noise, so batches vary between
  epochs), packs them greedily into budget-bound batches, shuffles the batches, and splits
  each global batch among the replicas of a distributed run.
* :func:`collate` turns a batch into ``src (B, S)``, ``tgt_in (B, T)``, ``tgt_out (B, T)``.
* :class:`Mixture`: several corpora concatenated into one index space, drawn anew each epoch
  by weights or by temperature (an epoch ends when the corpus drawn fastest for its size has
  been seen once); :class:`TokenBatcher` then buckets and packs the draw.

An epoch's batches are held lean (:class:`IndexBatches`: one index array and the batch
boundaries, a few bytes per example), so that corpora of millions of pairs batch in seconds;
:mod:`attnlab.data.shards` gives such corpora memory-mapped, as
:class:`~attnlab.data.shards.ShardExamples`, which everything here accepts.

Example::

    examples = make_examples(list(zip(src_ids, tgt_ids)), max_len=256)
    batcher = TokenBatcher.for_examples(examples, max_tokens=4096, seed=0)
    for indices in batcher.batches(epoch=0):
        src, tgt_in, tgt_out = collate(examples, indices, pad_id=0)
        logits = model(src, tgt_in)                  # (B, T, vocab) against tgt_out (B, T)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, overload, runtime_checkable

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "Example",
    "Examples",
    "ExamplesProtocol",
    "IndexBatches",
    "Mixture",
    "TokenBatcher",
    "as_examples",
    "collate",
    "make_examples",
    "make_lm_examples",
]


class Example(NamedTuple):
    """One training example.

    Attributes:
        src: source ids as given (no specials); empty for a decoder-only model.
        tgt: the framed target ``(bos, *ids, eos)``. Teacher forcing feeds ``tgt[:-1]`` and
            predicts ``tgt[1:]``, so the target tensors are ``len(tgt) - 1`` long.
    """

    src: tuple[int, ...]
    tgt: tuple[int, ...]


@runtime_checkable
class ExamplesProtocol(Protocol):
    """Training examples of either kind, in memory (:class:`Examples`) or memory-mapped
    (:class:`~attnlab.data.shards.ShardExamples`): what the batcher and the objectives ask.

    ``src_lengths`` and ``tgt_lengths`` (1-D unsigned or int64 arrays, one per example) are the
    lengths of the tensors each example becomes; ``dropped`` counts the pairs left out for
    ``max_len``; ``mixture`` draws each training epoch from several corpora, or is None.
    """

    src_lengths: np.ndarray
    tgt_lengths: np.ndarray
    dropped: int
    mixture: Mixture | None

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Example: ...

    def collate(self, indices: Sequence[int], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
        """The padded tensors ``src (B, S)``, ``tgt_in (B, T)``, ``tgt_out (B, T)`` of the
        examples ``indices`` (:func:`collate`)."""
        ...

    def fingerprint(self) -> str:
        """A short, cheap hash of what the examples are (a checkpoint's data fingerprint)."""
        ...

    def first_id_from(self, side: str, bound: int) -> int | None:
        """The first example with a ``side`` (``"src"`` or ``"tgt"``: the framed target) id
        ``>= bound``, or None: an id outside a model's vocabulary."""
        ...


class Examples(Sequence[Example]):
    """The examples kept by :func:`make_examples`, with their lengths and the dropped count:
    the in-memory :class:`ExamplesProtocol`.

    A read-only sequence of :class:`Example`. ``src_lengths`` and ``tgt_lengths`` (int64 numpy
    arrays) are the lengths of the tensors each example becomes: ``len(src)`` and
    ``len(tgt) - 1`` (the length of ``tgt_in`` and of ``tgt_out``). ``dropped`` counts the
    pairs left out for exceeding ``max_len``. ``mixture`` (None here) is how the batcher draws
    each epoch's examples when they come from several corpora (:class:`Mixture`; see
    :class:`attnlab.data.shards.ShardExamples`).
    """

    mixture: Mixture | None = None

    def __init__(self, examples: Iterable[Example], *, dropped: int = 0) -> None:
        self._examples = list(examples)
        for i, example in enumerate(self._examples):
            if not isinstance(example, Example):
                raise TypeError(f"examples[{i}]: expected an Example, got {type(example).__name__}")
            if len(example.tgt) < 2:
                raise ValueError(
                    f"examples[{i}]: the target must be framed (bos, ..., eos), got {example.tgt}"
                )
        self.dropped = dropped
        self.src_lengths = np.fromiter(
            (len(e.src) for e in self._examples), np.int64, len(self._examples)
        )
        self.tgt_lengths = np.fromiter(
            (len(e.tgt) - 1 for e in self._examples), np.int64, len(self._examples)
        )

    def __len__(self) -> int:
        return len(self._examples)

    @overload
    def __getitem__(self, index: int) -> Example: ...
    @overload
    def __getitem__(self, index: slice) -> list[Example]: ...
    def __getitem__(self, index: int | slice) -> Example | list[Example]:
        return self._examples[index]

    def __repr__(self) -> str:
        return f"Examples({len(self)} examples, {self.dropped} dropped)"

    def collate(self, indices: Sequence[int], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
        """The padded tensors of the examples ``indices``: :func:`collate`."""
        return _collate_rows(self, indices, pad_id)

    def fingerprint(self) -> str:
        """A short hash of every example's lengths."""
        digest = hashlib.sha256(self.src_lengths.tobytes())
        digest.update(self.tgt_lengths.tobytes())
        return digest.hexdigest()[:16]

    def first_id_from(self, side: str, bound: int) -> int | None:
        """The first example with a ``side`` id ``>= bound`` (the target framed), or None."""
        for i, example in enumerate(self._examples):
            ids = example.src if side == "src" else example.tgt
            if ids and max(ids) >= bound:
                return i
        return None


def as_examples(data: object, name: str) -> ExamplesProtocol:
    """``data`` as examples: :class:`ExamplesProtocol` as it is, a sequence of
    :class:`Example` as :class:`Examples`; errors start with ``name``."""
    if isinstance(data, ExamplesProtocol):
        return data
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        try:
            return Examples(data)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{name}: {e}") from None
    raise TypeError(f"{name}: expected Examples (make_examples), got {type(data).__name__}")


def _check_ids(ids: object, where: str) -> tuple[int, ...]:
    """``ids`` as a tuple of non-negative ints, or a ValueError naming ``where``."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (Sequence, np.ndarray, Tensor)):
        raise TypeError(f"{where}: expected a sequence of token ids, got {type(ids).__name__}")
    array = np.asarray(ids)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{where}: expected a flat sequence of int token ids, got {ids!r:.80}")
    if array.size and array.min() < 0:
        raise ValueError(f"{where}: token ids must be >= 0, got {int(array.min())}")
    return tuple(array.tolist())


def check_max_len(max_len: object) -> None:
    if max_len is not None and (
        not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1
    ):
        raise ValueError(f"max_len: expected a positive int or None, got {max_len!r}")


def make_examples(
    pairs: Iterable[tuple[Sequence[int], Sequence[int]]],
    *,
    max_len: int | None,
    bos_id: int = 1,
    eos_id: int = 2,
) -> Examples:
    """Frame ``(source ids, target ids)`` pairs for teacher forcing.

    The source stays as given; the target becomes ``[bos_id] + ids + [eos_id]``. A pair is
    dropped when its source is longer than ``max_len`` or its target tensors (``len(ids) + 1``
    tokens: ``[bos] + ids`` in, ``ids + [eos]`` out) are; ``Examples.dropped`` counts them.

    Args:
        pairs: ``(src_ids, tgt_ids)`` pairs of int sequences (lists, tuples, 1-D arrays),
            without specials, e.g. from ``Tokenizer.encode``.
        max_len: the longest tensor a model may see (``TransformerConfig.max_len``), or None to
            keep every pair.
        bos_id, eos_id: the framing ids (``TransformerConfig``'s defaults).

    Returns:
        :class:`Examples`, in the order of ``pairs``.

    Raises:
        ValueError / TypeError: a malformed pair, naming its index.
    """
    check_max_len(max_len)
    examples: list[Example] = []
    dropped = 0
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"pairs[{i}]: expected a (src_ids, tgt_ids) pair, got {pair!r:.80}")
        src = _check_ids(pair[0], f"pairs[{i}][0] (source)")
        tgt = _check_ids(pair[1], f"pairs[{i}][1] (target)")
        if max_len is not None and (len(src) > max_len or len(tgt) + 1 > max_len):
            dropped += 1
            continue
        examples.append(Example(src, (bos_id, *tgt, eos_id)))
    return Examples(examples, dropped=dropped)


def make_lm_examples(
    sequences: Iterable[Sequence[int]],
    *,
    max_len: int | None,
    bos_id: int = 1,
    eos_id: int = 2,
) -> Examples:
    """Examples for a decoder-only model (``TransformerLM``): an empty source and the sequence
    framed as ``[bos] + ids + [eos]``; sequences whose ``len(ids) + 1`` exceeds ``max_len`` are
    dropped (counted in ``Examples.dropped``)."""
    check_max_len(max_len)
    examples: list[Example] = []
    dropped = 0
    for i, ids in enumerate(sequences):
        tgt = _check_ids(ids, f"sequences[{i}]")
        if max_len is not None and len(tgt) + 1 > max_len:
            dropped += 1
            continue
        examples.append(Example((), (bos_id, *tgt, eos_id)))
    return Examples(examples, dropped=dropped)


def _as_lengths(values: object, name: str) -> np.ndarray:
    """``values`` as a 1-D array of lengths: unsigned arrays as they are (the compact lengths
    of memory-mapped shards stay compact), anything else as int64."""
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected a 1-D sequence of int lengths, got {values!r:.80}")
    if array.dtype.kind == "u":
        return array
    if array.size and array.min() < 0:
        raise ValueError(f"{name}: lengths must be >= 0, got {int(array.min())}")
    return array.astype(np.int64)


def check_int(value: object, name: str, minimum: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name}: expected a {kind} int, got {value!r}")
    return int(value)


def share(batch: Sequence[int], num_replicas: int, rank: int) -> list[int]:
    """Replica ``rank``'s contiguous share of a global ``batch`` cut into ``num_replicas``
    shares whose sizes differ by at most one (``numpy.array_split``'s cut; a share is empty
    when the batch has fewer items than replicas)."""
    size, extra = divmod(len(batch), num_replicas)
    start = rank * size + min(rank, extra)
    stop = start + size + (1 if rank < extra else 0)
    return list(batch[start:stop])


class IndexBatches(Sequence[list[int]]):
    """An epoch's batches held lean: batch ``j`` is ``order[starts[j]:stops[j]]``.

    A read-only sequence of index lists, as :meth:`TokenBatcher.batches` returns them:
    ``batches[j]`` is a fresh ``list[int]``, ``batches[a:b]`` another :class:`IndexBatches`
    over the same arrays (nothing copied), and it equals any sequence of the same index lists.
    Its arrays: ``order`` (int32, or int64 past 2**31 examples) holds the indices in packing
    order, ``starts`` and ``stops`` (int64, one entry per batch, in the epoch's batch order)
    the boundaries. An epoch of N examples in K batches takes ``4 N + 16 K`` bytes.
    """

    __slots__ = ("order", "starts", "stops")

    def __init__(self, order: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> None:
        self.order, self.starts, self.stops = order, starts, stops

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, index: int) -> list[int]: ...
    @overload
    def __getitem__(self, index: slice) -> IndexBatches: ...
    def __getitem__(self, index: int | slice) -> list[int] | IndexBatches:
        if isinstance(index, slice):
            return IndexBatches(self.order, self.starts[index], self.stops[index])
        return self.array(index).tolist()

    def array(self, index: int) -> np.ndarray:
        """Batch ``index`` as an index array (a view: do not modify)."""
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"batch {index} out of range ({len(self)} batches)")
        return self.order[self.starts[index] : self.stops[index]]

    def __iter__(self) -> Iterator[list[int]]:
        order = self.order
        for start, stop in zip(self.starts.tolist(), self.stops.tolist(), strict=True):
            yield order[start:stop].tolist()

    def sizes(self) -> np.ndarray:
        """The number of examples in each batch (int64)."""
        return self.stops - self.starts

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IndexBatches):
            return len(self) == len(other) and all(
                np.array_equal(self.array(j), other.array(j)) for j in range(len(self))
            )
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(
                a == list(b) for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IndexBatches({len(self)} batches of {int(self.sizes().sum())} examples)"


class TokenBatcher:
    """Batches of example indices bounded by a token budget, bucketed by length.

    A batch's padded size stays within the budget on each side:
    ``len(batch) * max(src_lengths[batch]) <= max_tokens`` and the same for the target (the
    paper's "approximately 25000 source and 25000 target tokens", sec. 5.1, counted as the
    tensors will hold them, padding included).

    How an epoch's batches are made (:meth:`batches`), deterministic in ``(seed, epoch)``:

    0. The epoch's examples: every one once, or with a :class:`Mixture` (training only) its
       seeded draw from each corpus (:meth:`epoch_indices`).
    1. Bucketing: examples are ordered by their longer side, ``max(src, tgt)`` length,
       perturbed by seeded noise (``floor(length + U[0, length_noise))``), then by target
       length, then by source length, ties broken at random. (Of the orders tried, this one
       pads least on both sides together, for small and large budgets.) With the default
       ``length_noise=1`` the lengths stay exact and only the order among equal lengths varies
       between epochs; larger values let neighbouring lengths mix (more variety between
       epochs, a little more padding).
    2. Packing: walking that order, an example joins the current batch while the budget
       holds on both sides, else it starts the next batch.
    3. Shuffling: the batches are put in a seeded random order.

    With ``shuffle=False`` (validation) the order is the exact length order with no noise, and
    the batches are not shuffled; the result then does not depend on ``seed`` or ``epoch``
    (and every example is used once, mixture or not).

    Distributed: with ``num_replicas > 1`` the *global* batches are exactly those of one
    replica, and each is cut into ``num_replicas`` contiguous shares (sizes differ by at most
    one example); :meth:`batches` returns this ``rank``'s shares. Every replica gets the same
    number of batches, so replicas step in lock-step; a share is empty when a global batch has
    fewer examples than replicas (a trainer must still take part in the gradient exchange).

    Memory: the lengths are kept in the dtype given (uint16 from memory-mapped shards, 2 bytes
    per example and side) and an epoch's batches as :class:`IndexBatches` (4 bytes per
    example); computing an epoch's batches takes about 40 bytes per example more, for a moment.

    Args:
        src_lengths, tgt_lengths: per example, the lengths of its source and target tensors
            (:attr:`Examples.src_lengths` / ``tgt_lengths``). Source lengths may be 0 (a
            decoder-only model).
        max_tokens: the budget per side and per (global) batch; every example must fit alone.
        shuffle: bucket with noise and shuffle the batches (training) or not (evaluation).
        seed: seeds the noise and the shuffling (with the epoch).
        num_replicas, rank: the number of data-parallel replicas and this one's index.
        length_noise: width of the bucketing noise, in tokens (>= 1; see above).
        mixture: how each training epoch draws from several corpora (:class:`Mixture`, over
            exactly these examples), or None: every example once per epoch.
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        length_noise: float = 1.0,
        mixture: Mixture | None = None,
    ) -> None:
        self.src_lengths = _as_lengths(src_lengths, "src_lengths")
        self.tgt_lengths = _as_lengths(tgt_lengths, "tgt_lengths")
        if len(self.src_lengths) != len(self.tgt_lengths):
            raise ValueError(
                f"src_lengths has {len(self.src_lengths)} entries but tgt_lengths has "
                f"{len(self.tgt_lengths)}; expected one of each per example"
            )
        self.max_tokens = check_int(max_tokens, "max_tokens", 1)
        if not isinstance(shuffle, bool):
            raise ValueError(f"shuffle: expected a bool, got {shuffle!r}")
        self.shuffle = shuffle
        self.seed = check_int(seed, "seed", 0)
        self.num_replicas = check_int(num_replicas, "num_replicas", 1)
        self.rank = check_int(rank, "rank", 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank: expected 0 <= rank < num_replicas={num_replicas}, got {rank}")
        if not (
            isinstance(length_noise, (int, float))
            and not isinstance(length_noise, bool)
            and 1.0 <= length_noise < float("inf")
        ):
            raise ValueError(f"length_noise: expected a finite number >= 1, got {length_noise!r}")
        self.length_noise = float(length_noise)
        for side, lengths in (("source", self.src_lengths), ("target", self.tgt_lengths)):
            too_long = np.flatnonzero(lengths > self.max_tokens)
            if too_long.size:
                i = int(too_long[0])
                raise ValueError(
                    f"max_tokens: example {i}'s {side} has {int(lengths[i])} tokens, more than "
                    f"max_tokens={self.max_tokens} ({too_long.size} examples do not fit); raise "
                    f"max_tokens or drop long pairs with make_examples(max_len=...)"
                )
        if (self.tgt_lengths < 1).any():
            i = int(np.flatnonzero(self.tgt_lengths < 1)[0])
            raise ValueError(f"tgt_lengths: example {i} has an empty target (expected >= 1)")
        if mixture is not None:
            if not isinstance(mixture, Mixture):
                raise TypeError(f"mixture: expected a Mixture, got {type(mixture).__name__}")
            if mixture.total != len(self.src_lengths):
                raise ValueError(
                    f"mixture: its corpora hold {mixture.total} examples, but there are "
                    f"{len(self.src_lengths)} lengths"
                )
        self.mixture = mixture
        self._cached: tuple[int, IndexBatches] | None = None

    @classmethod
    def for_examples(
        cls, examples: ExamplesProtocol, max_tokens: int, **options: Any
    ) -> TokenBatcher:
        """A batcher over examples (:class:`ExamplesProtocol`: their source and target tensor
        lengths, and their :class:`Mixture` when they have one)."""
        if not isinstance(examples, ExamplesProtocol):
            raise TypeError(f"examples: expected Examples, got {type(examples).__name__}")
        options.setdefault("mixture", examples.mixture)
        return cls(examples.src_lengths, examples.tgt_lengths, max_tokens, **options)

    def __len__(self) -> int:
        """The number of examples."""
        return len(self.src_lengths)

    def epoch_indices(self, epoch: int) -> np.ndarray | None:
        """The examples of training epoch ``epoch`` (an index array, an index possibly
        repeated), or None for every example once: the mixture's draw, when there is one. A
        subclass may draw otherwise; the draw must be a function of ``(seed, epoch)`` for a
        resumed run to find the same batches."""
        if self.mixture is None:
            return None
        return self.mixture.epoch_indices(self.seed, epoch)

    def _order(
        self, rng: np.random.Generator | None, src: np.ndarray, tgt: np.ndarray
    ) -> np.ndarray:
        """Positions of ``src`` / ``tgt`` in bucketing order (see the class docstring):
        ``np.lexsort((ties, src, tgt, noisy))`` with ``ties`` seeded random numbers, or
        ``np.lexsort((src, tgt, longer))`` without noise (ties kept in position order)."""
        src, tgt = _narrow(src), _narrow(tgt)
        longer = np.maximum(src, tgt)
        if rng is None:
            return np.lexsort((src, tgt, longer))
        noisy = _narrow(np.floor(longer + rng.uniform(0.0, self.length_noise, len(src))))
        return _lexsort_after(_argsort_floats(rng.random(len(src))), (src, tgt, noisy))

    def global_batches(self, epoch: int) -> IndexBatches:
        """Every replica's batches of ``epoch`` together: what one replica would get alone."""
        return self._global_batches(epoch)

    def _global_batches(self, epoch: int) -> IndexBatches:
        """:meth:`global_batches`, computed once per epoch (the newest epoch is kept)."""
        epoch = check_int(epoch, "epoch", 0)
        key = epoch if self.shuffle else 0
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        self._cached = None  # the previous epoch's arrays go before this one's are made
        rng = np.random.default_rng((self.seed, epoch)) if self.shuffle else None
        chosen = self.epoch_indices(epoch) if self.shuffle else None
        src, tgt = self.src_lengths, self.tgt_lengths
        if chosen is not None:
            src, tgt = src[chosen], tgt[chosen]
        order = self._order(rng, src, tgt)
        bounds = _pack(src[order], tgt[order], self.max_tokens)
        del src, tgt
        if chosen is not None:
            order = chosen[order]
        order = order.astype(index_dtype(len(self.src_lengths)), copy=False)
        starts, stops = bounds[:-1], bounds[1:]
        if rng is not None:
            permutation = rng.permutation(len(starts))
            starts, stops = starts[permutation], stops[permutation]
        batches = IndexBatches(order, starts, stops)
        self._cached = (key, batches)
        return batches

    def batches(self, epoch: int) -> IndexBatches:
        """This replica's batches of ``epoch``: a sequence of index lists (shares of the global
        batches when ``num_replicas > 1``; possibly empty lists, see the class docstring)."""
        batches = self._global_batches(epoch)
        if self.num_replicas == 1:
            return batches
        size, extra = np.divmod(batches.sizes(), self.num_replicas)
        starts = batches.starts + self.rank * size + np.minimum(self.rank, extra)
        stops = starts + size + (self.rank < extra)
        return IndexBatches(batches.order, starts, stops)

    def share(self, batch: Sequence[int]) -> list[int]:
        """This rank's contiguous share of a global ``batch`` (``numpy.array_split``'s cut)."""
        return share(batch, self.num_replicas, self.rank)

    def num_batches(self, epoch: int) -> int:
        """The number of (global) batches in ``epoch``."""
        return len(self._global_batches(epoch))

    def padding_fraction(self, epoch: int) -> float:
        """The fraction of pad positions in the tensors this replica collates in ``epoch``
        (source and target together): ``1 - real tokens / (sum over batches of B * (S + T))``."""
        batches = self.batches(epoch)
        sizes = batches.sizes()
        nonempty = np.flatnonzero(sizes > 0)
        if nonempty.size == 0:
            return 0.0
        starts = batches.starts[nonempty]
        by_start = np.argsort(starts, kind="stable")
        starts, stops = starts[by_start], batches.stops[nonempty][by_start]
        cuts = np.stack([starts, stops], axis=1).ravel()  # [start0, stop0, start1, stop1, ...]
        real = padded = 0
        for lengths in (self.src_lengths, self.tgt_lengths):
            values = np.append(lengths[batches.order].astype(np.int64), 0)  # stop may be N
            total = np.concatenate([[0], np.cumsum(values)])
            real += int((total[stops] - total[starts]).sum())
            longest = np.maximum.reduceat(values, cuts)[::2]  # of each batch
            padded += int((sizes[nonempty][by_start] * longest).sum())
        return 1.0 - real / padded if padded else 0.0


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integer-valued ``values`` as uint16 when they fit (else unchanged)."""
    if values.dtype == np.uint16 or values.size == 0 or values.max() > np.iinfo(np.uint16).max:
        return values
    return values.astype(np.uint16)


def _argsort_floats(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")``, faster: an unstable sort gives the same when no
    two values are equal (random doubles, nearly always), else the stable one is used."""
    order = np.argsort(values)
    ordered = values[order]
    if (ordered[1:] == ordered[:-1]).any():
        return np.argsort(values, kind="stable")
    return order


def _lexsort_after(order: np.ndarray, keys: Sequence[np.ndarray]) -> np.ndarray:
    """``order`` re-sorted stably by each of ``keys`` in turn, the last the primary key:
    ``np.lexsort((ties, *keys))`` when ``order`` sorts ``ties`` (stably). A stable sort of a
    16-bit key is a radix sort, so this is several times faster than ``lexsort`` on doubles."""
    for key in keys:
        order = order[np.argsort(key[order], kind="stable")]
    return order


def index_dtype(count: int) -> type[np.signedinteger[Any]]:
    """The index dtype for ``count`` examples: int32 when it can hold every index."""
    return np.int32 if count <= np.iinfo(np.int32).max else np.int64


def _pack(src: np.ndarray, tgt: np.ndarray, budget: int) -> np.ndarray:
    """Greedy packing of examples with lengths ``src``, ``tgt`` (already in bucketing order):
    the batch boundaries, int64, ``[0, ..., len(src)]``; batch ``j`` is ``[bounds[j],
    bounds[j + 1])``.

    The same cut as packing one example at a time (tests/_batching_reference.py keeps that
    readable version), found a window at a time: from a batch's first
    example, the ``k``-th joins iff ``k * (the longest of the first k) <= budget`` on both
    sides; that only turns false once (``k`` and the running maximum never decrease), so the
    batch is the leading run of trues. Every example fits alone (checked when the batcher is
    made), so a batch holds at least one, and at most ``budget`` (targets are >= 1 long).
    """
    count = len(src)
    cap = min(count, budget + 1)
    ks = np.arange(1, cap + 1, dtype=np.int64)
    bounds = [0]
    start, window = 0, 64
    while start < count:
        while True:
            stop = min(count, start + window, start + cap)
            k = ks[: stop - start]
            fits = k * np.maximum.accumulate(src[start:stop]) <= budget
            fits &= k * np.maximum.accumulate(tgt[start:stop]) <= budget
            size = len(fits) if fits[-1] else int(fits.argmin())
            if size < len(fits) or stop == count or stop == start + cap:
                break
            window *= 2
        start += max(size, 1)
        bounds.append(start)
        window = max(64, 2 * size)
    return np.array(bounds, dtype=np.int64)


class Mixture:
    """Several corpora concatenated into one index space, mixed anew in each epoch.

    Corpus ``k`` holds the indices ``starts[k] .. starts[k] + sizes[k] - 1`` (``starts`` the
    running sums of ``sizes``). Its share of an epoch is ``p_k = weights[k] / sum(weights)``
    or, by temperature, ``p_k ∝ sizes[k] ** (1 / T)`` (``T = 1``: in proportion to the
    sizes; larger ``T``: more even, favouring the small corpora).

    An epoch (as fairseq's sampling weights have it) ends when the corpus drawn fastest for
    its size, the one of largest ``p_k / sizes[k]`` (the first of equals), has been seen
    once: it gives all its ``sizes[k]`` examples, and every other corpus ``j`` gives
    ``counts[j] = round(sizes[k] * p_j / p_k)``, at most its size; ``epoch_size`` is their
    sum. No example appears twice in an epoch, each corpus's share of it is ``p_j`` (to the
    rounding of one example), and a corpus drawn down is a fresh seeded sample each epoch
    (over many epochs, each of its pairs is seen at the same rate). ``T = 1`` (no weights,
    no temperature): every example once. Given ``epoch_size`` instead, ``counts[k]`` is
    ``epoch_size * p_k`` rounded by largest remainder, and a corpus drawn up to more than its
    size is taken whole as many times as ``counts[k] // sizes[k]``, plus a sample of the rest.
    The draw is a function of ``(seed, epoch)`` (:meth:`epoch_indices`), so that a resumed
    run draws the same.

    Example::

        mixture = Mixture([4_500_000, 40_000_000], temperature=5.0)
        batcher = TokenBatcher(src_lengths, tgt_lengths, 25_000, mixture=mixture)

    Args:
        sizes: the examples of each corpus (> 0 for a corpus drawn from).
        weights: each corpus's share of an epoch (non-negative, not all 0); or
        temperature: ``T > 0``; neither: ``T = 1``.
        epoch_size: the examples of an epoch (default: until the corpus of largest
            ``p_k / sizes[k]`` has been seen once, above).
        keys: a fingerprint per corpus (e.g. its shards' key), kept in :meth:`to_dict` so that
            a checkpoint's data fingerprint changes with the corpora.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        weights: Sequence[float] | None = None,
        temperature: float | None = None,
        epoch_size: int | None = None,
        keys: Sequence[str] | None = None,
    ) -> None:
        self.sizes = [check_int(n, f"sizes[{k}]", 0) for k, n in enumerate(sizes)]
        if not self.sizes:
            raise ValueError("sizes: expected at least one corpus, got none")
        if weights is not None and temperature is not None:
            raise ValueError("weights, temperature: give one of them, not both")
        sizes_f = np.array(self.sizes, dtype=np.float64)
        if weights is not None:
            if len(weights) != len(self.sizes) or not all(
                isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < float("inf")
                for w in weights
            ):
                raise ValueError(
                    f"weights: expected {len(self.sizes)} finite numbers >= 0, got {weights!r:.80}"
                )
            share = np.array(weights, dtype=np.float64)
        else:
            if temperature is None:
                temperature = 1.0
            if not (
                isinstance(temperature, (int, float))
                and not isinstance(temperature, bool)
                and 0 < temperature < float("inf")
            ):
                raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
            share = sizes_f ** (1.0 / float(temperature))
        if share.sum() <= 0:
            raise ValueError("weights: every corpus has weight 0 (or is empty); nothing to draw")
        self.weights = [float(w) for w in weights] if weights is not None else None
        self.temperature = float(temperature) if temperature is not None else None
        self.probabilities: np.ndarray = share / share.sum()
        for k, (n, p) in enumerate(zip(self.sizes, self.probabilities.tolist(), strict=True)):
            if n == 0 and p > 0:
                raise ValueError(f"sizes[{k}]: the corpus is empty but has weight {p:.3g}")
        self.total = int(sizes_f.sum())
        if epoch_size is None:
            self.counts = _one_pass(self.probabilities, sizes_f)
            self.epoch_size = int(self.counts.sum())
        else:
            self.epoch_size = check_int(epoch_size, "epoch_size", 1)
            self.counts = _largest_remainder(self.probabilities, self.epoch_size)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        if keys is not None and len(keys) != len(self.sizes):
            raise ValueError(f"keys: expected {len(self.sizes)} keys, got {len(keys)}")
        self.keys = [str(key) for key in keys] if keys is not None else None

    def epoch_indices(self, seed: int, epoch: int) -> np.ndarray:
        """The indices of epoch ``epoch``'s examples, corpus by corpus (each corpus's in
        increasing order), int32 (int64 past 2**31 examples); ``epoch_size`` of them."""
        rng = np.random.default_rng((seed, epoch, _MIXTURE_STREAM))
        dtype = index_dtype(self.total)
        parts = []
        for start, n, count in zip(
            self.starts.tolist(), self.sizes, self.counts.tolist(), strict=False
        ):
            copies, rest = divmod(count, n) if n else (0, 0)
            corpus = np.arange(start, start + n, dtype=dtype)
            parts.extend([corpus] * copies)
            if rest:
                sample = rng.choice(n, rest, replace=False, shuffle=False)
                parts.append(np.sort(sample).astype(dtype) + dtype(start))
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def to_dict(self) -> dict[str, Any]:
        """What the draw depends on (JSON): sizes, weights or temperature, epoch size, counts,
        keys. A run resumed with another mixture is refused (it is in the data fingerprint)."""
        return {
            "sizes": self.sizes,
            "weights": self.weights,
            "temperature": self.temperature,
            "epoch_size": self.epoch_size,
            "counts": self.counts.tolist(),
            "keys": self.keys,
        }

    def __repr__(self) -> str:
        how = f"weights={self.weights}" if self.weights is not None else f"T={self.temperature}"
        return f"Mixture(sizes={self.sizes}, {how}, counts={self.counts.tolist()})"


_MIXTURE_STREAM = 0x6D6978  # "mix": the mixture's random stream, apart from the batcher's


def _one_pass(probabilities: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each corpus's examples in an epoch that ends when the corpus of largest
    ``probability / size`` has been seen once (:class:`Mixture`): that corpus's size, and
    ``size_k * p_j / p_k`` rounded (at most its size) for every other ``j``."""
    rates = np.divide(probabilities, sizes, out=np.zeros_like(probabilities), where=sizes > 0)
    fastest = int(np.argmax(rates))
    exact = sizes[fastest] * probabilities / probabilities[fastest]
    counts = np.minimum(np.floor(exact + 0.5), sizes).astype(np.int64)
    counts[fastest] = int(sizes[fastest])
    return counts


def _largest_remainder(probabilities: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``probabilities`` adding up to ``total`` (the largest
    fractional parts rounded up; ties to the lower index)."""
    exact = probabilities * total
    counts = np.floor(exact).astype(np.int64)
    missing = total - int(counts.sum())
    if missing > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:missing]] += 1
    return counts


def collate(
    examples: Sequence[Example], indices: Sequence[int], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The padded tensors of one batch, right-padded with ``pad_id``, int64 on the CPU.

    Returns:
        ``src (B, S)``: the sources (``S`` the longest; 0 for a decoder-only model's empty
        sources); ``tgt_in (B, T)``: ``[bos] + ids``, the decoder's input; ``tgt_out (B, T)``:
        ``ids + [eos]``, what it must predict at each position (``T = longest len(tgt) - 1``).
        ``B = len(indices)``, in the order of ``indices``.

    Examples collate themselves (:meth:`ExamplesProtocol.collate`; memory-mapped
    :class:`~attnlab.data.shards.ShardExamples` without a loop over the rows), any other
    sequence of :class:`Example` row by row.
    """
    if isinstance(examples, ExamplesProtocol):
        return examples.collate(indices, pad_id)
    return _collate_rows(examples, indices, pad_id)


def _collate_rows(
    examples: Sequence[Example], indices: Sequence[int], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`collate`, one example at a time."""
    if len(indices) == 0:
        raise ValueError("indices: expected at least one example index, got none")
    check_int(pad_id, "pad_id", 0)
    rows = [examples[i] for i in indices]
    src_len = max(len(e.src) for e in rows)
    tgt_len = max(len(e.tgt) for e in rows)
    src = np.full((len(rows), src_len), pad_id, dtype=np.int64)
    tgt_in = np.full((len(rows), tgt_len - 1), pad_id, dtype=np.int64)
    tgt_out = np.full((len(rows), tgt_len - 1), pad_id, dtype=np.int64)
    for row, example in enumerate(rows):
        length = len(example.tgt) - 1
        src[row, : len(example.src)] = example.src
        tgt_in[row, :length] = example.tgt[:-1]
        tgt_out[row, :length] = example.tgt[1:]
    return torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out)

"""Token-budget batching: examples -> batches of example indices (Vaswani et al. 2017, sec. 5.1).

The paper batches "sentence pairs ... by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens". Here a batch is a list of example indices whose *padded* size, ``len(batch) *
longest``, stays within ``max_tokens`` on each side, so the tensors a batch becomes never
exceed the budget, whatever the lengths.

* :class:`TokenBatcher` sorts examples (:mod:`attnlab.data.examples`) by length (seeded noise,
  so batches vary between epochs), packs them greedily into budget-bound batches, shuffles the
  batches, and splits each global batch among the replicas of a distributed run; with a
  :class:`~attnlab.data.mixture.Mixture`, it buckets and packs each epoch's draw.

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

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from .._checks import check_bool, check_type, is_number
from .examples import ExamplesProtocol
from .mixture import Mixture, check_int, index_dtype

__all__ = ["IndexBatches", "TokenBatcher"]


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
        self.shuffle = check_bool(shuffle, "shuffle")
        self.seed = check_int(seed, "seed", 0)
        self.num_replicas = check_int(num_replicas, "num_replicas", 1)
        self.rank = check_int(rank, "rank", 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank: expected 0 <= rank < num_replicas={num_replicas}, got {rank}")
        if not (is_number(length_noise) and 1.0 <= length_noise < float("inf")):
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
            check_type(mixture, Mixture, "mixture", "a Mixture")
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
        check_type(examples, ExamplesProtocol, "examples", "Examples")
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
        """Every replica's batches of ``epoch`` together: what one replica would get alone
        (computed once per epoch; the newest epoch is kept)."""
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
        batches = self.global_batches(epoch)
        if self.num_replicas == 1:
            return batches
        size, extra = np.divmod(batches.sizes(), self.num_replicas)
        starts = batches.starts + self.rank * size + np.minimum(self.rank, extra)
        stops = starts + size + (self.rank < extra)
        return IndexBatches(batches.order, starts, stops)

    def num_batches(self, epoch: int) -> int:
        """The number of (global) batches in ``epoch``."""
        return len(self.global_batches(epoch))

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

"""Token-budget batching: examples -> batches of padded id tensors (Vaswani et al. 2017, sec. 5.1).

The paper batches "sentence pairs ... by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens". Here a batch is a list of example indices whose *padded* size, ``len(batch) *
longest``, stays within ``max_tokens`` on each side, so the tensors a batch becomes never
exceed the budget, whatever the lengths.

* :func:`make_examples` frames id pairs for teacher forcing (``[bos] + ids + [eos]`` on the
  target) and drops pairs longer than ``max_len``; :func:`make_lm_examples` does the same for
  a decoder-only model (no source).
* :class:`TokenBatcher` sorts examples by length (seeded noise, so batches vary between
  epochs), packs them greedily into budget-bound batches, shuffles the batches, and splits
  each global batch among the replicas of a distributed run.
* :func:`collate` turns a batch into ``src (B, S)``, ``tgt_in (B, T)``, ``tgt_out (B, T)``.
* :class:`Mixture`: several corpora concatenated into one index space, drawn anew each epoch
  by weights or by temperature; :class:`TokenBatcher` then buckets and packs the draw.

An epoch's batches are held lean (:class:`IndexBatches`: one index array and the batch
boundaries, a few bytes per example), so that corpora of millions of pairs batch in seconds;
:mod:`attnlab.data.shards` gives such corpora as memory-mapped :class:`~attnlab.data.shards.
ShardExamples`, which every function here accepts as :class:`Examples`.

Example::

    examples = make_examples(list(zip(src_ids, tgt_ids)), max_len=256)
    batcher = TokenBatcher.for_examples(examples, max_tokens=4096, seed=0)
    for indices in batcher.batches(epoch=0):
        src, tgt_in, tgt_out = collate(examples, indices, pad_id=0)
        logits = model(src, tgt_in)                  # (B, T, vocab) against tgt_out (B, T)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "Example",
    "Examples",
    "IndexBatches",
    "Mixture",
    "TokenBatcher",
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


class Examples(Sequence[Example]):
    """The examples kept by :func:`make_examples`, with their lengths and the dropped count.

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


def _check_max_len(max_len: object) -> None:
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
    _check_max_len(max_len)
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
    _check_max_len(max_len)
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
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected a 1-D sequence of int lengths, got {values!r:.80}")
    if array.size and array.min() < 0:
        raise ValueError(f"{name}: lengths must be >= 0, got {int(array.min())}")
    return array.astype(np.int64)


def _check_int(value: object, name: str, minimum: int) -> int:
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


@@BATCHER@@


def collate(self, indices: Sequence[int], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
        """The padded tensors of the examples ``indices``: :func:`collate`."""
        return _collate_rows(self, indices, pad_id)


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


def _check_max_len(max_len: object) -> None:
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
    _check_max_len(max_len)
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
    _check_max_len(max_len)
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
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected a 1-D sequence of int lengths, got {values!r:.80}")
    if array.size and array.min() < 0:
        raise ValueError(f"{name}: lengths must be >= 0, got {int(array.min())}")
    return array.astype(np.int64)


def _check_int(value: object, name: str, minimum: int) -> int:
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


class TokenBatcher:
    """Batches of example indices bounded by a token budget, bucketed by length.

    A batch's padded size stays within the budget on each side:
    ``len(batch) * max(src_lengths[batch]) <= max_tokens`` and the same for the target (the
    paper's "approximately 25000 source and 25000 target tokens", sec. 5.1, counted as the
    tensors will hold them, padding included).

    How an epoch's batches are made (:meth:`batches`), deterministic in ``(seed, epoch)``:

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
    the batches are not shuffled; the result then does not depend on ``seed`` or ``epoch``.

    Distributed: with ``num_replicas > 1`` the *global* batches are exactly those of one
    replica, and each is cut into ``num_replicas`` contiguous shares (sizes differ by at most
    one example); :meth:`batches` returns this ``rank``'s shares. Every replica gets the same
    number of batches, so replicas step in lock-step; a share is empty when a global batch has
    fewer examples than replicas (a trainer must still take part in the gradient exchange).

    Args:
        src_lengths, tgt_lengths: per example, the lengths of its source and target tensors
            (:attr:`Examples.src_lengths` / ``tgt_lengths``). Source lengths may be 0 (a
            decoder-only model).
        max_tokens: the budget per side and per (global) batch; every example must fit alone.
        shuffle: bucket with noise and shuffle the batches (training) or not (evaluation).
        seed: seeds the noise and the shuffling (with the epoch).
        num_replicas, rank: the number of data-parallel replicas and this one's index.
        length_noise: width of the bucketing noise, in tokens (>= 1; see above).
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
    ) -> None:
        self.src_lengths = _as_lengths(src_lengths, "src_lengths")
        self.tgt_lengths = _as_lengths(tgt_lengths, "tgt_lengths")
        if len(self.src_lengths) != len(self.tgt_lengths):
            raise ValueError(
                f"src_lengths has {len(self.src_lengths)} entries but tgt_lengths has "
                f"{len(self.tgt_lengths)}; expected one of each per example"
            )
        self.max_tokens = _check_int(max_tokens, "max_tokens", 1)
        if not isinstance(shuffle, bool):
            raise ValueError(f"shuffle: expected a bool, got {shuffle!r}")
        self.shuffle = shuffle
        self.seed = _check_int(seed, "seed", 0)
        self.num_replicas = _check_int(num_replicas, "num_replicas", 1)
        self.rank = _check_int(rank, "rank", 0)
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
        self._cached: tuple[int, list[list[int]]] | None = None

    @classmethod
    def for_examples(cls, examples: Examples, max_tokens: int, **options: object) -> TokenBatcher:
        """A batcher over :class:`Examples` (their source and target tensor lengths)."""
        if not isinstance(examples, Examples):
            raise TypeError(f"examples: expected Examples, got {type(examples).__name__}")
        return cls(examples.src_lengths, examples.tgt_lengths, max_tokens, **options)  # type: ignore[arg-type]

    def __len__(self) -> int:
        """The number of examples."""
        return len(self.src_lengths)

    def _order(self, rng: np.random.Generator | None) -> np.ndarray:
        """Example indices in bucketing order (see the class docstring)."""
        src, tgt = self.src_lengths, self.tgt_lengths
        longer = np.maximum(src, tgt)
        if rng is None:
            return np.lexsort((np.arange(len(src)), src, tgt, longer))
        noisy = np.floor(longer + rng.uniform(0.0, self.length_noise, len(src)))
        return np.lexsort((rng.random(len(src)), src, tgt, noisy))

    def global_batches(self, epoch: int) -> list[list[int]]:
        """Every replica's batches of ``epoch`` together: what one replica would get alone."""
        return [list(batch) for batch in self._global_batches(epoch)]

    def _global_batches(self, epoch: int) -> list[list[int]]:
        """:meth:`global_batches`, computed once per epoch (the cached lists: do not modify)."""
        epoch = _check_int(epoch, "epoch", 0)
        key = epoch if self.shuffle else 0
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        rng = np.random.default_rng((self.seed, epoch)) if self.shuffle else None
        order = self._order(rng)
        src, tgt, budget = self.src_lengths, self.tgt_lengths, self.max_tokens
        batches: list[list[int]] = []
        current: list[int] = []
        longest_src = longest_tgt = 0
        for i in order.tolist():
            s, t = max(longest_src, int(src[i])), max(longest_tgt, int(tgt[i]))
            size = len(current) + 1
            if current and (size * s > budget or size * t > budget):
                batches.append(current)
                current, s, t = [], int(src[i]), int(tgt[i])
            current.append(i)
            longest_src, longest_tgt = s, t
        if current:
            batches.append(current)
        if rng is not None:
            batches = [batches[j] for j in rng.permutation(len(batches)).tolist()]
        self._cached = (key, batches)
        return batches

    def batches(self, epoch: int) -> list[list[int]]:
        """This replica's batches of ``epoch``: lists of example indices (shares of the global
        batches when ``num_replicas > 1``; possibly empty lists, see the class docstring)."""
        batches = self._global_batches(epoch)
        if self.num_replicas == 1:
            return [list(b) for b in batches]
        return [self.share(b) for b in batches]

    def share(self, batch: Sequence[int]) -> list[int]:
        """This rank's contiguous share of a global ``batch`` (``numpy.array_split``'s cut)."""
        return share(batch, self.num_replicas, self.rank)

    def num_batches(self, epoch: int) -> int:
        """The number of (global) batches in ``epoch``."""
        return len(self._global_batches(epoch))

    def padding_fraction(self, epoch: int) -> float:
        """The fraction of pad positions in the tensors this replica collates in ``epoch``
        (source and target together): ``1 - real tokens / (sum over batches of B * (S + T))``."""
        real = padded = 0
        for batch in self.batches(epoch):
            if not batch:
                continue
            s, t = self.src_lengths[batch], self.tgt_lengths[batch]
            real += int(s.sum() + t.sum())
            padded += len(batch) * int(s.max() + t.max())
        return 1.0 - real / padded if padded else 0.0


def collate(
    examples: Sequence[Example], indices: Sequence[int], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The padded tensors of one batch, right-padded with ``pad_id``, int64 on the CPU.

    Returns:
        ``src (B, S)``: the sources (``S`` the longest; 0 for a decoder-only model's empty
        sources); ``tgt_in (B, T)``: ``[bos] + ids``, the decoder's input; ``tgt_out (B, T)``:
        ``ids + [eos]``, what it must predict at each position (``T = longest len(tgt) - 1``).
        ``B = len(indices)``, in the order of ``indices``.

    :class:`Examples` collate themselves (:meth:`Examples.collate`: memory-mapped
    :class:`~attnlab.data.shards.ShardExamples` without a loop over the rows); any other
    sequence of :class:`Example` row by row.
    """
    if isinstance(examples, Examples):
        return examples.collate(indices, pad_id)
    return _collate_rows(examples, indices, pad_id)


def _collate_rows(
    examples: Sequence[Example], indices: Sequence[int], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`collate`, one example at a time."""
    if len(indices) == 0:
        raise ValueError("indices: expected at least one example index, got none")
    _check_int(pad_id, "pad_id", 0)
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

"""Training examples: id pairs framed for teacher forcing, and the padded tensors of a batch.

* :class:`ExamplesProtocol`: what training asks of examples (their lengths, their tensors, a
  fingerprint, the first out-of-vocabulary id), which the in-memory :class:`Examples` and the
  memory-mapped :class:`~attnlab.data.shards.ShardExamples` both implement.
* :func:`make_examples` frames id pairs for teacher forcing (``[bos] + ids + [eos]`` on the
  target) and drops pairs longer than ``max_len``; :func:`make_lm_examples` does the same for
  a decoder-only model (no source).
* :func:`collate` turns a batch (:class:`~attnlab.data.batching.TokenBatcher`) into
  ``src (B, S)``, ``tgt_in (B, T)``, ``tgt_out (B, T)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol, overload, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from .._checks import check_optional_int, check_type
from .mixture import Mixture, check_int

__all__ = [
    "Example",
    "Examples",
    "ExamplesProtocol",
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
            check_type(example, Example, f"examples[{i}]", "an Example")
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
    check_optional_int(max_len, "max_len")
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
    check_optional_int(max_len, "max_len")
    examples: list[Example] = []
    dropped = 0
    for i, ids in enumerate(sequences):
        tgt = _check_ids(ids, f"sequences[{i}]")
        if max_len is not None and len(tgt) + 1 > max_len:
            dropped += 1
            continue
        examples.append(Example((), (bos_id, *tgt, eos_id)))
    return Examples(examples, dropped=dropped)


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

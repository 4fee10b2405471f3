"""Prepared corpora read from disk: token-id shards, memory-mapped, as training examples.

A corpus of millions of pairs is prepared once (:mod:`attnlab.data.prepare` writes it) into
one directory of the shard format (:mod:`attnlab.data.shardformat`: ids, offsets and a
``meta.json``, complete if and only if that exists).

* :class:`TokenShards` opens one directory read-only (``np.memmap`` of each file: nothing
  is read until it is used). Training reads a batch's rows with ``os.pread`` through the
  operating system's page cache, which holds the ids once for every process that reads
  them, so that no process's resident set grows with the corpus (:meth:`TokenShards.rows`).
  It pickles as its path (DataLoader workers and the ranks of a run open the same files).
* :class:`ShardExamples` views one corpus, or several as one index space, as the examples
  (:class:`~attnlab.data.examples.ExamplesProtocol`) that ``make_examples`` would make of the same
  pairs (the same framing, the same pairs left out for ``max_len``): what the
  :class:`~attnlab.train.Trainer` and :class:`~attnlab.data.batching.TokenBatcher` take. It
  holds about 6 bytes per pair of lengths (4 more per pair where ``max_len`` drops some),
  and collates a batch with a few numpy operations and a read per row. Given
  ``weights`` or ``temperature``, each training epoch mixes its corpora anew
  (:class:`~attnlab.data.mixture.Mixture`).
* :func:`batch_loader` is a ``torch.utils.data.DataLoader`` collating an epoch's batches in
  worker processes.

Example::

    wmt = TokenShards("cache/shards/3f2a...")            # attnlab.data.prepare wrote it
    examples = ShardExamples(wmt, max_len=256)           # or [wmt, opus], temperature=5.0
    batcher = TokenBatcher.for_examples(examples, max_tokens=25_000, seed=0)
    for indices in batcher.batches(epoch=0):
        src, tgt_in, tgt_out = examples.collate(indices, pad_id=0)  # (B, S), (B, T), (B, T)
    Trainer(model, examples, valid, config, objective=TranslationObjective).train()  # the same
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch
from torch import Tensor

from .._checks import check_bool, check_optional_int
from .examples import Example, ExamplesProtocol
from .mixture import Mixture, check_int, index_dtype
from .shardformat import META_FILE, OFFSETS_DTYPE, read_meta

__all__ = ["ShardExamples", "TokenShards", "batch_loader"]

PathLike = str | os.PathLike[str]

_OFFSETS = np.dtype(OFFSETS_DTYPE)
_CHUNK = 1 << 20  # offsets read at a time when computing the lengths
_BLOCK = 64  # the offsets kept in memory: every 64th (0.125 bytes per pair and side)


class TokenShards:
    """One prepared corpus, opened read-only.

    Attributes:
        directory: the shard directory.
        meta: its ``meta.json``.
        pairs: the number of pairs (also ``len(shards)``).
        dtype: the ids' numpy dtype (little-endian uint16 or uint32).
        key: ``meta["key"]``, the preparation's fingerprint (inputs, tokenizers, filters): a
            cheap name for the data.
        src_max_id, tgt_max_id: the largest id on each side (-1 when a side has no ids).
        src_vocab, tgt_vocab: the tokenizers' vocabulary sizes.
        src_ids, tgt_ids: every id of each side, concatenated (``np.memmap``, read-only).
        src_offsets, tgt_offsets: int64 ``(pairs + 1,)`` (``np.memmap``).

    :meth:`src` and :meth:`tgt` give one pair's ids, :meth:`rows` many pairs' at once;
    :attr:`src_lengths` and :attr:`tgt_lengths` every pair's lengths (uint16 when they fit,
    else uint32; computed on first use from the offsets, read in chunks, and then held: 2
    bytes per pair and side, with every 64th offset).

    Raises:
        NotADirectoryError / FileNotFoundError: not a directory; no ``meta.json`` (not
            prepared, or a preparation that never finished).
        ValueError: another format or version, a malformed ``meta.json``, files whose sizes
            do not match it, or offsets that do not start at 0 and end at the ids' count.
    """

    def __init__(self, directory: PathLike) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            what = "no such directory" if not self.directory.exists() else "not a directory"
            error = FileNotFoundError if not self.directory.exists() else NotADirectoryError
            raise error(f"{self.directory}: {what} (expected a prepared shard directory)")
        meta_path = self.directory / META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{self.directory}: not prepared (no {META_FILE}): an interrupted preparation? "
                f"Prepare it again (attnlab.data.prepare)"
            )
        self.meta = read_meta(meta_path)
        self.pairs: int = self.meta["pairs"]
        self.dtype = np.dtype(self.meta["dtype"]).newbyteorder("<")
        self.key: str = self.meta["key"]
        self.src_max_id: int = self.meta["src_max_id"]
        self.tgt_max_id: int = self.meta["tgt_max_id"]
        self.src_vocab: int | None = self.meta.get("src_vocab")
        self.tgt_vocab: int | None = self.meta.get("tgt_vocab")
        self.src_ids, self.src_offsets = self._open("src")
        self.tgt_ids, self.tgt_offsets = self._open("tgt")
        self._descriptors: dict[str, int] = {}
        self._blocks: dict[str, np.ndarray] = {}  # every _BLOCK-th offset, read with the lengths

    def _open(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        """Map ``{side}.ids`` and ``{side}.offsets``, their sizes checked against the meta."""
        tokens = self.meta[f"{side}_tokens"]
        ids = _map(self.directory / f"{side}.ids", self.dtype, tokens, f"{side}_tokens")
        offsets = _map(self.directory / f"{side}.offsets", _OFFSETS, self.pairs + 1, "pairs + 1")
        first, last = int(offsets[0]), int(offsets[-1])
        if first != 0 or last != tokens:
            raise ValueError(
                f"{self.directory / f'{side}.offsets'}: runs from {first} to {last}, expected 0 "
                f"to {side}_tokens = {tokens} (a damaged or mismatched file)"
            )
        return ids, offsets

    def __len__(self) -> int:
        return self.pairs

    def src(self, index: int) -> np.ndarray:
        """Pair ``index``'s source ids."""
        return self._one("src", index)

    def tgt(self, index: int) -> np.ndarray:
        """Pair ``index``'s target ids."""
        return self._one("tgt", index)

    def _one(self, side: str, index: int) -> np.ndarray:
        i = int(index)
        if not -self.pairs <= i < self.pairs:
            raise IndexError(f"pair {index} out of range ({self.pairs} pairs)")
        ids, _ = self.rows(side, np.array([i % self.pairs]))
        return ids

    def rows(self, side: str, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids of ``pairs`` (pair numbers, an int array) on ``side`` (``"src"`` or
        ``"tgt"``), concatenated in that order, and each pair's length (int64).

        Where a pair starts comes from memory: every 64th offset, kept when the lengths were
        read, plus the lengths before it in its block. Its ids are read with ``os.pread``, a
        call per pair: the pages come from the page cache, shared by every process reading
        the files, without being mapped into this one. (Gathering through the memory maps
        would map the pages around each row, 2 MiB of them on kernels with large folios, and
        this process's resident set would grow to the size of the corpus within an epoch.)
        """
        lengths = self.src_lengths if side == "src" else self.tgt_lengths
        pairs = np.asarray(pairs, dtype=np.int64)
        block = pairs // _BLOCK
        within = np.arange(_BLOCK, dtype=np.int64)
        earlier = within < (pairs % _BLOCK)[:, None]  # (B, 64): the pairs before in its block
        before = np.where(earlier, block[:, None] * _BLOCK + within, 0)
        starts = self._blocks[side][block] + (lengths[before] * earlier).sum(1, dtype=np.int64)
        sizes = lengths[pairs].astype(np.int64)
        item, descriptor = self.dtype.itemsize, self._descriptor(f"{side}.ids")
        places = zip((starts * item).tolist(), (sizes * item).tolist(), strict=True)
        data = b"".join([os.pread(descriptor, size, at) for at, size in places if size])
        if len(data) != int(sizes.sum()) * item:
            raise OSError(
                f"{self.directory / f'{side}.ids'}: shorter than its {META_FILE} says (changed "
                f"since it was opened?)"
            )
        return np.frombuffer(data, self.dtype), sizes

    def _descriptor(self, name: str) -> int:
        """A read-only descriptor of file ``name``, opened once (closed with this object;
        a forked process may share it: ``pread`` does not move a file position)."""
        if name not in self._descriptors:
            descriptor = os.open(self.directory / name, os.O_RDONLY)
            self._descriptors[name] = descriptor
            weakref.finalize(self, os.close, descriptor)
        return self._descriptors[name]

    @cached_property
    def src_lengths(self) -> np.ndarray:
        """Every pair's source length, ``(pairs,)``, uint16 when they fit (else uint32)."""
        return self._lengths("src")

    @cached_property
    def tgt_lengths(self) -> np.ndarray:
        """Every pair's target length, ``(pairs,)``, uint16 when they fit (else uint32)."""
        return self._lengths("tgt")

    def _lengths(self, side: str) -> np.ndarray:
        """``np.diff`` of the offsets, read a chunk at a time with plain reads (the mapped
        offsets stay unread: training touches only the batches' rows), into uint16 until a
        length does not fit (then uint32)."""
        path = self.directory / f"{side}.offsets"
        lengths = np.empty(self.pairs, np.uint16)
        blocks = np.empty(self.pairs // _BLOCK + 1, np.int64)
        with open(path, "rb") as handle:
            for start in range(0, self.pairs, _CHUNK):
                count = min(_CHUNK, self.pairs - start)
                handle.seek(start * _OFFSETS.itemsize)
                chunk = np.fromfile(handle, _OFFSETS, count + 1)
                step = np.diff(chunk)
                if len(chunk) != count + 1 or (step < 0).any():
                    bad = start + int(np.flatnonzero(step < 0)[0]) if len(step) else start
                    raise ValueError(f"{path}: the offsets decrease at pair {bad} (damaged)")
                longest = int(step.max()) if step.size else 0
                if longest > np.iinfo(np.uint32).max:
                    raise ValueError(f"{path}: a pair longer than 2**32 - 1 tokens")
                if longest > np.iinfo(lengths.dtype).max:
                    lengths = lengths.astype(np.uint32)
                lengths[start : start + count] = step
                blocks[start // _BLOCK : (start + count - 1) // _BLOCK + 1] = chunk[:-1:_BLOCK]
        if self.pairs % _BLOCK == 0:
            blocks[-1] = self.meta[f"{side}_tokens"]
        self._blocks[side] = blocks
        return lengths

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its directory and key: unpickling maps the files again (a DataLoader
        worker shares the page cache; nothing of the corpus is copied), and refuses a
        directory prepared again since."""
        return (_reopen, (str(self.directory), self.key))

    def __repr__(self) -> str:
        return f"TokenShards({str(self.directory)!r}, {self.pairs} pairs, {self.dtype.name})"


def _reopen(directory: str, key: str) -> TokenShards:
    shards = TokenShards(directory)
    if shards.key != key:
        raise ValueError(
            f"{directory}: prepared again since it was opened (key {key[:12]}... is now "
            f"{shards.key[:12]}...)"
        )
    return shards


def _map(path: Path, dtype: np.dtype[Any], count: int, what: str) -> np.ndarray:
    """``path`` as a read-only array of ``count`` items of ``dtype``, its size checked."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing, though {META_FILE} is there") from None
    if size != count * dtype.itemsize:
        raise ValueError(
            f"{path}: {size} bytes, expected {count} x {dtype.itemsize} = "
            f"{count * dtype.itemsize} ({what} in {META_FILE}): a damaged or mismatched file"
        )
    if count == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class ShardExamples:
    """Prepared corpora as training examples, read from disk: an
    :class:`~attnlab.data.examples.ExamplesProtocol`, as the in-memory
    :class:`~attnlab.data.examples.Examples` is.

    The same examples as ``make_examples(pairs, max_len=..., bos_id=..., eos_id=...)`` over the
    corpora's pairs in order (corpus after corpus): item ``i`` is the same
    :class:`~attnlab.data.examples.Example`, ``src_lengths`` / ``tgt_lengths`` the same
    tensor lengths (``len(src)``; ``len(tgt ids) + 1``) in compact dtypes (uint16 when they
    fit), ``dropped`` the same count of pairs longer than ``max_len``, and :meth:`collate` the
    same tensors as :func:`~attnlab.data.examples.collate`. With ``lm=True``, what
    ``make_lm_examples`` makes of the target sides (empty sources).

    Memory: the lengths (2 bytes per kept pair and side, and the targets' ids counts in
    :class:`TokenShards`, 2 more; the sources' shared with it when nothing is dropped) and,
    for a corpus of which ``max_len`` drops pairs, the kept pairs' row numbers (int32: 4
    bytes). The ids stay on disk, read a batch at a time through the page cache.

    Mixing: with several corpora and ``weights`` or ``temperature``, each training epoch draws
    from each corpus anew (:class:`~attnlab.data.mixture.Mixture` over the kept pairs:
    ``mixture``), seeded by the batcher's seed and the epoch; without, every example once.

    Args:
        shards: a :class:`TokenShards` or its directory, or a sequence of them (one index
            space: corpus 0's kept pairs first).
        max_len: the longest tensor a model may see, or None to keep every pair.
        bos_id, eos_id: the target framing.
        lm: examples for a decoder-only model: the target side framed, empty sources.
        weights, temperature, epoch_size: the mixture (see
            :class:`~attnlab.data.mixture.Mixture`); none of them: no mixture.
    """

    def __init__(
        self,
        shards: TokenShards | PathLike | Sequence[TokenShards | PathLike],
        *,
        max_len: int | None,
        bos_id: int = 1,
        eos_id: int = 2,
        lm: bool = False,
        weights: Sequence[float] | None = None,
        temperature: float | None = None,
        epoch_size: int | None = None,
    ) -> None:
        check_optional_int(max_len, "max_len")
        self.bos_id = check_int(bos_id, "bos_id", 0)
        self.eos_id = check_int(eos_id, "eos_id", 0)
        self.max_len, self.lm = max_len, check_bool(lm, "lm")
        items = [shards] if isinstance(shards, (TokenShards, str, os.PathLike)) else shards
        self.shards = [s if isinstance(s, TokenShards) else TokenShards(s) for s in items]
        if not self.shards:
            raise ValueError("shards: expected at least one shard directory, got none")
        self._kept: list[np.ndarray | None] = []
        src_parts, tgt_parts, sizes = [], [], []
        self.dropped = 0
        for corpus in self.shards:
            kept, src_lengths, tgt_lengths = self._keep(corpus)
            self._kept.append(kept)
            src_parts.append(src_lengths)
            tgt_parts.append(tgt_lengths)
            sizes.append(len(tgt_lengths))
            self.dropped += len(corpus) - len(tgt_lengths)
        self.corpus_sizes = sizes
        self.corpus_starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.src_lengths = _concatenate(src_parts)
        self.tgt_lengths = _concatenate(tgt_parts)
        self._mixing = {"weights": weights, "temperature": temperature, "epoch_size": epoch_size}
        self.mixture: Mixture | None = None
        if weights is not None or temperature is not None or epoch_size is not None:
            self.mixture = Mixture(
                sizes,
                weights=weights,
                temperature=temperature,
                epoch_size=epoch_size,
                keys=[corpus.key for corpus in self.shards],
            )

    def _keep(self, corpus: TokenShards) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """The kept rows of ``corpus`` (None: all) and their source and target tensor lengths."""
        tgt = corpus.tgt_lengths
        src = np.zeros(len(corpus), np.uint16) if self.lm else corpus.src_lengths
        kept = None
        if self.max_len is not None:
            # make_examples: dropped when len(src) > max_len or len(tgt ids) + 1 > max_len.
            fits = tgt < self.max_len
            if not self.lm:
                fits &= src <= self.max_len
            if not fits.all():
                kept = np.flatnonzero(fits).astype(index_dtype(len(corpus)))
                src, tgt = src[kept], tgt[kept]
        if tgt.dtype == np.uint16 and (tgt.size == 0 or int(tgt.max()) < 0xFFFF):
            return kept, src, tgt + np.uint16(1)
        return kept, src, tgt.astype(np.uint32) + np.uint32(1)

    # -- the examples protocol -----------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.corpus_starts[-1])

    @overload
    def __getitem__(self, index: int) -> Example: ...
    @overload
    def __getitem__(self, index: slice) -> list[Example]: ...
    def __getitem__(self, index: int | slice) -> Example | list[Example]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = int(index)
        if not -len(self) <= i < len(self):
            raise IndexError(f"example {index} out of range ({len(self)} examples)")
        corpus, row = self.locate(i % len(self))
        shards = self.shards[corpus]
        src = () if self.lm else tuple(shards.src(row).tolist())
        return Example(src, (self.bos_id, *shards.tgt(row).tolist(), self.eos_id))

    def locate(self, index: int) -> tuple[int, int]:
        """Example ``index``'s corpus and its row (pair number) in that corpus's shards."""
        corpus = int(np.searchsorted(self.corpus_starts, index, side="right")) - 1
        local = index - int(self.corpus_starts[corpus])
        kept = self._kept[corpus]
        return corpus, int(kept[local]) if kept is not None else local

    def collate(self, indices: Sequence[int], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
        """The padded tensors of the examples ``indices`` (a sequence or an int array),
        int64 on the CPU, as :func:`~attnlab.data.examples.collate` makes them: ``src (B, S)``,
        ``tgt_in (B, T)`` = ``[bos] + ids``, ``tgt_out (B, T)`` = ``ids + [eos]``, right-padded
        with ``pad_id``. Gathered a corpus at a time with array operations."""
        index = np.asarray(indices)
        if index.size == 0:
            raise ValueError("indices: expected at least one example index, got none")
        check_int(pad_id, "pad_id", 0)
        if index.ndim != 1 or index.dtype.kind not in "iu":
            raise ValueError(f"indices: expected a flat sequence of ints, got {indices!r:.80}")
        index = index.astype(np.int64, copy=False)
        if index.min() < -len(self) or index.max() >= len(self):
            raise IndexError(f"indices: out of range ({len(self)} examples)")
        index = index % len(self)
        rows = len(index)
        src_width = 0 if self.lm else int(self.src_lengths[index].max())
        tgt_width = int(self.tgt_lengths[index].max())
        src = np.full((rows, src_width), pad_id, dtype=np.int64)
        tgt_in = np.full((rows, tgt_width), pad_id, dtype=np.int64)
        tgt_out = np.full((rows, tgt_width), pad_id, dtype=np.int64)
        groups = [(0, np.arange(rows), index)]  # (corpus, rows of the batch, its examples)
        if len(self.shards) > 1:
            corpus_of = np.searchsorted(self.corpus_starts, index, side="right") - 1
            groups = []
            for k in np.unique(corpus_of).tolist():
                positions = np.flatnonzero(corpus_of == k)
                groups.append((k, positions, index[positions] - self.corpus_starts[k]))
        for k, positions, local in groups:
            shards, kept = self.shards[k], self._kept[k]
            pair = kept[local] if kept is not None else local
            if not self.lm:
                ids, lengths = shards.rows("src", pair)
                at, column = _places(positions, lengths)
                src[at, column] = ids
            ids, lengths = shards.rows("tgt", pair)
            at, column = _places(positions, lengths)
            tgt_in[positions, 0] = self.bos_id
            tgt_in[at, column + 1] = ids
            tgt_out[at, column] = ids
            tgt_out[positions, lengths] = self.eos_id
        return torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out)

    def first_id_from(self, side: str, bound: int) -> int | None:
        """The first example with a ``side`` (``"src"`` or ``"tgt"``: the framed target) id
        >= ``bound``, or None (an ``lm``'s empty sources have none).

        Cheap when none has one: the framing ids are compared, and a corpus is read only if its
        meta's largest id reaches ``bound`` (then its ids are scanned in chunks, and pairs
        ``max_len`` left out do not count)."""
        if side == "src" and self.lm:
            return None
        if side == "tgt" and len(self) and max(self.bos_id, self.eos_id) >= bound:
            return 0
        for k, shards in enumerate(self.shards):
            if getattr(shards, f"{side}_max_id") < bound:
                continue
            offsets, kept = getattr(shards, f"{side}_offsets"), self._kept[k]
            for start, chunk in _chunks(shards.directory / f"{side}.ids", shards.dtype):
                hits = start + np.flatnonzero(chunk >= bound)
                if not hits.size:
                    continue
                pairs = np.unique(np.searchsorted(offsets, hits, side="right") - 1)
                if kept is not None:  # the pairs kept, as their places among the kept
                    places = np.minimum(np.searchsorted(kept, pairs), len(kept) - 1)
                    pairs = places[kept[places] == pairs] if len(kept) else pairs[:0]
                if pairs.size:
                    return int(self.corpus_starts[k]) + int(pairs[0])
        return None

    # -- what a checkpoint remembers -----------------------------------------------------------

    def _framing(self) -> dict[str, Any]:
        return dict(max_len=self.max_len, bos_id=self.bos_id, eos_id=self.eos_id, lm=self.lm)

    def describe(self) -> dict[str, Any]:
        """What these examples are (JSON): each corpus's directory, key, pairs and kept
        pairs; ``max_len``, the framing, ``lm``, the mixture. :meth:`fingerprint` hashes it
        without the directories (a corpus moved elsewhere is the same data)."""
        return {
            "corpora": [
                {"directory": str(s.directory), "key": s.key, "pairs": len(s), "kept": n}
                for s, n in zip(self.shards, self.corpus_sizes, strict=True)
            ],
            **self._framing(),
            "mixture": self.mixture.to_dict() if self.mixture is not None else None,
        }

    def fingerprint(self) -> str:
        """A short hash of :meth:`describe` without the directories: cheap (no data read)."""
        described = self.describe()
        for corpus in described["corpora"]:
            del corpus["directory"]
        text = json.dumps(described, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its shards' directories and options (a few hundred bytes): a DataLoader
        worker under ``spawn`` recomputes the lengths; under ``fork`` it shares them."""
        return (_rebuild, (self.shards, {**self._framing(), **self._mixing}))

    def __repr__(self) -> str:
        corpora = ", ".join(str(s.directory) for s in self.shards)
        return f"ShardExamples({len(self)} examples, {self.dropped} dropped; {corpora})"


def _chunks(path: Path, dtype: np.dtype[Any]) -> Iterable[tuple[int, np.ndarray]]:
    """``path``'s items of ``dtype`` by chunks of 16 Mi, read (not mapped): ``(first, items)``."""
    start, count = 0, _CHUNK * 16
    with open(path, "rb") as handle:
        while True:
            chunk = np.fromfile(handle, dtype, count)
            if not chunk.size:
                return
            yield start, chunk
            start += chunk.size


def _rebuild(shards: list[TokenShards], options: dict[str, Any]) -> ShardExamples:
    return ShardExamples(shards, **options)


def _concatenate(parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` as one array (the one part itself, uncopied), in the widest of their dtypes."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts).astype(np.result_type(*parts), copy=False)


def _places(rows: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the ids of pairs of ``lengths``, concatenated, go in a batch: ``(row, column)``
    of each, flat (pair ``j``'s ids in row ``rows[j]``, columns ``0 .. lengths[j] - 1``), so
    that ``out[row, column] = ids`` writes them."""
    at = np.repeat(rows, lengths)
    firsts = np.cumsum(lengths) - lengths  # where each pair's ids begin among all of them
    column = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(firsts, lengths)
    return at, column


class _Collated:
    """A map-style dataset for ``DataLoader(batch_sampler=batches)``: ``__getitems__`` turns a
    batch's indices into its tensors (None for an empty share). Pickles as the examples (a
    few hundred bytes) and the pad id."""

    def __init__(self, examples: ExamplesProtocol, pad_id: int) -> None:
        self.examples, self.pad_id = examples, pad_id

    def __len__(self) -> int:
        return len(self.examples)

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor, Tensor] | None:
        return self.examples.collate(indices, self.pad_id) if len(indices) else None

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, Tensor]:
        return self.examples.collate([index], self.pad_id)


def _as_is(batch: Any) -> Any:
    return batch


def batch_loader(
    examples: ExamplesProtocol,
    batches: Iterable[Sequence[int]],
    *,
    pad_id: int,
    num_workers: int = 0,
    **options: Any,
) -> torch.utils.data.DataLoader[Any]:
    """A ``DataLoader`` yielding the tensors of ``batches`` in order: ``(src, tgt_in,
    tgt_out)`` per batch (None for an empty share), collated in ``num_workers`` processes.

    The batches stay in this process (the loader sends each worker a batch's indices); the
    workers get the examples pickled, which for :class:`ShardExamples` is their directories
    and options: each opens the same files, and the corpus is never copied. ``options`` go to the
    ``DataLoader`` (``prefetch_factor``, ``multiprocessing_context``, ``pin_memory``...).
    """
    return torch.utils.data.DataLoader(
        _Collated(examples, pad_id),  # type: ignore[arg-type]
        batch_sampler=batches,  # type: ignore[arg-type]
        collate_fn=_as_is,
        num_workers=num_workers,
        **options,
    )

"""The encoding workers of a preparation: chunks of raw lines in, each line's cleaning reason
and the kept pairs' ids out, in a pool of spawned processes (or in this process, for one).

A worker is given the tokenizers once, as files it loads (:func:`attnlab.data.tokens.
load_tokenizer`, their fingerprints checked), and the options; it decodes, strips, filters
and encodes each chunk (:class:`Encoder`). :func:`encoded` yields the chunks in order, with at
most two per worker in flight, so that memory stays bounded whatever the corpus size.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import clean
from .clean import CleaningOptions
from .textfiles import decode_lines

__all__ = ["ENCODE_BATCH", "Chunk", "Encoder", "encoded", "encoding_pool", "usable_cores"]

#: Lines a worker hands the tokenizer at once (its memory, not its speed: encoding is per line).
ENCODE_BATCH = 2048


@dataclass
class Chunk:
    """One encoded chunk: every line's reason code, and the candidates' ids (kept so far)."""

    index: int
    codes: np.ndarray  # uint8, one per line
    src_ids: np.ndarray
    src_lengths: np.ndarray  # int64, one per candidate
    tgt_ids: np.ndarray
    tgt_lengths: np.ndarray
    hashes: np.ndarray  # uint64, one per candidate (empty without the duplicate filter)


class Encoder:
    """Decodes, strips, filters and encodes chunks (in a worker, or in this process).
    ``config``: ``{"filters": CleaningOptions.to_dict(), "dtype", "paths", "chunk_lines"}``."""

    def __init__(self, src: Any, tgt: Any, config: dict[str, Any]) -> None:
        self.src, self.tgt = src, tgt
        self.options = CleaningOptions(**config["filters"])
        self.dtype = np.dtype(config["dtype"]).newbyteorder("<")
        self.paths = config["paths"]
        self.chunk_lines = config["chunk_lines"]

    def _encode(self, tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # As the tokenizer encodes: a Marian source side keeps its </s> (its add_eos), exactly
        # what the in-memory path gives the model. ENCODE_BATCH lines at a time: a whole
        # chunk's encodings and id lists at once held 150-250 MB more in each worker.
        ids, lengths = [], []
        for start in range(0, len(texts), ENCODE_BATCH):
            rows = tokenizer.encode_batch(texts[start : start + ENCODE_BATCH])
            lengths.append(np.fromiter(map(len, rows), np.int64, count=len(rows)))
            total = int(lengths[-1].sum())
            ids.append(np.fromiter(itertools.chain.from_iterable(rows), self.dtype, count=total))
        if not ids:
            return np.empty(0, self.dtype), np.empty(0, np.int64)
        return np.concatenate(ids), np.concatenate(lengths)

    def __call__(self, index: int, src_data: bytes, tgt_data: bytes) -> Chunk:
        first = index * self.chunk_lines + 1
        src = [line.strip() for line in decode_lines(src_data, self.paths[0], first)]
        tgt = [line.strip() for line in decode_lines(tgt_data, self.paths[1], first)]
        if len(src) != len(tgt):
            raise ValueError(
                f"{self.paths[0]}, {self.paths[1]}: the files changed while being read "
                f"(lines {first:,}.. differ in number)"
            )
        codes = clean.text_reasons(src, tgt, self.options)
        candidates = np.flatnonzero(codes == clean.KEPT)
        if len(candidates) < len(src):
            src = [src[i] for i in candidates]
            tgt = [tgt[i] for i in candidates]
        src_ids, src_lengths = self._encode(self.src, src)
        tgt_ids, tgt_lengths = self._encode(self.tgt, tgt)
        sub = clean.length_reasons(
            np.zeros(len(candidates), np.uint8), src_lengths, tgt_lengths, self.options
        )
        codes[candidates] = sub
        keep = sub == clean.KEPT
        if not keep.all():
            src_ids = src_ids[np.repeat(keep, src_lengths)]
            tgt_ids = tgt_ids[np.repeat(keep, tgt_lengths)]
            src_lengths, tgt_lengths = src_lengths[keep], tgt_lengths[keep]
            src = [text for text, k in zip(src, keep, strict=True) if k]
            tgt = [text for text, k in zip(tgt, keep, strict=True) if k]
        hashes = (
            clean.pair_hashes(src, tgt) if self.options.drop_duplicates else np.empty(0, np.uint64)
        )
        return Chunk(index, codes, src_ids, src_lengths, tgt_ids, tgt_lengths, hashes)


def _saved(tokenizer: Any, spill: Path) -> tuple[str, str]:
    """``(file, fingerprint)``: ``tokenizer`` saved under ``spill``, for a worker to load."""
    fingerprint = tokenizer.fingerprint()
    path = spill / f"{fingerprint}.json"
    if not path.exists():
        tokenizer.save(path)
    return str(path), fingerprint


def _load(saved: tuple[str, str]) -> Any:
    from .tokens import load_tokenizer

    path, fingerprint = saved
    tokenizer = load_tokenizer(path)
    if tokenizer.fingerprint() != fingerprint:
        raise RuntimeError("a worker's copy of the tokenizer differs from the original")
    return tokenizer


_WORKER: Encoder | None = None


def _exit_with_parent() -> None:
    """End this worker when the process that started it ends, however it ends (a pool's
    workers would otherwise wait forever for work from a parent killed by SIGKILL)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="attnlab-parent-watch", daemon=True).start()


def _init_worker(src: tuple[str, str], tgt: tuple[str, str] | None, config: dict[str, Any]) -> None:
    global _WORKER
    _exit_with_parent()
    # One thread per worker process: the processes are the parallelism.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    src_tokenizer = _load(src)
    tgt_tokenizer = src_tokenizer if tgt is None else _load(tgt)
    _WORKER = Encoder(src_tokenizer, tgt_tokenizer, config)


def _work(index: int, src_data: bytes, tgt_data: bytes) -> Chunk:
    assert _WORKER is not None
    return _WORKER(index, src_data, tgt_data)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the system tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def encoded(
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    config: dict[str, Any],
    chunks: Iterator[tuple[bytes, bytes]],
    workers: int,
) -> Iterator[Chunk]:
    """The encoded chunks in order: in this process with one worker, else in a pool of
    spawned processes (each given the tokenizers once) with at most two chunks per worker in
    flight."""
    if workers == 1:
        encoder = Encoder(src_tokenizer, tgt_tokenizer, config)
        for index, (src_data, tgt_data) in enumerate(chunks):
            yield encoder(index, src_data, tgt_data)
        return
    with encoding_pool(src_tokenizer, tgt_tokenizer, config, workers) as pool:
        pending: deque[concurrent.futures.Future[Chunk]] = deque()
        try:
            for index, (src_data, tgt_data) in enumerate(chunks):
                pending.append(pool.submit(_work, index, src_data, tgt_data))
                del src_data, tgt_data
                while len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


@contextlib.contextmanager
def encoding_pool(
    src_tokenizer: Any, tgt_tokenizer: Any, config: dict[str, Any], workers: int
) -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """``workers`` spawned processes, each loading the tokenizers once (from files saved for
    them) and encoding with an :class:`Encoder` of ``config``. A spawned process imports the
    main module (the ``attnlab`` script imports :mod:`attnlab.cli`) and this one: neither
    loads torch, so a worker holds its tokenizers and a chunk, not a copy of torch."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="attnlab-tokenizers-") as spill:
        src = _saved(src_tokenizer, Path(spill))
        tgt = None if tgt_tokenizer is src_tokenizer else _saved(tgt_tokenizer, Path(spill))
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(src, tgt, config),
        ) as pool:
            yield pool

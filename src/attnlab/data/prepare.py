"""Prepare a parallel corpus once, as token-id shards on disk, for training on any size.

:func:`prepare_corpus` reads two line-aligned files (plain or gzip) in chunks, encodes each
chunk in worker processes (:mod:`attnlab.data.workers`), applies the cleaning filters
(:mod:`attnlab.data.clean`) and writes the kept pairs' ids to a shard directory
(:mod:`attnlab.data.shardformat`); memory stays bounded (a few chunks and 8 bytes per kept pair
for the duplicate filter) whatever the corpus size. :func:`cached_corpus` does the same under a
cache directory keyed by the inputs' digests, the tokenizers and the options (:func:`shard_key`),
and returns the directory at once when it is already there; the files' digests are remembered
there too (:data:`~attnlab.data.textfiles.DIGESTS_FILE`), so that a later start does not read an
unchanged corpus again. The tokenizers are trained on a sample of the same files
(:mod:`attnlab.data.tokenizer_sample`); :mod:`attnlab.data.shards` reads the directories.

Several processes (the ranks of a ``torchrun`` run) share one preparation: the first prepares,
and the others call :func:`cached_tokenizers` and :func:`cached_corpus` with ``wait``
(:func:`attnlab.data.progress.wait_until`).

A directory is built under a sibling name ``<dir>.partial-<pid>-<hex>``, every file flushed to
disk, then ``meta.json`` written, then renamed into place in one step; a killed preparation
leaves only a ``.partial-`` directory, which the next run removes once its process is gone, and
starts over. Lines are stripped of surrounding white space before they are filtered and
encoded, as :func:`attnlab.data.corpora.parallel_files` strips them. The same inputs,
tokenizers and options give the same bytes, whatever the number of workers.

Example::

    src_tok, tgt_tok = train_tokenizer_on_sample("train.en.gz", "train.de.gz", 8000)
    result = cached_corpus("train.en.gz", "train.de.gz", src_tok, tgt_tok,
                           progress=progress_printer("train"))
    print(result.summary)  # cleaning: kept ... of ... pairs; dropped ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._checks import check_int, check_optional_int, check_type
from .._io import fsync_dir, fsync_file, replace_dir, write_json
from . import clean
from .clean import CleaningOptions
from .progress import Progress, wait_until
from .shardformat import (
    FORMAT,
    META_FILE,
    OFFSETS_DTYPE,
    SHARD_FILES,
    SRC_IDS,
    SRC_OFFSETS,
    TGT_IDS,
    TGT_OFFSETS,
    VERSION,
    cache_root,
    id_dtype,
    is_complete,
    load_meta,
    shard_key,
)
from .textfiles import FileInfo, check_parallel, line_chunks
from .workers import encoded, usable_cores

__all__ = [
    "CHUNK_LINES",
    "PreparedCorpus",
    "cached_corpus",
    "prepare_corpus",
]

PathLike = str | os.PathLike
#: Lines per chunk: what one worker encodes at a time.
CHUNK_LINES = 50_000
_PARTIAL = ".partial-"


@dataclass(frozen=True)
class PreparedCorpus:
    """A prepared corpus: its shard ``directory``, the ``pairs`` kept of the ``lines`` read,
    the ``dropped`` counts by reason, the ``seconds`` it took (this call), whether it came
    from the cache (``cached``), the cleaning ``summary`` line, and its ``meta``."""

    directory: Path
    pairs: int
    lines: int
    dropped: dict[str, int]
    seconds: float
    cached: bool
    summary: str
    meta: dict[str, Any]


def _result(directory: Path, meta: dict[str, Any], seconds: float, cached: bool) -> PreparedCorpus:
    options = CleaningOptions(**meta["filters"])
    lines = int(meta["inputs"][0]["lines"])
    dropped = {k: int(v) for k, v in meta["dropped"].items()}
    return PreparedCorpus(
        directory=directory,
        pairs=int(meta["pairs"]),
        lines=lines,
        dropped=dropped,
        seconds=seconds,
        cached=cached,
        summary=clean.summary(lines, dropped, options),
        meta=meta,
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove_stale_partials(directory: Path) -> None:
    """Remove ``<directory>.partial-<pid>-<hex>`` siblings whose process is gone."""
    pattern = re.compile(re.escape(directory.name + _PARTIAL) + r"(\d+)-[0-9a-f]+")
    with contextlib.suppress(FileNotFoundError):
        for entry in directory.parent.iterdir():
            match = pattern.fullmatch(entry.name)
            if match and int(match.group(1)) != os.getpid() and not _pid_alive(int(match[1])):
                shutil.rmtree(entry, ignore_errors=True)


def _chunks(src: FileInfo, tgt: FileInfo, chunk_lines: int) -> Iterator[tuple[bytes, bytes]]:
    pairs = itertools.zip_longest(
        line_chunks(src.path, chunk_lines), line_chunks(tgt.path, chunk_lines)
    )
    for src_data, tgt_data in pairs:
        if src_data is None or tgt_data is None:
            raise ValueError(
                f"{src.path}, {tgt.path}: the files changed while being read (their line "
                f"counts no longer match)"
            )
        yield src_data, tgt_data


def _write(
    partial: Path,
    infos: tuple[FileInfo, FileInfo],
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    options: CleaningOptions,
    key: str,
    workers: int,
    chunk_lines: int,
    progress: Progress | None,
) -> dict[str, Any]:
    """Fill ``partial`` with the shard files, meta.json last; return the meta."""
    src_info, tgt_info = infos
    src_vocab, tgt_vocab = src_tokenizer.vocab_size, tgt_tokenizer.vocab_size
    dtype = id_dtype(src_vocab, tgt_vocab)
    on_disk = np.dtype(dtype).newbyteorder("<")
    total = src_info.lines
    counts = np.zeros(len(clean.REASONS) + 1, np.int64)
    seen = clean.SeenHashes()
    src_max = tgt_max = -1
    src_tokens = tgt_tokens = 0
    pairs = 0
    started = time.perf_counter()
    config = {
        "filters": options.to_dict(),
        "dtype": dtype,
        "paths": (src_info.path, tgt_info.path),
        "chunk_lines": chunk_lines,
    }
    files = {name: open(partial / name, "wb") for name in SHARD_FILES[:-1]}  # noqa: SIM115
    try:
        zero = np.zeros(1, OFFSETS_DTYPE).tobytes()
        files[SRC_OFFSETS].write(zero)
        files[TGT_OFFSETS].write(zero)
        done = 0
        chunks = _chunks(src_info, tgt_info, chunk_lines)
        for chunk in encoded(src_tokenizer, tgt_tokenizer, config, chunks, workers):
            codes = chunk.codes
            src_ids, src_lengths = chunk.src_ids, chunk.src_lengths
            tgt_ids, tgt_lengths = chunk.tgt_ids, chunk.tgt_lengths
            if options.drop_duplicates and len(chunk.hashes):
                new = seen.first_seen(chunk.hashes)
                if not new.all():
                    candidates = np.flatnonzero(codes == clean.KEPT)
                    codes[candidates[~new]] = clean.DUPLICATE
                    src_ids = src_ids[np.repeat(new, src_lengths)]
                    tgt_ids = tgt_ids[np.repeat(new, tgt_lengths)]
                    src_lengths, tgt_lengths = src_lengths[new], tgt_lengths[new]
            counts += np.bincount(codes, minlength=len(counts))
            files[SRC_IDS].write(src_ids.astype(on_disk, copy=False).tobytes())
            files[TGT_IDS].write(tgt_ids.astype(on_disk, copy=False).tobytes())
            src_ends = src_tokens + np.cumsum(src_lengths, dtype=np.int64)
            tgt_ends = tgt_tokens + np.cumsum(tgt_lengths, dtype=np.int64)
            files[SRC_OFFSETS].write(src_ends.astype(OFFSETS_DTYPE).tobytes())
            files[TGT_OFFSETS].write(tgt_ends.astype(OFFSETS_DTYPE).tobytes())
            src_tokens += int(src_lengths.sum())
            tgt_tokens += int(tgt_lengths.sum())
            pairs += len(src_lengths)
            if len(src_ids):
                src_max = max(src_max, int(src_ids.max()))
            if len(tgt_ids):
                tgt_max = max(tgt_max, int(tgt_ids.max()))
            done += len(codes)
            if progress is not None:
                elapsed = max(time.perf_counter() - started, 1e-9)
                rate = done / elapsed
                progress(done, total, rate, (total - done) / rate if rate else float("inf"))
        if done != total:
            raise ValueError(
                f"{src_info.path}: the file changed while being read ({done:,} lines, "
                f"{total:,} before)"
            )
    finally:
        for handle in files.values():
            handle.close()
    for name in SHARD_FILES[:-1]:
        fsync_file(partial / name)
    dropped = {reason: int(counts[i + 1]) for i, reason in enumerate(clean.REASONS)}
    dropped = {reason: dropped[reason] for reason in options.enabled()}
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "pairs": pairs,
        "dtype": dtype,
        "src_vocab": src_vocab,
        "tgt_vocab": tgt_vocab,
        "src_max_id": src_max,
        "tgt_max_id": tgt_max,
        "src_tokens": src_tokens,
        "tgt_tokens": tgt_tokens,
        "key": key,
        "inputs": [src_info.to_dict(), tgt_info.to_dict()],
        "filters": options.to_dict(),
        "dropped": dropped,
        "tokenizers": {"src": src_tokenizer.fingerprint(), "tgt": tgt_tokenizer.fingerprint()},
    }
    write_json(partial / META_FILE, meta)
    fsync_dir(partial)
    return meta


def _checked(cleaning: CleaningOptions | None, src: object, tgt: object) -> CleaningOptions:
    """The cleaning options (default: every filter on), the tokenizers checked."""
    options = CleaningOptions() if cleaning is None else cleaning
    check_type(options, CleaningOptions, "cleaning", "CleaningOptions or None")
    for name, tokenizer in (("src_tokenizer", src), ("tgt_tokenizer", tgt)):
        for attribute in ("encode_batch", "fingerprint", "vocab_size"):
            if not hasattr(tokenizer, attribute):
                raise TypeError(f"{name}: expected a tokenizer, got {type(tokenizer).__name__}")
    return options


def _absolute(info: FileInfo) -> FileInfo:
    return FileInfo(os.path.abspath(info.path), info.sha256, info.bytes, info.lines)


def prepare_corpus(
    src_path: PathLike,
    tgt_path: PathLike,
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    directory: PathLike,
    *,
    cleaning: CleaningOptions | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    name: str = "train",
    chunk_lines: int = CHUNK_LINES,
    _infos: tuple[FileInfo, FileInfo] | None = None,
    _replace: bool = True,
) -> PreparedCorpus:
    """Encode the line-aligned files ``src_path`` and ``tgt_path`` (plain or gzip) into the
    shard directory ``directory`` (replacing one already there), cleaning as ``cleaning``
    says (default :class:`~attnlab.data.clean.CleaningOptions`: every filter on).

    The files are checked first (:func:`~attnlab.data.textfiles.check_parallel`: readable,
    UTF-8, the same number of lines; ``name`` starts the message), then read in chunks of
    ``chunk_lines`` lines, encoded by ``workers`` processes (default: every core this process
    may use; 1 encodes here), filtered and written as they come. ``progress``, if given, is
    called after each chunk with ``(lines_done, lines_total, lines_per_s, eta_s)``
    (:func:`progress_printer` prints them). Stale ``.partial-`` directories of dead
    processes beside ``directory`` are removed.

    Returns:
        A :class:`PreparedCorpus` (its directory, pairs kept, dropped by reason, seconds).

    Raises:
        ValueError: a file is missing, unreadable, not UTF-8 or of another length than the
            other (before any work); bad options.
    """
    started = time.perf_counter()
    options = _checked(cleaning, src_tokenizer, tgt_tokenizer)
    workers = check_optional_int(workers, "workers")
    workers = usable_cores() if workers is None else workers
    check_int(chunk_lines, "chunk_lines")
    infos = _infos or check_parallel(src_path, tgt_path, name)
    infos = (_absolute(infos[0]), _absolute(infos[1]))
    directory = Path(directory)
    key = shard_key(infos, (src_tokenizer.fingerprint(), tgt_tokenizer.fingerprint()), options)
    directory.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(directory)
    partial = directory.with_name(f"{directory.name}{_PARTIAL}{os.getpid()}-{secrets.token_hex(4)}")
    partial.mkdir()
    try:
        meta = _write(
            partial,
            infos,
            src_tokenizer,
            tgt_tokenizer,
            options,
            key,
            workers,
            chunk_lines,
            progress,
        )
        if not _replace and is_complete(directory):  # another process finished it first
            shutil.rmtree(partial, ignore_errors=True)
            existing = load_meta(directory)
            if existing is not None and existing.get("key") == key:
                return _result(directory, existing, time.perf_counter() - started, cached=True)
        replace_dir(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return _result(directory, meta, time.perf_counter() - started, cached=False)


def cached_corpus(
    src_path: PathLike,
    tgt_path: PathLike,
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    *,
    cleaning: CleaningOptions | None = None,
    cache_dir: PathLike | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    name: str = "train",
    chunk_lines: int = CHUNK_LINES,
    wait: Callable[[str], object] | None = None,
) -> PreparedCorpus:
    """The shard directory of these files, tokenizers and options under ``cache_dir``
    (default :func:`default_cache_dir`), named by its :func:`shard_key`: returned at once when
    it is complete there (``cached=True``; the files' digests come from the cache's
    :data:`~attnlab.data.textfiles.DIGESTS_FILE` when they have not changed, else the files
    are read once for them), else made by :func:`prepare_corpus` (same arguments).

    ``wait`` (the other ranks of a run whose first rank prepares): prepare nothing, but wait
    for the directory to be complete, without a deadline, passing ``wait`` a line that says
    why at once and then every minute."""
    started = time.perf_counter()
    options = _checked(cleaning, src_tokenizer, tgt_tokenizer)
    root = cache_root(cache_dir)
    infos = check_parallel(src_path, tgt_path, name, utf8=False, cache_dir=root)
    key = shard_key(infos, (src_tokenizer.fingerprint(), tgt_tokenizer.fingerprint()), options)
    directory = root / key

    def complete() -> dict[str, Any] | None:
        try:
            meta = load_meta(directory)
        except ValueError:
            return None  # an older format: prepared again, in its place
        return meta if meta is not None and meta.get("key") == key else None

    meta = complete()
    if meta is None and wait is not None:
        meta = wait_until(complete, f"the shards of {name} in {directory}", wait)
    if meta is not None:
        return _result(directory, meta, time.perf_counter() - started, cached=True)
    infos = check_parallel(src_path, tgt_path, name, cache_dir=root)  # UTF-8, before the work
    result = prepare_corpus(
        src_path,
        tgt_path,
        src_tokenizer,
        tgt_tokenizer,
        directory,
        cleaning=options,
        workers=workers,
        progress=progress,
        name=name,
        chunk_lines=chunk_lines,
        _infos=infos,
        _replace=False,
    )
    return dataclasses.replace(result, seconds=time.perf_counter() - started)

"""Prepare a parallel corpus once, as token-id shards on disk, for training on any size.

:func:`prepare_corpus` reads two line-aligned files (plain or gzip) in chunks, encodes each
chunk in worker processes, applies the cleaning filters (:mod:`attnlab.data.clean`) and writes
the kept pairs' ids to a shard directory; memory stays bounded (a few chunks and 8 bytes per
kept pair for the duplicate filter) whatever the corpus size. :func:`cached_corpus` does the
same under a cache directory keyed by the inputs' digests, the tokenizers and the options
(:func:`shard_key`), and returns the directory at once when it is already there; the files'
digests are remembered there too (:data:`~attnlab.data.textfiles.DIGESTS_FILE`), so that a
later start does not read an unchanged corpus again. :func:`train_tokenizer_on_sample` trains
the BPE tokenizer on a bounded, seeded sample of lines (several corpora: in the shares of
their mixture). :mod:`attnlab.data.shards` reads the directories.

Several processes (the ranks of a ``torchrun`` run) share one preparation: the first prepares,
and the others call :func:`cached_tokenizers` and :func:`cached_corpus` with ``wait``: they
wait for the cache to hold what the first one makes, without a deadline, and say so every
minute.

The shard format (version 1), one directory per prepared corpus:

* ``src.ids``, ``tgt.ids``: the kept pairs' token ids, concatenated, little-endian, of
  ``meta["dtype"]`` (``uint16`` when both vocabularies have at most 65,536 ids, else
  ``uint32``); the ids the tokenizer's ``encode`` gives (no bos / eos framing of
  the target; a SentencePiece source side keeps its own ``</s>``, its ``add_eos``).
* ``src.offsets``, ``tgt.offsets``: little-endian int64, ``pairs + 1`` of them: pair ``i``'s
  ids are ``ids[offsets[i]:offsets[i + 1]]``, ``offsets[0] == 0``.
* ``meta.json``: ``{"format": "attnlab-shards", "version": 1, "pairs", "dtype", "src_vocab",
  "tgt_vocab", "src_max_id", "tgt_max_id" (-1 without ids), "src_tokens", "tgt_tokens",
  "key", "inputs": [{"path", "sha256", "bytes", "lines"}, ...], "filters", "dropped",
  "tokenizers": {"src", "tgt"}}`` (fingerprints).

A directory is complete if and only if its ``meta.json`` exists (:func:`load_meta`): it is
built under a sibling name ``<dir>.partial-<pid>-<hex>``, every file flushed to disk, then
``meta.json`` written, then renamed into place in one step; a killed preparation leaves only
a ``.partial-`` directory, which the next run removes once its process is gone, and starts
over. Lines are stripped of surrounding white space before they are filtered and encoded,
as :func:`attnlab.data.corpora.parallel_files` strips them. The same inputs, tokenizers and
options give the same bytes, whatever the number of workers.

Example::

    src_tok, tgt_tok = train_tokenizer_on_sample("train.en.gz", "train.de.gz", 8000)
    result = cached_corpus("train.en.gz", "train.de.gz", src_tok, tgt_tok,
                           progress=progress_printer("train"))
    print(result.summary)  # cleaning: kept ... of ... pairs; dropped ...
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .._checks import check_int, check_optional_int
from .._io import fsync_dir, fsync_file, replace_dir, write_json
from . import clean
from .clean import CleaningOptions
from .shards import FORMAT, META_FILE, VERSION  # the reader's format, written here
from .textfiles import FileInfo, check_parallel, decode_lines, iter_lines, line_chunks
from .textfiles import count_lines as _count_lines
from .textfiles import reservoir_sample as _reservoir_sample

__all__ = [
    "CHUNK_LINES",
    "DEFAULT_SAMPLE_SIZE",
    "FORMAT",
    "META_FILE",
    "OFFSETS_DTYPE",
    "SHARD_FILES",
    "SRC_IDS",
    "SRC_OFFSETS",
    "TGT_IDS",
    "TGT_OFFSETS",
    "VERSION",
    "PreparedCorpus",
    "cache_root",
    "cached_corpus",
    "cached_tokenizers",
    "default_cache_dir",
    "format_progress",
    "id_dtype",
    "is_complete",
    "load_meta",
    "prepare_corpus",
    "progress_printer",
    "shard_key",
    "train_tokenizer_on_sample",
]

PathLike = str | os.PathLike
Progress = Callable[[int, int, float, float], object]

SRC_IDS, TGT_IDS = "src.ids", "tgt.ids"
SRC_OFFSETS, TGT_OFFSETS = "src.offsets", "tgt.offsets"
#: What the ids are, part of the cache key: each side as its tokenizer's ``encode`` gives it
#: (a SentencePiece source keeps its ``</s>``; shards of an earlier build that left it out are
#: not reused).
ENCODING = "as-encoded"
#: Every file of a complete shard directory; ``meta.json`` (the last) marks it complete.
SHARD_FILES = (SRC_IDS, SRC_OFFSETS, TGT_IDS, TGT_OFFSETS, META_FILE)
#: The offsets' numpy dtype: little-endian int64.
OFFSETS_DTYPE = "<i8"
#: Lines per chunk: what one worker encodes at a time.
CHUNK_LINES = 50_000
#: The tokenizer's training sample, in lines of each file (``[tokenizer] sample_size``).
DEFAULT_SAMPLE_SIZE = 1_000_000
_PARTIAL = ".partial-"
_UINT16_VOCAB = 65_536
#: A process that waits for another's preparation looks every WAIT_POLL_S seconds, and says
#: why it waits at once and then every WAIT_NOTE_S seconds.
WAIT_POLL_S = 1.0
WAIT_NOTE_S = 60.0


def id_dtype(src_vocab: int, tgt_vocab: int) -> str:
    """``"uint16"`` when both vocabularies have at most 65,536 ids, else ``"uint32"``."""
    return "uint16" if max(src_vocab, tgt_vocab) <= _UINT16_VOCAB else "uint32"


def default_cache_dir() -> Path:
    """Where :func:`cached_corpus` keeps shards: ``$ATTNLAB_CACHE/shards``, else
    ``$XDG_CACHE_HOME/attnlab/shards``, else ``~/.cache/attnlab/shards``."""
    if os.environ.get("ATTNLAB_CACHE"):
        return Path(os.environ["ATTNLAB_CACHE"]).expanduser() / "shards"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "attnlab" / "shards"


def cache_root(cache_dir: PathLike | None = None) -> Path:
    """``cache_dir``, or :func:`default_cache_dir` when None: where shards, tokenizers and the
    files' digests are kept."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def _wait_until(ready: Callable[[], Any], what: str, say: Callable[[str], object]) -> Any:
    """Poll ``ready()`` until it returns something other than None, and return that, without a
    deadline: ``say`` hears why at once, then every :data:`WAIT_NOTE_S` seconds. (Another
    process prepares ``what``; under ``torchrun`` the launcher ends this one if that fails.)"""
    started = time.monotonic()
    said = -float("inf")
    while True:
        found = ready()
        if found is not None:
            return found
        now = time.monotonic()
        if now - said >= WAIT_NOTE_S:
            waited = f" ({_duration(now - started)} so far)" if now > started + 1 else ""
            say(f"waiting for rank 0 to prepare {what}, without a time limit{waited}")
            said = now
        time.sleep(WAIT_POLL_S)


def shard_key(
    inputs: Sequence[str | FileInfo],
    tokenizers: Sequence[str],
    cleaning: CleaningOptions | dict[str, Any],
    version: int = VERSION,
) -> str:
    """The cache key of a preparation: a SHA-256 hex digest of the inputs' SHA-256 digests
    (strings, or :class:`~attnlab.data.textfiles.FileInfo`), the tokenizers' fingerprints
    (source, target), the cleaning options, the format version and what the ids are
    (:data:`ENCODING`). Paths are not part of it:
    the same content elsewhere hits the cache."""
    digests = [item.sha256 if isinstance(item, FileInfo) else item for item in inputs]
    filters = cleaning.to_dict() if isinstance(cleaning, CleaningOptions) else dict(cleaning)
    data = {
        "format": FORMAT,
        "version": version,
        "inputs": digests,
        "tokenizers": list(tokenizers),
        "filters": filters,
        "ids": ENCODING,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def load_meta(directory: PathLike) -> dict[str, Any] | None:
    """The ``meta.json`` of a complete shard directory, or None when there is none (not
    prepared, or a preparation that never finished).

    Raises:
        ValueError: the file is not a shard directory's meta (another format, a newer
            version, not JSON).
    """
    path = Path(directory) / META_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a shard directory's meta.json ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a shard directory's meta.json (format is not {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise ValueError(
            f"{path}: shard format version {meta.get('version')!r}; this attnlab reads "
            f"version {VERSION} (prepare the corpus again)"
        )
    return meta


def is_complete(directory: PathLike) -> bool:
    """Whether ``directory`` is a complete shard directory of this format version."""
    try:
        return load_meta(directory) is not None
    except ValueError:
        return False


# -- progress ----------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    """``45 s``, ``1 min 20 s``, ``2 h 05 min``."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_progress(name: str, done: int, total: int, lines_per_s: float, eta_s: float) -> str:
    """``preparing train: 1,200,000 / 4,500,000 lines (26.7%), 41,000 lines/s, ETA 1 min
    20 s``."""
    percent = 100.0 * done / total if total else 100.0
    return (
        f"preparing {name}: {done:,} / {total:,} lines ({percent:.1f}%), "
        f"{lines_per_s:,.0f} lines/s, ETA {_duration(eta_s)}"
    )


def progress_printer(
    name: str = "train",
    *,
    stream: TextIO | None = None,
    every_s: float = 5.0,
    write: Callable[[str], object] | None = None,
) -> Progress:
    """A ``progress`` callback for :func:`prepare_corpus` that writes :func:`format_progress`
    lines to ``stream`` (default stderr), or passes them to ``write``: at most one per
    ``every_s`` seconds, and the last."""
    last = [-float("inf")]

    def report(done: int, total: int, lines_per_s: float, eta_s: float) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every_s:
            return
        last[0] = now
        line = format_progress(name, done, total, lines_per_s, eta_s)
        if write is not None:
            write(line)
        else:
            print(line, file=stream or sys.stderr)

    return report


# -- the encoding workers ----------------------------------------------------------------------


def _tokenizer_payload(tokenizer: Any, spill: Path) -> tuple[str, str, str]:
    """What a worker rebuilds ``tokenizer`` from: a BPE tokenizer's Hugging Face JSON, or
    (another kind) the path of a file it was saved to under ``spill``."""
    from .tokenizer import Tokenizer

    fingerprint = tokenizer.fingerprint()
    if isinstance(tokenizer, Tokenizer):
        return ("bpe", tokenizer.backend.to_str(), fingerprint)
    path = spill / f"{fingerprint}.json"
    if not path.exists():
        tokenizer.save(path)
    return ("file", str(path), fingerprint)


def _rebuild_tokenizer(payload: tuple[str, str, str]) -> Any:
    kind, data, fingerprint = payload
    if kind == "bpe":
        import tokenizers as hf

        from .tokenizer import Tokenizer

        tokenizer: Any = Tokenizer(hf.Tokenizer.from_str(data))
    else:
        from .tokenizer import load_tokenizer

        tokenizer = load_tokenizer(data)
    if tokenizer.fingerprint() != fingerprint:
        raise RuntimeError("a worker's copy of the tokenizer differs from the original")
    return tokenizer


@dataclass
class _Chunk:
    """One encoded chunk: every line's reason code, and the candidates' ids (kept so far)."""

    index: int
    codes: np.ndarray  # uint8, one per line
    src_ids: np.ndarray
    src_lengths: np.ndarray  # int64, one per candidate
    tgt_ids: np.ndarray
    tgt_lengths: np.ndarray
    hashes: np.ndarray  # uint64, one per candidate (empty without the duplicate filter)


class _Encoder:
    """Decodes, strips, filters and encodes chunks (in a worker, or in this process)."""

    def __init__(self, src: Any, tgt: Any, config: dict[str, Any]) -> None:
        self.src, self.tgt = src, tgt
        self.options = CleaningOptions(**config["filters"])
        self.dtype = np.dtype(config["dtype"]).newbyteorder("<")
        self.paths = config["paths"]
        self.chunk_lines = config["chunk_lines"]

    def _encode(self, tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # As the tokenizer encodes: a Marian source side keeps its </s> (its add_eos), exactly
        # what the in-memory path gives the model.
        rows = tokenizer.encode_batch(texts)
        lengths = np.fromiter(map(len, rows), np.int64, count=len(rows))
        total = int(lengths.sum())
        ids = np.fromiter(itertools.chain.from_iterable(rows), self.dtype, count=total)
        return ids, lengths

    def __call__(self, index: int, src_data: bytes, tgt_data: bytes) -> _Chunk:
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
        return _Chunk(index, codes, src_ids, src_lengths, tgt_ids, tgt_lengths, hashes)


_WORKER: _Encoder | None = None


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


def _init_worker(
    src: tuple[str, str, str], tgt: tuple[str, str, str] | None, config: dict[str, Any]
) -> None:
    global _WORKER
    _exit_with_parent()
    # One thread per worker process: the processes are the parallelism.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    src_tokenizer = _rebuild_tokenizer(src)
    tgt_tokenizer = src_tokenizer if tgt is None else _rebuild_tokenizer(tgt)
    _WORKER = _Encoder(src_tokenizer, tgt_tokenizer, config)


def _work(index: int, src_data: bytes, tgt_data: bytes) -> _Chunk:
    assert _WORKER is not None
    return _WORKER(index, src_data, tgt_data)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# -- writing -----------------------------------------------------------------------------------


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


def _encoded(
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    config: dict[str, Any],
    chunks: Iterator[tuple[bytes, bytes]],
    workers: int,
) -> Iterator[_Chunk]:
    """The encoded chunks in order: in this process with one worker, else in a pool of
    spawned processes (each given the tokenizers once) with at most two chunks per worker in
    flight."""
    if workers == 1:
        encoder = _Encoder(src_tokenizer, tgt_tokenizer, config)
        for index, (src_data, tgt_data) in enumerate(chunks):
            yield encoder(index, src_data, tgt_data)
        return
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="attnlab-tokenizers-") as spill:
        src = _tokenizer_payload(src_tokenizer, Path(spill))
        tgt = (
            None
            if tgt_tokenizer is src_tokenizer
            else _tokenizer_payload(tgt_tokenizer, Path(spill))
        )
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(src, tgt, config),
        ) as pool:
            pending: deque[concurrent.futures.Future[_Chunk]] = deque()
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
        for chunk in _encoded(src_tokenizer, tgt_tokenizer, config, chunks, workers):
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


def _check_tokenizer(tokenizer: object, name: str) -> None:
    for attribute in ("encode_batch", "fingerprint", "vocab_size"):
        if not hasattr(tokenizer, attribute):
            raise TypeError(f"{name}: expected a tokenizer, got {type(tokenizer).__name__}")


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
    options = CleaningOptions() if cleaning is None else cleaning
    if not isinstance(options, CleaningOptions):
        raise TypeError(f"cleaning: expected CleaningOptions or None, got {type(options).__name__}")
    workers = check_optional_int(workers, "workers")
    workers = _usable_cores() if workers is None else workers
    check_int(chunk_lines, "chunk_lines")
    _check_tokenizer(src_tokenizer, "src_tokenizer")
    _check_tokenizer(tgt_tokenizer, "tgt_tokenizer")
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
    options = CleaningOptions() if cleaning is None else cleaning
    if not isinstance(options, CleaningOptions):
        raise TypeError(f"cleaning: expected CleaningOptions or None, got {type(options).__name__}")
    _check_tokenizer(src_tokenizer, "src_tokenizer")
    _check_tokenizer(tgt_tokenizer, "tgt_tokenizer")
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
        meta = _wait_until(complete, f"the shards of {name} in {directory}", wait)
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
    return PreparedCorpus(
        result.directory,
        result.pairs,
        result.lines,
        result.dropped,
        time.perf_counter() - started,
        result.cached,
        result.summary,
        result.meta,
    )


# -- tokenizers --------------------------------------------------------------------------------


def _stream(paths: Sequence[PathLike]) -> Iterator[str]:
    """The lines of ``paths``, one file after the other."""
    for path in paths:
        yield from iter_lines(path)


def _selected_lines(indices: np.ndarray, *sides: Sequence[PathLike]) -> Iterator[str]:
    """The stripped, non-empty lines at ``indices`` (sorted) of each side (its files read as
    one stream), the sides read side by side: line i of the first, then of the second, ..."""
    if not len(indices):
        return
    position = 0
    wanted = int(indices[0])
    for number, lines in enumerate(zip(*(_stream(s) for s in sides), strict=True)):
        if number != wanted:
            continue
        for line in lines:
            line = line.strip()
            if line:
                yield line
        position += 1
        if position == len(indices):
            return
        wanted = int(indices[position])


def train_tokenizer_on_sample(
    src_path: PathLike | Sequence[PathLike],
    tgt_path: PathLike | Sequence[PathLike] | None,
    vocab_size: int,
    *,
    joint: bool = True,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    min_frequency: int = 2,
    name: str = "train",
    weights: Sequence[float] | None = None,
    temperature: float | None = None,
) -> tuple[Any, Any]:
    """Train the BPE :class:`~attnlab.data.tokenizer.Tokenizer` on a seeded sample of
    ``sample_size`` lines of each file (every line when there are no more), read in a stream:
    memory is bounded by the sample's indices (8 bytes a line) and the trainer's word counts,
    whatever the corpus size. Lines are stripped, empty ones skipped.

    Several corpora with ``weights`` or ``temperature`` (their mixture): the sample follows
    the mixture, as an epoch draws (:class:`~attnlab.data.batching.Mixture`, on the files'
    line counts): each corpus gives its share of ``min(sample_size, an epoch)`` lines, a
    seeded sample of its own. Without either, the corpora are sampled as one stream.

    ``tgt_path`` None: one text file (a language model), one tokenizer. ``joint``: one
    tokenizer over both sides (each sampled pair's source, then its target, as the job
    trains on a corpus in memory), returned twice; else one per side, on the same lines.

    Returns:
        ``(src_tokenizer, tgt_tokenizer)`` (the same object when joint or one file). Several
    corpora: ``src_path`` and ``tgt_path`` lists, sampled as one stream (corpus after corpus).

    Raises:
        ValueError: the files fail :func:`~attnlab.data.textfiles.check_parallel` (``name``
            starts the message), or bad arguments.
    """
    from .tokenizer import Tokenizer

    check_int(sample_size, "sample_size")
    check_int(seed, "seed", minimum=0)
    srcs = [src_path] if isinstance(src_path, (str, os.PathLike)) else list(src_path)
    tgts = [tgt_path] if isinstance(tgt_path, (str, os.PathLike)) else list(tgt_path or [])
    if tgt_path is not None:
        if len(srcs) != len(tgts):
            raise ValueError(f"{name}: {len(srcs)} source files but {len(tgts)} target files")
        for src, tgt in zip(srcs, tgts, strict=True):
            check_parallel(src, tgt, name, utf8=False)
    counts = sample_counts(srcs, sample_size, weights=weights, temperature=temperature)
    if counts is None:  # one stream
        picks = [(_reservoir_sample(*srcs, k=sample_size, seed=seed), srcs, tgts)]
    else:
        picks = [
            (_reservoir_sample(src, k=count, seed=_corpus_seed(seed, i)), [src], tgts[i : i + 1])
            for i, (src, count) in enumerate(zip(srcs, counts, strict=True))
            if count > 0
        ]

    def lines(*sides: str) -> Iterator[str]:
        for indices, src_files, tgt_files in picks:
            assert isinstance(indices, np.ndarray)
            files = {"src": src_files, "tgt": tgt_files}
            yield from _selected_lines(indices, *(files[side] for side in sides))

    kwargs = {"min_frequency": min_frequency}
    if tgt_path is None:
        tokenizer = Tokenizer.train(lines("src"), vocab_size, **kwargs)
        return tokenizer, tokenizer
    if joint:
        tokenizer = Tokenizer.train(lines("src", "tgt"), vocab_size, **kwargs)
        return tokenizer, tokenizer
    src = Tokenizer.train(lines("src"), vocab_size, **kwargs)
    tgt = Tokenizer.train(lines("tgt"), vocab_size, **kwargs)
    return src, tgt


def sample_counts(
    paths: Sequence[PathLike],
    sample_size: int,
    *,
    weights: Sequence[float] | None = None,
    temperature: float | None = None,
) -> list[int] | None:
    """How many lines of each corpus (``paths``, one file a corpus) the tokenizers' sample
    takes when it follows their mixture: the counts of an epoch of
    :class:`~attnlab.data.batching.Mixture` over the files' line counts, scaled down to
    ``sample_size`` lines when an epoch holds more. None: one corpus, or neither ``weights``
    nor ``temperature`` (the sample is then one stream)."""
    from .batching import Mixture

    if len(paths) < 2 or (weights is None and temperature is None):
        return None
    sizes = [_count_lines(path) for path in paths]
    mixture = Mixture(sizes, weights=weights, temperature=temperature)
    scale = min(1.0, sample_size / mixture.epoch_size)
    counts = mixture.counts.tolist()
    return [min(n, int(c * scale + 0.5)) for n, c in zip(sizes, counts, strict=True)]


def _corpus_seed(seed: int, corpus: int) -> int:
    """A seed for corpus ``corpus``'s sample, apart from the others'."""
    return int(np.random.SeedSequence([seed, corpus]).generate_state(1)[0])


def cached_tokenizers(
    src_paths: Sequence[PathLike],
    tgt_paths: Sequence[PathLike],
    vocab_size: int,
    *,
    joint: bool = True,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    min_frequency: int = 2,
    name: str = "train",
    cache_dir: PathLike | None = None,
    weights: Sequence[float] | None = None,
    temperature: float | None = None,
    wait: Callable[[str], object] | None = None,
) -> tuple[Any, Any, bool]:
    """:func:`train_tokenizer_on_sample`'s tokenizers, kept under ``cache_dir`` (default
    :func:`default_cache_dir`) in ``tokenizers/KEY``, KEY the files' digests and the
    options: a second run on the same files finds them there instead of training again.
    Returns ``(src, tgt, cached)``. The directory is written aside and renamed into place.
    ``wait``: train nothing, but wait for another process to put them there, as
    :func:`cached_corpus` waits."""
    from .tokenizer import load_tokenizers, save_tokenizers

    root = cache_root(cache_dir)
    infos = [
        info.to_dict()
        for src, tgt in zip(src_paths, tgt_paths, strict=True)
        for info in check_parallel(src, tgt, name, utf8=False, cache_dir=root)
    ]
    for info in infos:
        info.pop("path")  # the same bytes elsewhere are the same corpus
    options = {
        "vocab_size": vocab_size, "joint": joint, "sample_size": sample_size, "seed": seed,
        "min_frequency": min_frequency, "version": VERSION,
    }  # fmt: skip
    if len(src_paths) > 1 and (weights is not None or temperature is not None):
        # The sample follows the mixture (older caches sampled the corpora as one stream).
        options["mixing"] = {"weights": weights, "temperature": temperature}
    text = json.dumps({"inputs": infos, "options": options}, sort_keys=True)
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    root = root / "tokenizers"
    directory = root / key
    if not directory.is_dir() and wait is not None:
        where = f"the tokenizers in {directory}"
        _wait_until(lambda: True if directory.is_dir() else None, where, wait)
    if directory.is_dir():
        src, tgt = load_tokenizers(directory)
        return src, tgt, True
    src, tgt = train_tokenizer_on_sample(
        list(src_paths),
        list(tgt_paths),
        vocab_size,
        joint=joint,
        sample_size=sample_size,
        seed=seed,
        min_frequency=min_frequency,
        name=name,
        weights=weights,
        temperature=temperature,
    )
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f"{key}{_PARTIAL}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        save_tokenizers(partial, src, None if tgt is src else tgt)
        fsync_dir(partial)
        if not directory.exists():
            replace_dir(partial, directory)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return src, tgt, False

"""Large line files, read in a stream: plain or gzip, UTF-8, one sentence a line.

The one line reader of attnlab's data, under :mod:`attnlab.data.prepare` and
:mod:`attnlab.data.corpora` alike; it never holds a whole corpus in memory:

* :func:`open_bytes`: a file's bytes, through gzip when the file starts with gzip's magic
  bytes (whatever its name); :func:`is_gzip` says which.
* :func:`iter_lines` (one line at a time) and :func:`line_chunks` (raw bytes of exactly ``n``
  lines at a time, for worker processes, which :func:`decode_lines` turns into lines).
* :func:`count_lines`, :func:`sha256_file`, and :func:`scan_file` for both (and an optional
  UTF-8 check) in one pass; :func:`check_parallel` for a pair of line-aligned files, before
  any work. Given a cache directory, :func:`scan_file` keeps what it found there
  (:data:`DIGESTS_FILE`), by each file's path, inode, size and modification time, as git's
  index does: a later process does not read an unchanged file again to digest it.
* :func:`reservoir_sample`: a seeded, bounded sample of line indices (or lines) in one pass.

A line is what lies between two ``\\n`` bytes: its ending (``\\n`` or ``\\r\\n``) is not
part of it, a final newline does not start an extra line, and a file's leading byte-order
mark is dropped. Unicode's other line separators (U+2028, ``\\x85``) are ordinary
characters. Bytes that are not UTF-8 raise ValueError naming the file, the line and the
column. :func:`attnlab.data.corpora.read_lines` reads a whole file through :func:`iter_lines`.

Example::

    src, tgt = check_parallel("train.en.gz", "train.de.gz", "[task] train_src, train_tgt")
    print(src.lines, src.sha256)
    for line in iter_lines("train.en.gz"):
        ...
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .._checks import check_int
from .._io import read_json, write_json

__all__ = [
    "BLOCK_BYTES",
    "DIGESTS_FILE",
    "FileInfo",
    "check_parallel",
    "count_lines",
    "decode_lines",
    "is_gzip",
    "iter_lines",
    "line_chunks",
    "open_bytes",
    "reservoir_sample",
    "scan_file",
    "sha256_file",
]

PathLike = str | os.PathLike

#: Bytes read at a time.
BLOCK_BYTES = 4 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_NEWLINE = 10


@dataclass(frozen=True)
class FileInfo:
    """What :func:`scan_file` found: the file's path, the SHA-256 and size of its bytes as
    stored (compressed, for gzip), and its number of lines (after decompression)."""

    path: str
    sha256: str
    bytes: int
    lines: int

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "sha256": self.sha256, "bytes": self.bytes, "lines": self.lines}


def _check_file(path: PathLike) -> Path:
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, expected a text file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return path


def is_gzip(path: PathLike) -> bool:
    """Whether ``path`` starts with gzip's magic bytes (``1f 8b``), whatever its name."""
    with open(_check_file(path), "rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


def open_bytes(path: PathLike) -> BinaryIO:
    """The file's content as a binary stream: decompressed when it is gzip (by its magic
    bytes), else as stored. Raises FileNotFoundError / IsADirectoryError naming the file."""
    path = _check_file(path)
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _blocks(handle: BinaryIO, path: Path) -> Iterator[bytes]:
    """The stream's bytes in blocks of about :data:`BLOCK_BYTES`; gzip errors named."""
    try:
        while True:
            block = handle.read(BLOCK_BYTES)
            if not block:
                return
            yield block
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: not a valid gzip file ({exc})") from None


def _line_blocks(path: PathLike) -> Iterator[bytes]:
    """The file's content in blocks that each end with a newline (the last one may not),
    its byte-order mark dropped."""
    path = _check_file(path)
    with open_bytes(path) as handle:
        rest = b""
        first = True
        for block in _blocks(handle, path):
            if first:
                first = False
                if block.startswith(_BOM):
                    block = block[len(_BOM) :]
                if not block:
                    continue
            block = rest + block if rest else block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            rest = block[cut:]
            yield block[:cut]
        if rest:
            yield rest


def decode_lines(data: bytes, path: PathLike = "<bytes>", first_line: int = 1) -> list[str]:
    """The lines of ``data`` (whole lines, as :func:`line_chunks` cuts them), without their
    endings. ``path`` and ``first_line`` (the 1-based number of the first line) name where
    invalid UTF-8 is: ``"a.de: line 17: not UTF-8 (byte 0xff at column 3)"`` (ValueError)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(
            f"{path}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at column {column})"
        ) from None
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


def iter_lines(path: PathLike) -> Iterator[str]:
    """Every line of the file (plain or gzip), in order, without its ending.

    Raises:
        FileNotFoundError, IsADirectoryError: no such file; a directory.
        ValueError: not valid gzip, or not UTF-8 (naming the line and column).
    """
    number = 1
    for block in _line_blocks(path):
        lines = decode_lines(block, path, number)
        number += len(lines)
        yield from lines


def line_chunks(path: PathLike, lines: int) -> Iterator[bytes]:
    """The file's raw (decompressed) bytes in chunks of exactly ``lines`` whole lines, newlines
    included (the last chunk holds what is left, and may lack a final newline); the byte-order
    mark dropped. Not decoded: :func:`decode_lines` does that, in a worker process if wanted.
    Chunk ``i`` starts at line ``i * lines + 1``."""
    check_int(lines, "lines")
    pending: list[bytes] = []  # bytes of the chunk being gathered
    have = 0  # its lines so far
    for block in _line_blocks(path):
        newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == _NEWLINE)
        start = 0  # the first byte of `block` not yet given out
        used = 0  # newlines of `block` before `start`
        while have + len(newlines) - used >= lines:
            end = int(newlines[used + lines - have - 1]) + 1
            used += lines - have
            pending.append(block[start:end])
            yield b"".join(pending)
            pending, have, start = [], 0, end
        if start < len(block):
            pending.append(block[start:])
            have += len(newlines) - used
            if not block.endswith(b"\n"):
                have += 1  # the final line, without its newline (only in the last block)
    if pending:
        yield b"".join(pending)


def count_lines(path: PathLike) -> int:
    """The number of lines of the file (plain or gzip), counting its bytes in blocks."""
    return scan_file(path, digest=False).lines


def sha256_file(path: PathLike) -> str:
    """The SHA-256 hex digest of the file's bytes as stored (compressed, for gzip)."""
    digest = hashlib.sha256()
    with open(_check_file(path), "rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


class _HashingReader(io.RawIOBase):
    """A raw stream over a file that feeds every byte it reads into a SHA-256."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self._handle.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.digest.update(data)
        self.size += n
        return n

    def drain(self) -> None:
        """Read (and hash) what is left."""
        while block := self._handle.read(BLOCK_BYTES):
            self.digest.update(block)
            self.size += len(block)


#: What this process found scanning a file, by its identity and state (device, inode, size,
#: modification time): ``(digested, utf8 checked, FileInfo)``. A file scanned again unchanged
#: (a job checks its files, then the tokenizer and shard caches look them up) is not re-read.
_SCANS: dict[tuple[str, int, int, int, int], tuple[bool, bool, FileInfo]] = {}


def _identity(path: Path) -> tuple[str, int, int, int, int]:
    status = path.stat()
    return (
        os.path.realpath(path),
        status.st_dev,
        status.st_ino,
        status.st_size,
        status.st_mtime_ns,
    )


#: The file of a cache directory (the shard cache's) that remembers, across processes, what
#: :func:`scan_file` found: ``{"format", "version", "files": {real path: {"device", "inode",
#: "size", "mtime_ns", "sha256", "lines", "utf8"}}}``, written atomically.
DIGESTS_FILE = "file-digests.json"
_DIGESTS_FORMAT = "attnlab-file-digests"
_DIGESTS_VERSION = 1
#: The files it remembers at most (the most recently scanned).
_DIGESTS_LIMIT = 1000
#: A file modified less than this before its scan began is not remembered (git's "racily
#: clean" entries): a write in the same tick of the clock, of the same size, would go unseen.
_RACY_NS = 2_000_000_000


def _remembered(cache_dir: Path, identity: tuple[str, int, int, int, int]) -> dict | None:
    """The entry of ``cache_dir``'s :data:`DIGESTS_FILE` for this file in this state, or None
    (none, another state, or a file that cannot be read as one)."""
    entry = _read_digests(cache_dir).get(identity[0])
    if not isinstance(entry, dict):
        return None
    state = (entry.get("device"), entry.get("inode"), entry.get("size"), entry.get("mtime_ns"))
    sha, lines = entry.get("sha256"), entry.get("lines")
    if state != identity[1:] or not isinstance(sha, str) or len(sha) != 64:
        return None
    if not isinstance(lines, int) or isinstance(lines, bool) or lines < 0:
        return None
    return entry


def _read_digests(cache_dir: Path) -> dict[str, object]:
    try:
        data = read_json(cache_dir / DIGESTS_FILE)
    except (OSError, ValueError):
        return {}
    if data.get("format") != _DIGESTS_FORMAT:
        return {}
    if data.get("version") != _DIGESTS_VERSION or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]  # type: ignore[no-any-return]


def _remember(
    cache_dir: Path, identity: tuple[str, int, int, int, int], info: FileInfo, utf8: bool
) -> None:
    """Add this scan to ``cache_dir``'s :data:`DIGESTS_FILE` (read again and merged, then
    written atomically). A cache that cannot be written is left as it is: the file is then
    digested again next time, nothing worse."""
    files = dict(_read_digests(cache_dir))
    files.pop(identity[0], None)  # re-inserted last: the most recent
    files[identity[0]] = {
        "device": identity[1], "inode": identity[2], "size": identity[3],
        "mtime_ns": identity[4], "sha256": info.sha256, "lines": info.lines, "utf8": utf8,
    }  # fmt: skip
    kept = dict(list(files.items())[-_DIGESTS_LIMIT:])
    data = {"format": _DIGESTS_FORMAT, "version": _DIGESTS_VERSION, "files": kept}
    with contextlib.suppress(OSError):
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_json(cache_dir / DIGESTS_FILE, data)


def scan_file(
    path: PathLike,
    *,
    digest: bool = True,
    utf8: bool = False,
    cache_dir: PathLike | None = None,
    verify: bool = False,
) -> FileInfo:
    """One pass over the file: its SHA-256 (``digest``; else ``""``), size and line count,
    and with ``utf8`` a check that every line is UTF-8. A file this process has scanned
    before, unchanged since (same inode, size and modification time), is not read again.

    ``cache_dir`` (a shard cache directory): what was found is also kept in its
    :data:`DIGESTS_FILE`, by the file's real path, device, inode, size and modification time
    (in ns), and a later process finds it there, as long as none of these has changed,
    instead of reading the file again: git's index does the same. A file modified within 2
    s before its scan is not kept (a same-size write in the same clock tick would go
    unseen). ``verify``: read the file whatever this process or ``cache_dir`` remember (the
    result is kept again).

    Raises:
        FileNotFoundError, IsADirectoryError: no such file; a directory.
        PermissionError: the file cannot be read.
        ValueError: not valid gzip; with ``utf8``, bytes that are not UTF-8 (naming the line).
    """
    path = _check_file(path)
    identity = _identity(path)
    known = None if verify else _SCANS.get(identity)
    if known is not None and (known[0] or not digest) and (known[1] or not utf8):
        info = known[2]
        return FileInfo(str(path), info.sha256 if digest else "", info.bytes, info.lines)
    cache = Path(cache_dir) if cache_dir is not None else None
    if cache is not None and not verify:
        entry = _remembered(cache, identity)
        checked = entry is not None and (entry.get("utf8") is True or bool(known and known[1]))
        if entry is not None and (checked or not utf8):
            info = FileInfo(str(path), entry["sha256"], identity[3], entry["lines"])
            _SCANS[identity] = (True, checked, info)
            return FileInfo(str(path), info.sha256 if digest else "", info.bytes, info.lines)
    started_ns = time.time_ns()
    info = _scan(path, digest=digest or cache is not None, utf8=utf8)
    if _identity(path) == identity:  # not changed while being read
        digested = digest or cache is not None
        if known is not None:
            digested, utf8 = digested or known[0], utf8 or known[1]
            if not info.sha256:
                info = FileInfo(info.path, known[2].sha256, info.bytes, info.lines)
        _SCANS[identity] = (digested, utf8, info)
        if cache is not None and started_ns - identity[4] >= _RACY_NS:
            _remember(cache, identity, info, utf8)
    return info if digest else FileInfo(info.path, "", info.bytes, info.lines)


def _scan(path: Path, *, digest: bool, utf8: bool) -> FileInfo:
    gz = is_gzip(path)
    lines = 0
    last = b"\n"
    with open(path, "rb") as raw:
        reader = _HashingReader(raw)
        stream: BinaryIO
        if gz:
            stream = gzip.GzipFile(fileobj=io.BufferedReader(reader, BLOCK_BYTES), mode="rb")  # type: ignore[assignment]
        else:
            stream = reader  # type: ignore[assignment]
        rest = b""
        decoded = 0  # lines checked as UTF-8
        head = b""  # the first bytes, to tell a file holding only a byte-order mark
        for block in _blocks(stream, path):
            if len(head) < 4:
                head += block[:4]
            lines += block.count(b"\n")
            last = block[-1:]
            if utf8:
                block = rest + block if rest else block
                cut = block.rfind(b"\n") + 1
                decode_lines(block[:cut], path, decoded + 1)
                decoded += block.count(b"\n", 0, cut)
                rest = block[cut:]
        if utf8 and rest:
            decode_lines(rest, path, decoded + 1)
        if gz:
            reader.drain()
        size = reader.size
        sha = reader.digest.hexdigest() if digest else ""
    if last != b"\n" and head[:4] != _BOM:
        lines += 1  # a final line without a newline
    return FileInfo(str(path), sha, size, lines)


def check_parallel(
    src_path: PathLike,
    tgt_path: PathLike,
    name: str,
    *,
    utf8: bool = True,
    cache_dir: PathLike | None = None,
    verify: bool = False,
) -> tuple[FileInfo, FileInfo]:
    """Check a pair of line-aligned files before any work: both exist and can be read (gzip
    valid, with ``utf8`` every line UTF-8), neither is empty, and they have the same number
    of lines. Returns their :class:`FileInfo` (digest, size, lines). ``cache_dir`` and
    ``verify``: as :func:`scan_file` takes them.

    ``name`` is what the user set (an option, a split) and starts every message::

        [task] train_src, train_tgt: the files differ in length: a.en has 1,000 lines,
        a.de has 999

    Raises:
        ValueError: any of those, in one line naming ``name`` and the file.
    """
    infos = []
    for path in (src_path, tgt_path):
        try:
            info = scan_file(path, utf8=utf8, cache_dir=cache_dir, verify=verify)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.filename else str(exc)
            if isinstance(exc, OSError) and exc.filename:
                reason = f"{path}: cannot be read ({reason})"
            raise ValueError(f"{name}: {reason}") from None
        if info.lines == 0:
            raise ValueError(f"{name}: {path}: the file is empty")
        infos.append(info)
    src, tgt = infos
    if src.lines != tgt.lines:
        raise ValueError(
            f"{name}: the files differ in length: {src_path} has {src.lines:,} lines, "
            f"{tgt_path} has {tgt.lines:,}"
        )
    return src, tgt


def reservoir_sample(
    *paths: PathLike, k: int, seed: int = 0, lines: bool = False
) -> np.ndarray | list[str]:
    """A uniform sample of ``k`` of the lines of ``paths`` (read as one stream of lines, in
    order), in one pass and O(k) memory: their 0-based indices in that stream, sorted
    (an int64 array), or with ``lines`` the lines themselves in stream order. Every line when
    there are no more than ``k``.

    The same files, ``k`` and ``seed`` give the same sample (reservoir sampling, Vitter's
    algorithm R, with numpy's PCG64 seeded by ``seed``); the index sample does not decode the
    text, the line sample does (and raises ValueError for bytes that are not UTF-8).
    """
    check_int(k, "k")
    check_int(seed, "seed", minimum=0)
    if not paths:
        raise ValueError("paths: expected at least one file")
    rng = np.random.Generator(np.random.PCG64(seed))
    chosen = np.empty(k, np.int64)  # the line index held in each slot
    held: list[str] = [""] * k if lines else []
    seen = 0  # lines read so far
    for path in paths:
        number = 1
        for block in _line_blocks(path):
            count = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            block_lines = decode_lines(block, path, number) if lines else None
            number += count
            start, stop = seen, seen + count
            fill = min(stop, k)
            if start < fill:  # the reservoir's first k lines
                chosen[start:fill] = np.arange(start, fill)
                if block_lines is not None:
                    held[start:fill] = block_lines[: fill - start]
            if stop > k:
                first = max(start, k)
                index = np.arange(first, stop, dtype=np.int64)
                slot = rng.integers(0, index + 1)
                hit = slot < k
                slots, winners = slot[hit], index[hit]
                if len(slots):
                    before = chosen.copy() if block_lines is not None else None
                    # Later lines replace earlier ones: the last (largest) index per slot wins.
                    np.maximum.at(chosen, slots, winners)
                    if block_lines is not None and before is not None:
                        for s in np.flatnonzero(chosen != before):
                            held[s] = block_lines[int(chosen[s]) - start]
            seen = stop
    size = min(k, seen)
    if not lines:
        return np.sort(chosen[:size])
    order = np.argsort(chosen[:size], kind="stable")
    return [held[i] for i in order]

"""The shard format (version 1): one directory per prepared corpus, its files, its keys and the
one reader of its ``meta.json``, for the writer (:mod:`attnlab.data.prepare`) and the reader
(:mod:`attnlab.data.shards`) alike.

* ``src.ids``, ``tgt.ids``: the kept pairs' token ids, concatenated, little-endian, of
  ``meta["dtype"]`` (``uint16`` when both vocabularies have at most 65,536 ids, else
  ``uint32``); the ids the tokenizer's ``encode`` gives (no bos / eos framing of the target;
  a SentencePiece source side keeps its own ``</s>``, its ``add_eos``).
* ``src.offsets``, ``tgt.offsets``: little-endian int64, ``pairs + 1`` of them: pair ``i``'s
  ids are ``ids[offsets[i]:offsets[i + 1]]``, ``offsets[0] == 0``.
* ``meta.json``: ``{"format": "attnlab-shards", "version": 1, "pairs", "dtype", "src_vocab",
  "tgt_vocab", "src_max_id", "tgt_max_id" (-1 without ids), "src_tokens", "tgt_tokens",
  "key", "inputs": [{"path", "sha256", "bytes", "lines"}, ...], "filters", "dropped",
  "tokenizers": {"src", "tgt"}}`` (fingerprints).

A directory is complete if and only if its ``meta.json`` exists (:func:`load_meta`): the
writer builds it aside and renames it into place, ``meta.json`` written last. The cache keeps
each under its :func:`shard_key` in :func:`default_cache_dir`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._io import read_json
from .clean import CleaningOptions
from .textfiles import FileInfo

__all__ = [
    "ENCODING",
    "FORMAT",
    "ID_DTYPES",
    "META_FILE",
    "OFFSETS_DTYPE",
    "SHARD_FILES",
    "SRC_IDS",
    "SRC_OFFSETS",
    "TGT_IDS",
    "TGT_OFFSETS",
    "VERSION",
    "cache_root",
    "default_cache_dir",
    "id_dtype",
    "is_complete",
    "load_meta",
    "read_meta",
    "shard_key",
]

#: The ``format`` and ``version`` fields of a shard directory's ``meta.json``.
FORMAT = "attnlab-shards"
VERSION = 1
META_FILE = "meta.json"
SRC_IDS, TGT_IDS = "src.ids", "tgt.ids"
SRC_OFFSETS, TGT_OFFSETS = "src.offsets", "tgt.offsets"
#: Every file of a complete shard directory; ``meta.json`` (the last) marks it complete.
SHARD_FILES = (SRC_IDS, SRC_OFFSETS, TGT_IDS, TGT_OFFSETS, META_FILE)
#: The offsets' numpy dtype: little-endian int64.
OFFSETS_DTYPE = "<i8"
#: The ids' dtypes (:func:`id_dtype` picks one).
ID_DTYPES = ("uint16", "uint32")
#: What the ids are, part of the cache key: each side as its tokenizer's ``encode`` gives it
#: (a SentencePiece source keeps its ``</s>``; shards of an earlier build that left it out are
#: not reused).
ENCODING = "as-encoded"
_UINT16_VOCAB = 65_536


def default_cache_dir() -> Path:
    """Where prepared shards are kept: ``$ATTNLAB_CACHE/shards``, else
    ``$XDG_CACHE_HOME/attnlab/shards``, else ``~/.cache/attnlab/shards``."""
    if os.environ.get("ATTNLAB_CACHE"):
        return Path(os.environ["ATTNLAB_CACHE"]).expanduser() / "shards"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "attnlab" / "shards"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, or :func:`default_cache_dir` when None: where shards, tokenizers and the
    files' digests are kept."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def id_dtype(src_vocab: int, tgt_vocab: int) -> str:
    """``"uint16"`` when both vocabularies have at most 65,536 ids, else ``"uint32"``."""
    return "uint16" if max(src_vocab, tgt_vocab) <= _UINT16_VOCAB else "uint32"


def shard_key(
    inputs: Sequence[str | FileInfo],
    tokenizers: Sequence[str],
    cleaning: CleaningOptions | dict[str, Any],
    version: int = VERSION,
) -> str:
    """The cache key of a preparation: a SHA-256 hex digest of the inputs' SHA-256 digests
    (strings, or :class:`~attnlab.data.textfiles.FileInfo`), the tokenizers' fingerprints
    (source, target), the cleaning options, the format version and what the ids are
    (:data:`ENCODING`). Paths are not part of it: the same content elsewhere hits the cache."""
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


def _count(meta: dict[str, Any], name: str, least: int, path: Path) -> None:
    value = meta.get(name)
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
        kind = "a non-negative int" if least == 0 else f"an int >= {least}"
        raise ValueError(f"{path}: {name}: expected {kind}, got {value!r:.40}")


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta.json`` at ``path``, its fields checked: the format, the version, the ids'
    dtype, the counts and the key.

    Raises:
        FileNotFoundError (an OSError): no such file.
        ValueError: not JSON, another format, another version, a malformed field.
    """
    path = Path(path)
    try:
        meta = read_json(path)
    except ValueError as e:
        reason = str(e).removeprefix(f"{path}: ")
        raise ValueError(f"{path}: not a shard directory's {META_FILE} ({reason})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r:.40}, expected {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise ValueError(
            f"{path}: shard format version {meta.get('version')!r:.20}; this attnlab reads "
            f"version {VERSION} (prepare the corpus again)"
        )
    if meta.get("dtype") not in ID_DTYPES:
        raise ValueError(f"{path}: dtype {meta.get('dtype')!r:.20}, expected one of {ID_DTYPES}")
    for name in ("pairs", "src_tokens", "tgt_tokens"):
        _count(meta, name, 0, path)
    for name in ("src_max_id", "tgt_max_id"):
        _count(meta, name, -1, path)
    if not isinstance(meta.get("key"), str) or not meta["key"]:
        raise ValueError(f"{path}: key: expected the preparation's fingerprint, a string")
    return meta


def load_meta(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The checked ``meta.json`` of a complete shard directory (:func:`read_meta`), or None
    when there is none (not prepared, or a preparation that never finished).

    Raises:
        ValueError: the file is not a shard directory's meta (another format, another
            version, not JSON, a malformed field).
    """
    try:
        return read_meta(Path(directory) / META_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return None


def is_complete(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` is a complete shard directory of this format version."""
    try:
        return load_meta(directory) is not None
    except ValueError:
        return False

"""Shard directories for the tests: :func:`write_shards` writes attnlab's shard format
(``meta.json`` + ``src.ids`` / ``tgt.ids`` / ``*.offsets``) for given id pairs with numpy,
as :mod:`attnlab.data.prepare` writes it; :func:`random_pairs` makes such pairs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def write_shards(
    directory: Path,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    dtype: str = "uint16",
    key: str | None = None,
) -> Path:
    """Write ``pairs`` (source ids, target ids) as a complete shard directory; its key is a
    digest of the pairs unless given."""
    directory.mkdir(parents=True, exist_ok=True)
    on_disk = np.dtype(dtype).newbyteorder("<")
    meta: dict[str, object] = {"format": "attnlab-shards", "version": 1, "pairs": len(pairs)}
    digest = hashlib.sha256()
    for side, column in (("src", 0), ("tgt", 1)):
        rows = [np.asarray(pair[column], dtype=np.int64) for pair in pairs]
        ids = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype("<i8")
        (directory / f"{side}.ids").write_bytes(ids.astype(on_disk).tobytes())
        (directory / f"{side}.offsets").write_bytes(offsets.tobytes())
        digest.update(ids.tobytes() + offsets.tobytes())
        meta[f"{side}_tokens"] = len(ids)
        meta[f"{side}_max_id"] = int(ids.max()) if ids.size else -1
        meta[f"{side}_vocab"] = int(ids.max()) + 1 if ids.size else 0
    meta.update(
        dtype=dtype,
        key=key if key is not None else digest.hexdigest(),
        inputs=[],
        filters={},
        dropped={},
        tokenizers={"src": "test", "tgt": "test"},
    )
    (directory / "meta.json").write_text(json.dumps(meta))
    return directory


def random_pairs(
    count: int, *, seed: int, vocab: int = 24, longest: int = 12, empty_sources: bool = False
) -> list[tuple[list[int], list[int]]]:
    """``count`` random pairs of ids in [4, vocab), each side 1..longest long (sources 0..
    with ``empty_sources``)."""
    rng = np.random.default_rng(seed)
    low = 0 if empty_sources else 1
    return [
        (
            rng.integers(4, vocab, int(rng.integers(low, longest + 1))).tolist(),
            rng.integers(4, vocab, int(rng.integers(1, longest + 1))).tolist(),
        )
        for _ in range(count)
    ]

"""Where tests find the shared Multi30K copy (never committed): $ATTNLAB_MULTI30K, the
repository's sibling ../shared/data/multi30k, or /work/shared/data/multi30k."""

from __future__ import annotations

import os
from pathlib import Path

_CANDIDATES = [
    os.environ.get("ATTNLAB_MULTI30K"),
    Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k",
    "/work/shared/data/multi30k",
]
MULTI30K_DIR = next(
    (Path(c) for c in _CANDIDATES if c and (Path(c) / "train.en.gz").is_file()),
    Path("/work/shared/data/multi30k"),
)

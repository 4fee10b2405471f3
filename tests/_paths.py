"""Where tests find the shared Multi30K copy (never committed): ``$ATTNLAB_MULTI30K``, else the
repository's sibling ``shared/data/multi30k``. Tests that need it skip when neither holds it."""

from __future__ import annotations

import os
from pathlib import Path

_SIBLING = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
_CANDIDATES = [os.environ.get("ATTNLAB_MULTI30K"), _SIBLING]
MULTI30K_DIR = next(
    (Path(c) for c in _CANDIDATES if c and (Path(c) / "train.en.gz").is_file()),
    _SIBLING,
)

"""Where tests find Multi30K (never committed): where attnlab itself looks, ``$ATTNLAB_MULTI30K``,
else the download cache that ``attnlab download multi30k`` (or ``attnlab train --task
multi30k``) fills (:func:`attnlab.data.corpora.default_multi30k_dir`). No test names a path
outside the repository.

A test that needs the files is marked :data:`needs_multi30k` (or calls
:func:`skip_without_multi30k`): where they are missing it skips, and its reason says what is
missing and the one command that gets it. It never fails for that.
"""

from __future__ import annotations

import os

import pytest

from attnlab.data.corpora import MULTI30K_SHA256, default_multi30k_dir

#: The directory attnlab reads Multi30K from, resolved once, before any test changes the
#: environment.
MULTI30K_DIR = default_multi30k_dir()
#: What ``attnlab download multi30k`` fetches: the nine raw files of task 1.
MULTI30K_FILES = tuple(sorted(MULTI30K_SHA256))
#: The one command that gets the data.
GET_MULTI30K = "attnlab download multi30k"


def missing_multi30k() -> list[str]:
    """The Multi30K files :data:`MULTI30K_DIR` lacks (empty when it holds them all)."""
    return [name for name in MULTI30K_FILES if not (MULTI30K_DIR / name).is_file()]


def have_multi30k() -> bool:
    return not missing_multi30k()


def multi30k_reason() -> str:
    """Why a Multi30K test skips: what is missing, where it was looked for, and the command."""
    missing = missing_multi30k()
    if os.environ.get("ATTNLAB_MULTI30K"):
        where = f"$ATTNLAB_MULTI30K={MULTI30K_DIR}"
    else:
        where = f"$ATTNLAB_MULTI30K unset, download cache {MULTI30K_DIR}"
    if len(missing) == len(MULTI30K_FILES):
        what = "no files there" if MULTI30K_DIR.is_dir() else "no such directory"
    else:
        what = f"lacks {', '.join(missing)}"
    return f"Multi30K not found ({where}: {what}): run `{GET_MULTI30K}`"


#: The mark of a test that reads the real Multi30K files.
needs_multi30k = pytest.mark.skipif(not have_multi30k(), reason=multi30k_reason())


def skip_without_multi30k() -> None:
    """Skip the calling test, with :func:`multi30k_reason`, when Multi30K is not there."""
    if not have_multi30k():
        pytest.skip(multi30k_reason())

"""Shared test configuration.

Under CI (the ``CI`` environment variable set), hypothesis runs derandomized: the same examples
every run, so a red CI is reproducible. Locally it explores new examples each run.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

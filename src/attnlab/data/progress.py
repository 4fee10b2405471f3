"""What a long preparation says while it runs: its progress lines, and the wait of a process
for another's preparation (the ranks of a ``torchrun`` run share one: the first prepares, the
others wait for the cache to hold what it makes, without a deadline, and say so every minute).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["WAIT_NOTE_S", "WAIT_POLL_S", "Progress", "format_progress", "progress_printer"]

#: A preparation's progress: ``(lines_done, lines_total, lines_per_s, eta_s)``.
Progress = Callable[[int, int, float, float], object]
#: A process that waits for another's preparation looks every WAIT_POLL_S seconds, and says
#: why it waits at once and then every WAIT_NOTE_S seconds.
WAIT_POLL_S = 1.0
WAIT_NOTE_S = 60.0


def duration(seconds: float) -> str:
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
        f"{lines_per_s:,.0f} lines/s, ETA {duration(eta_s)}"
    )


def progress_printer(
    name: str = "train",
    *,
    stream: TextIO | None = None,
    every_s: float = 5.0,
    write: Callable[[str], object] | None = None,
) -> Progress:
    """A ``progress`` callback for :func:`~attnlab.data.prepare.prepare_corpus` that writes
    :func:`format_progress` lines to ``stream`` (default stderr), or passes them to ``write``:
    at most one per ``every_s`` seconds, and the last."""
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


def wait_until(ready: Callable[[], Any], what: str, say: Callable[[str], object]) -> Any:
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
            waited = f" ({duration(now - started)} so far)" if now > started + 1 else ""
            say(f"waiting for rank 0 to prepare {what}, without a time limit{waited}")
            said = now
        time.sleep(WAIT_POLL_S)

"""``attnlab download``: a data set fetched on purpose, checked, and put where attnlab looks.

Today one data set: Multi30K task 1 (``attnlab download multi30k``), through
:func:`attnlab.data.corpora.download_multi30k`, the code that ``attnlab train --task multi30k``
downloads with on its first use. Progress goes to standard error, one line that updates on a
terminal and one line a file otherwise; where the data is goes to standard output.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO


class _Progress:
    """``progress(name, received, expected)`` for the download: on a terminal one line that
    is rewritten (when a file starts and completes, and at most 10 times a second between);
    elsewhere (a log, a pipe) one line a file, once it has all its bytes."""

    def __init__(self, stream: TextIO, count: int) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.count = count
        self.index = 0
        self.name = ""
        self.open = False  # a terminal line without its newline yet
        self.shown = 0.0

    def __call__(self, name: str, received: int, expected: int) -> None:
        new = name != self.name
        if new:
            self.name, self.index = name, self.index + 1
        done = received >= expected
        percent = min(100, received * 100 // expected) if expected else 100
        text = (
            f"attnlab download: [{self.index}/{self.count}] {name}: {received:,} of "
            f"{expected:,} bytes ({percent}%)"
        )
        if self.tty:
            now = time.monotonic()
            if done or new or now - self.shown >= 0.1:
                self.stream.write("\r" + text + ("\n" if done else ""))
                self.stream.flush()
                self.shown, self.open = now, not done
        elif done:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """End a line left open (an error follows on a line of its own)."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


def cmd_download_multi30k(args: argparse.Namespace) -> int:
    from ..data.corpora import (
        MULTI30K_LANGS,
        default_multi30k_dir,
        download_multi30k,
        missing_files,
    )

    default = default_multi30k_dir()
    directory = Path(args.data_dir).expanduser() if args.data_dir else default
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"--data-dir: {directory} is a file, expected a directory")
    progress = _Progress(sys.stderr, len(missing_files(directory, MULTI30K_LANGS)))
    try:
        status = download_multi30k(directory, base_url=args.url, progress=progress)
    finally:
        progress.close()
    fetched = sum(1 for value in status.values() if value == "downloaded")
    print(
        f"attnlab download multi30k: Multi30K task 1 ({', '.join(MULTI30K_LANGS)}: train, val, "
        f"test_2016_flickr) is in {directory}: {len(status)} files, {fetched} downloaded, "
        f"{len(status) - fetched} already there; every .gz checked against its published "
        f"SHA-256"
    )
    if directory.resolve() == default.resolve():
        print("attnlab train --task multi30k and the tests read it from there.")
    else:
        print(
            f"attnlab looks in {default}: export ATTNLAB_MULTI30K={directory.resolve()} (or "
            f"pass --data-dir to attnlab train) so that it and the tests find this copy."
        )
    return 0


def add_parsers(sub) -> None:
    download = sub.add_parser(
        "download",
        help="download a data set on purpose: Multi30K, checked against its SHA-256",
        description=(
            "Download a data set into the directory where attnlab looks for it, so that "
            "training and the tests need no network later."
        ),
    )
    datasets = download.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    multi30k = datasets.add_parser(
        "multi30k",
        help="Multi30K task 1 (en, de, fr; train, val, test_2016_flickr: 9 files, 1.9 MB)",
        description=(
            "Download Multi30K task 1's nine raw files into --data-dir (default: "
            "$ATTNLAB_MULTI30K, else ~/.cache/attnlab/multi30k, or "
            "$XDG_CACHE_HOME/attnlab/multi30k where that is set: the directory attnlab train "
            "--task multi30k reads). Files already there are kept and checked. Each download "
            "is checked against its published SHA-256 and only then written, atomically: a "
            "truncated or different file is refused in one line and nothing is left behind. "
            "Progress goes to standard error; where the data is, to standard output."
        ),
    )
    multi30k.add_argument("--data-dir", default=None, help="Multi30K directory ($ATTNLAB_MULTI30K)")
    multi30k.add_argument(
        "--url",
        default=None,
        metavar="URL",
        help="the base URL of a mirror holding the raw files (default: $ATTNLAB_MULTI30K_URL, "
        "else the dataset's repository on GitHub)",
    )
    multi30k.set_defaults(func=cmd_download_multi30k)

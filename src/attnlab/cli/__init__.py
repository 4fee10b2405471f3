"""The ``attnlab`` command line. Thin: it parses arguments, calls the library and prints.

One module per group of commands, each with an ``add_parsers(sub)`` that `build_parser` calls:
`tour` (demo, masks, config, flops, explain), `pictures` (viz) and `jobs` (train, translate,
evaluate, serve); the argument types that several groups use are in `_args`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from . import jobs, pictures, tour
from .jobs import _build_job

__all__ = ["_build_job", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="The Transformer of 'Attention Is All You Need': exact, fast, explained.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    tour.add_parsers(sub)
    jobs.add_serve_parser(sub)
    pictures.add_parsers(sub)
    jobs.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except (ValueError, TypeError, OSError) as error:  # bad input or a missing / unreadable file
        print(f"attnlab {args.command}: error: {error}", file=sys.stderr)
        return 2

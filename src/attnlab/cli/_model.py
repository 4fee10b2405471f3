"""What the commands that run a model share: the model argument, resolved (:func:`resolving`,
so that ``--model`` also takes a checkpoint ``OUT/checkpoints/step-N`` or a run ``OUT``) and
checked to be of the kind the command runs (:func:`check_kind`), and the report of the input
lines over the model's bounds (:class:`TooLongLines`, :data:`EXIT_REFUSED`), which
``translate`` and ``evaluate`` print alike."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Iterable

#: translate's exit status when ``--too-long refuse`` left lines untranslated (bad input, as
#: :data:`attnlab.cli.EXIT_INPUT`); the output is written all the same, a line for each line.
EXIT_REFUSED = 2

#: model_type (config.json) -> what it is, and the command that uses it.
KINDS = {
    "transformer": ("a Transformer (a translation model)", "attnlab translate"),
    "lm": ("a TransformerLM (a language model)", "attnlab generate"),
    "vit": ("a VisionTransformer (an image classifier)", "attnlab predict"),
    "encoder": ("a TransformerEncoder (an encoder without a decoder)", "attnlab viz attention"),
}


def check_kind(directory: str | os.PathLike, wanted: Iterable[str], command: str, flag: str):
    """Refuse, in one line naming the kind found and the command that fits, a model of another
    kind than ``wanted`` (model_type names)."""
    from ..inference.modeldir import kind_of

    kind = kind_of(directory)
    if kind in wanted or kind == "unknown":
        return
    what, use = KINDS.get(kind, (f"a {kind!r} model", None))
    hint = f"; use {use}" if use and use.split()[1] != command else ""
    raise ValueError(f"{flag}: {directory} is {what}; attnlab {command} needs another kind{hint}")


def resolving(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``func`` with its ``--model`` resolved first (a checkpoint or a run to a model
    directory, :func:`attnlab.inference.modeldir.resolve_model_dir`). A command without
    ``--model`` runs as it is."""
    from ..inference.modeldir import resolve_model_dir

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        if not hasattr(args, "model"):
            return func(args)
        if isinstance(args.model, list):  # a repeatable --model: an ensemble
            args.models = [str(resolve_model_dir(m, name="--model")) for m in args.model]
            args.model = args.models[0]
        else:
            args.model = str(resolve_model_dir(args.model, name="--model"))
            args.models = [args.model]
        return func(args)

    return run


def model_dirs(args: argparse.Namespace) -> list[str]:
    """Every ``--model`` of ``args`` (several for an ensemble): ``args.models`` as
    :func:`resolving` sets it, else ``args.model`` (one, or a list)."""
    models = getattr(args, "models", None)
    if models:
        return list(models)
    return list(args.model) if isinstance(args.model, list) else [args.model]


class TooLongLines:
    """Reports the sources over the model's max_len as one line each on stderr, naming where
    each came from (``--input FILE line N``, ``standard input line N``, ``TEXT N``), and
    counts the refused ones; ``record(index, message)`` hears of each refusal too."""

    def __init__(self, command: str, source: str, record=lambda index, message: None) -> None:
        self.command, self.source, self.refused, self.record = command, source, 0, record

    def unmet(self, report) -> None:
        """A line refused for its prefix or constraints (a :class:`attnlab.inference.translator.
        Refused`)."""
        self.refused += 1
        self._say("error", report, "; its output line is left empty")

    def __call__(self, report) -> None:
        if report.refused:
            self.refused += 1
            self._say("error", report, " (--too-long refuse); its output line is left empty")
        else:
            self._say("note", report, " (--too-long refuse would leave it out)")

    def _say(self, kind: str, report, outcome: str) -> None:
        where = f"{self.source} {report.index + 1:,}"
        message = f"attnlab {self.command}: {kind}: {where}: {report.describe()}{outcome}"
        print(message, file=sys.stderr, flush=True)
        if kind == "error":
            self.record(report.index, message)

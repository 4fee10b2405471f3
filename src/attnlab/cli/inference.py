"""Using trained models: ``evaluate`` on any parallel text, ``average`` of checkpoints, one
resolver for every command that takes a model, and what ``translate`` (:mod:`attnlab.cli.
translate`) shares with them.

`extend` runs after the other groups have added their parsers: it adds options to ``evaluate``
(defined in `jobs`) and routes every command's model argument (``--model``) through
:func:`attnlab.inference.modeldir.resolve_model_dir`, so that each also takes a checkpoint
``OUT/checkpoints/step-N`` or a run ``OUT``. `add_parsers` adds ``average``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from ._args import (
    add_input_bound_flags,
    add_out_flag,
    add_overwrite_flag,
    decoding_of,
    device_of,
)

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
    directory); where only a deprecated positional could have named it, refused if missing."""
    from ..inference.modeldir import resolve_model_dir

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        if not hasattr(args, "model"):
            return func(args)
        if args.model is None:
            raise ValueError("--model: required (a model directory, checkpoint or run)")
        args.model = str(resolve_model_dir(args.model, name="--model"))
        return func(args)

    return run


def extend(sub) -> None:
    """Add the inference options to ``evaluate`` and resolve every command's model argument
    (see the module's docstring; ``translate``'s are :mod:`attnlab.cli.translate`'s)."""
    _extend_evaluate(sub.choices["evaluate"])
    for name, parser in sub.choices.items():
        func = parser.get_default("func")
        skip = {"train", "translate", "evaluate", "average", "generate", "predict"}
        if func is not None and name not in skip:
            parser.set_defaults(func=resolving(func))


# -- translate ---------------------------------------------------------------------------------


def _number(text: str, accept: Callable[[float], bool], expected: str) -> float:
    """``text`` as a float that ``accept`` takes (NaN never does), else argparse's error."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def probability(text: str) -> float:
    return _number(text, lambda v: 0 < v <= 1, "a number in (0, 1]")


def non_negative(text: str) -> float:
    return _number(text, lambda v: 0 <= v < float("inf"), "a finite number >= 0")


def positive_number(text: str) -> float:
    return _number(text, lambda v: 0 < v < float("inf"), "a finite number > 0")


class TooLongLines:
    """Reports the sources over the model's max_len as one line each on stderr, naming where
    each came from (``--input FILE line N``, ``standard input line N``, ``TEXT N``), and
    counts the refused ones."""

    def __init__(self, command: str, source: str) -> None:
        self.command, self.source, self.refused, self.first = command, source, 0, 1

    def at(self, first: int) -> TooLongLines:
        """The reporter for a batch whose first line is line ``first`` (from 1)."""
        self.first = first
        return self

    def unmet(self, report) -> None:
        """A line refused for its prefix or constraints (a :class:`attnlab.inference.translator.
        Refused`)."""
        self.refused += 1
        where = f"{self.source} {self.first + report.index:,}"
        print(
            f"attnlab {self.command}: error: {where}: {report.describe()}; its output line is "
            f"left empty",
            file=sys.stderr,
            flush=True,
        )

    def __call__(self, report) -> None:
        where = f"{self.source} {self.first + report.index:,}"
        if report.refused:
            self.refused += 1
            print(
                f"attnlab {self.command}: error: {where}: {report.describe()} (--too-long "
                f"refuse); its output line is left empty",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(
                f"attnlab {self.command}: note: {where}: {report.describe()} (--too-long "
                f"refuse would leave it out)",
                file=sys.stderr,
                flush=True,
            )


# -- evaluate ----------------------------------------------------------------------------------


def _extend_evaluate(evaluate: argparse.ArgumentParser) -> None:
    evaluate.description = (evaluate.description or "") + (
        " --src FILE --ref FILE scores the model on any parallel text instead (one sentence a "
        "line; a language model takes --src alone and is scored by perplexity). MODEL may be "
        "OUT/model, a checkpoint OUT/checkpoints/step-N or a run OUT."
    )
    evaluate.add_argument("--src", default=None, metavar="FILE", help="source sentences")
    evaluate.add_argument("--ref", default=None, metavar="FILE", help="their references")
    add_input_bound_flags(evaluate)
    evaluate.add_argument(
        "--alpha",
        type=non_negative,
        default=None,
        help="beam search's length penalty (the job's [eval] alpha; 0.6 with --src)",
    )
    job_evaluate = evaluate.get_default("func")
    evaluate.set_defaults(func=resolving(functools.partial(cmd_evaluate, job_evaluate)))


def _read_lines(path: str, flag: str, errors: str = "strict") -> list[str]:
    """The lines of ``path`` (``flag`` names it in errors), decoded line by line as
    ``--errors`` says (:mod:`attnlab.cli._lines`)."""
    from ._lines import read_lines

    return list(read_lines(path, flag, errors))


_SCORED_WITHOUT_DECODING = {
    "lm": "a language model is scored by its perplexity",
    "vit": "an image classifier is scored by its accuracy",
}


def _check_decoding_flags(args: argparse.Namespace, kind: str) -> None:
    """``--beam-size`` / ``--alpha`` on a model that is not decoded (a language model, a ViT):
    refused, rather than accepted and ignored."""
    reason = _SCORED_WITHOUT_DECODING.get(kind)
    if reason is None:
        return
    given = (("--beam-size", args.beam_size), ("--alpha", args.alpha))
    for flag, value in (*given, ("--tokenized-bleu", args.tokenized_bleu or None)):
        if value is not None:
            raise ValueError(
                f"{flag}: {args.model} holds a {kind!r} model, and {reason}, without beam "
                f"search; drop {flag}"
            )


def cmd_evaluate(job_evaluate: Callable, args: argparse.Namespace) -> int:
    from ..inference.modeldir import kind_of

    device_of(args.device)  # --device cuda without CUDA: before any work
    kind = kind_of(args.model)
    _check_decoding_flags(args, kind)
    if args.src is None and args.ref is None:
        for flag, default in (("too_long", "cut"), ("errors", "strict")):
            if getattr(args, flag) != default:
                raise ValueError(
                    f"--{flag.replace('_', '-')}: applies to the files of --src/--ref; the "
                    f"job's own split was read and bounded when it was built"
                )
        return job_evaluate(args)
    if args.split is not None:
        raise ValueError("--split: scores the job's own split; --src/--ref score files: choose one")
    if kind == "lm":
        if args.too_long == "refuse":
            raise ValueError(
                "--too-long: refuse leaves translations out; a language model's perplexity "
                "is measured on each line's first max_len tokens (cut)"
            )
        return _evaluate_lm_file(args)
    check_kind(args.model, {"transformer"}, "evaluate --src/--ref", "--model")
    if args.src is None or args.ref is None:
        missing = "--ref" if args.ref is None else "--src"
        raise ValueError(f"{missing}: required with {'--src' if missing == '--ref' else '--ref'}")
    from ..inference.scores import Translator, score
    from .jobs import print_scores

    sources = _read_lines(args.src, "--src", args.errors)
    references = _read_lines(args.ref, "--ref", args.errors)
    if len(sources) != len(references):
        raise ValueError(
            f"--ref: {args.ref} has {len(references):,} lines, but --src {args.src} has "
            f"{len(sources):,}; one reference per source line expected"
        )
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    if not sources:
        raise ValueError(f"--src: {args.src}: no lines to score")
    decoding, notice = decoding_of(args, "evaluate")
    beam, alpha = decoding.beam_size, decoding.alpha
    translator = Translator.load(
        args.model, decoding=decoding, device=device_of(args.device), too_long=args.too_long
    )
    if notice:
        print(notice, file=sys.stderr, flush=True)
    too_long = TooLongLines("evaluate", f"--src {args.src} line")
    hypotheses = translator.translate(sources, on_too_long=too_long)
    status = EXIT_REFUSED if too_long.refused else 0
    lang = _target_language(args.model) if args.tokenized_bleu else None
    result = score(hypotheses, references, tokenized_lang=lang).to_dict()
    result.update(
        {"split": Path(args.src).name, "task": "files", "beam_size": beam, "alpha": alpha}
    )
    if args.json:
        if not args.tokenized_bleu:
            del result["bleu_tokenized"], result["bleu_tokenized_signature"]
        print(json.dumps(result))
        return status
    result["examples"] = [
        {"source": s, "hypothesis": h, "reference": r}
        for s, h, r in zip(sources, hypotheses, references, strict=True)
        if h != r
    ]
    print_scores(result, show=args.show, beam_size=beam, tokenized=args.tokenized_bleu)
    return status


def _target_language(model_dir: str) -> str:
    """The target language of the task the model in ``model_dir`` was trained on (its
    job.json), for ``--tokenized-bleu``; ValueError naming the flag without one."""
    from ..inference.modeldir import read_job_file

    try:
        lang = read_job_file(model_dir)["task"]["tgt_lang"]
    except (OSError, ValueError, KeyError, TypeError):
        lang = None
    if not isinstance(lang, str) or not lang:
        raise ValueError(
            f"--tokenized-bleu: {model_dir} names no target language (task.tgt_lang of a "
            f"job.json), which Moses tokenisation needs"
        )
    return lang


def _evaluate_lm_file(args: argparse.Namespace) -> int:
    from ..inference.scores import lm_perplexity, load_with_tokenizers
    from .jobs import print_scores

    if args.ref is not None or args.src is None:
        raise ValueError("--ref: a language model is scored on --src FILE alone (perplexity)")
    lines = _read_lines(args.src, "--src", args.errors)
    if args.limit:
        lines = lines[: args.limit]
    model, tokenizer, _ = load_with_tokenizers(args.model, device=device_of(args.device))
    result = lm_perplexity(model, tokenizer, lines)
    result.update({"split": Path(args.src).name, "task": "text"})  # a language model's scores
    if args.json:
        print(json.dumps(result))
    else:
        print_scores(result)
    return 0


# -- average -----------------------------------------------------------------------------------


def cmd_average(args: argparse.Namespace) -> int:
    import shutil

    from .._io import atomic_write, atomic_write_dir
    from ..inference.modeldir import resolve_model_dir
    from ..models.saved import read_config_file
    from ..train.checkpoint import average_checkpoints

    dirs = [resolve_model_dir(path, name="CKPT") for path in args.checkpoints]
    configs = []
    for path, directory in zip(args.checkpoints, dirs, strict=True):
        if not (directory / "model.safetensors").is_file():
            raise FileNotFoundError(f"CKPT: {path} holds no model.safetensors")
        configs.append(read_config_file(directory))
    for path, config in zip(args.checkpoints[1:], configs[1:], strict=True):
        if config != configs[0]:
            raise ValueError(
                f"CKPT: {path} has another config.json than {args.checkpoints[0]}; only "
                f"checkpoints of one model average"
            )
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"--out: {out} exists; choose another, or pass --overwrite")
    weights, metadata = average_checkpoints(dirs)

    def write(temp: Path) -> None:
        from safetensors.torch import save_file

        newest = dirs[-1]
        atomic_write(temp / "model.safetensors", lambda p: save_file(weights, p, metadata=metadata))
        for file in newest.iterdir():  # config, tokenizers, job.json (links in a view)
            skip = {"model.safetensors", "optimizer.safetensors", "state.json"}
            if file.name not in skip and file.is_file():
                shutil.copyfile(file, temp / file.name)

    atomic_write_dir(out, write)
    print(f"averaged {len(dirs)} checkpoints into {out}/")
    return 0


def add_parsers(sub) -> None:
    average = sub.add_parser(
        "average",
        help="average checkpoints into one model directory",
        description=(
            "Average the weights of checkpoints (OUT/checkpoints/step-N, or model directories "
            "of the same model) element-wise, as the paper's final models (sec. 6.1), into "
            "--out, a model directory with the newest one's config and its run's tokenizers; "
            "translate, evaluate and serve read it."
        ),
    )
    average.add_argument("checkpoints", nargs="+", metavar="CKPT", help="checkpoint directories")
    add_out_flag(average, "the model directory to write; required", required=True)
    add_overwrite_flag(average)
    average.set_defaults(func=cmd_average)

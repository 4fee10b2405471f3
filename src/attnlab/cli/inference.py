"""Using trained models: the decoding options of ``translate``, ``evaluate`` on any parallel
text, ``average`` of checkpoints, and one resolver for every command that takes a model.

`extend` runs after the other groups have added their parsers: it adds options to
``translate`` and ``evaluate`` (defined in `jobs`) and routes every command's model argument
(``--model``, viz's ``MODEL``, export's ``MODEL_DIR``) through
:func:`attnlab.modeldir.resolve_model_dir`, so that each also takes a checkpoint
``OUT/checkpoints/step-N`` or a run ``OUT``. `add_parsers` adds ``average``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ._args import device_of, positive_int

#: model_type (config.json) -> what it is, and the command that uses it.
KINDS = {
    "transformer": ("a Transformer (a translation model)", "attnlab translate"),
    "lm": ("a TransformerLM (a language model)", "attnlab generate"),
    "vit": ("a VisionTransformer (an image classifier)", "attnlab predict"),
    "encoder": ("a TransformerEncoder (an encoder without a decoder)", "attnlab viz attention"),
}

#: The argument that names a model, by attribute, as the errors name it.
_MODEL_ARGS = {"model": "--model", "model_dir": "MODEL_DIR"}


def check_kind(directory: str | os.PathLike, wanted: Iterable[str], command: str, flag: str):
    """Refuse, in one line naming the kind found and the command that fits, a model of another
    kind than ``wanted`` (model_type names)."""
    from ..modeldir import kind_of

    kind = kind_of(directory)
    if kind in wanted or kind == "unknown":
        return
    what, use = KINDS.get(kind, (f"a {kind!r} model", None))
    hint = f"; use {use}" if use and use.split()[1] != command else ""
    raise ValueError(f"{flag}: {directory} is {what}; attnlab {command} needs another kind{hint}")


def resolving(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``func`` with its model argument resolved first (a checkpoint or a run to a model
    directory)."""
    from ..modeldir import resolve_model_dir

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        _merge_model_flag(args)
        for attr, flag in _MODEL_ARGS.items():
            value = getattr(args, attr, None)
            if isinstance(value, str):
                name = "MODEL" if args.command == "viz" else flag
                setattr(args, attr, str(resolve_model_dir(value, name=name)))
        return func(args)

    return run


def _merge_model_flag(args: argparse.Namespace) -> None:
    """``--model`` where the model was positional (viz's MODEL, export's MODEL_DIR): the
    positional stays, as a deprecated alias (its help says so; it prints nothing, so that
    scripts reading stderr keep working)."""
    if not hasattr(args, "model_flag"):
        return
    attr = "model_dir" if hasattr(args, "model_dir") else "model"
    positional, flag = getattr(args, attr), args.model_flag
    if positional is not None and flag is not None:
        raise ValueError(f"--model: given twice (--model {flag} and {positional}); keep --model")
    if positional is None and flag is None:
        raise ValueError("--model: required (a model directory, checkpoint or run)")
    setattr(args, attr, positional if flag is None else flag)


def _add_model_flag(parser: argparse.ArgumentParser) -> None:
    """Give a parser whose model is positional a ``--model`` flag, the positional optional."""
    for action in parser._actions:
        if not action.option_strings and action.dest in _MODEL_ARGS:
            action.nargs, action.default, action.required = "?", None, False
            action.help = f"{action.help} (deprecated: use --model)"
            parser.add_argument(
                "--model",
                dest="model_flag",
                metavar="MODEL",
                default=None,
                help="model directory (OUT/model)",
            )
            return


def _walk(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _walk(child)


def extend(sub) -> None:
    """Add the inference options to ``translate`` and ``evaluate`` and resolve every command's
    model argument (see the module's docstring)."""
    _extend_translate(sub.choices["translate"])
    _extend_evaluate(sub.choices["evaluate"])
    for parser in sub.choices.values():
        for each in _walk(parser):
            _add_model_flag(each)
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


def _non_negative(text: str) -> float:
    return _number(text, lambda v: 0 <= v < float("inf"), "a finite number >= 0")


def positive_number(text: str) -> float:
    return _number(text, lambda v: 0 < v < float("inf"), "a finite number > 0")


def _extend_translate(translate: argparse.ArgumentParser) -> None:
    translate.description = (
        "Translate TEXT arguments, standard input line by line (no TEXT, or '-'), or a file "
        "(-i), in batches, with beam search (or greedy with --beam-size 1, or sampling with "
        "--sample); one translation per line, in order. A file is read in bounded chunks of "
        "--batch-lines lines (memory stays flat however long it is), with a progress bar on "
        "a terminal; -o writes the output file atomically (all of it, or nothing). MODEL may "
        "be OUT/model, a checkpoint OUT/checkpoints/step-N or a run OUT."
    )
    translate.add_argument(
        "--alpha", type=_non_negative, default=0.6, help="beam search's length penalty (0.6)"
    )
    translate.add_argument(
        "--max-len",
        type=positive_int,
        default=None,
        help="the longest translation in tokens (the source length + 50)",
    )
    translate.add_argument(
        "--n-best",
        type=positive_int,
        default=None,
        metavar="N",
        help="the N best translations of each line (N <= --beam-size), best first, one a line "
        "as SCORE<tab>TEXT; SCORE is log P / length penalty",
    )
    translate.add_argument(
        "--sample", action="store_true", help="draw each token instead of searching"
    )
    translate.add_argument(
        "--temperature", type=positive_number, default=1.0, help="--sample: temperature (1.0)"
    )
    translate.add_argument(
        "--top-k", type=positive_int, default=None, help="--sample: keep the k most probable"
    )
    translate.add_argument(
        "--top-p", type=probability, default=None, help="--sample: nucleus mass, in (0, 1]"
    )
    translate.add_argument("--seed", type=int, default=None, help="--sample: random seed")
    translate.add_argument(
        "-i", "--input", default=None, metavar="FILE", help="translate the lines of FILE"
    )
    translate.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write to FILE instead of stdout"
    )
    translate.set_defaults(func=resolving(cmd_translate))


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in lines:
        batch.append(line.rstrip("\r\n"))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def cmd_translate(args: argparse.Namespace) -> int:
    from ..evaluate import Translator

    sampling = (args.temperature != 1.0, args.top_k, args.top_p, args.seed)
    if not args.sample and any(option is not None and option is not False for option in sampling):
        names = ("--temperature", "--top-k", "--top-p", "--seed")
        given = [
            n for n, v in zip(names, sampling, strict=True) if v is not None and v is not False
        ]
        raise ValueError(f"{', '.join(given)}: only with --sample")
    if args.n_best is not None and args.sample:
        raise ValueError("--n-best: n-best lists come from beam search; not with --sample")
    if args.n_best is not None and args.n_best > args.beam_size:
        raise ValueError(
            f"--n-best: expected at most --beam-size ({args.beam_size}), got {args.n_best}"
        )
    if args.input and args.text:
        raise ValueError("--input: give either a FILE or TEXT arguments, not both")
    if args.input and not Path(args.input).is_file():
        raise FileNotFoundError(f"--input: {args.input}: no such file")
    if args.output and args.input and Path(args.output).resolve() == Path(args.input).resolve():
        raise ValueError("--output: the same file as --input; choose another")
    device = device_of(args.device)
    check_kind(args.model, {"transformer"}, "translate", "--model")
    options = {
        "beam_size": args.beam_size,
        "alpha": args.alpha,
        "max_tokens": args.max_tokens,
        "max_new_tokens": args.max_len,
        "sample": args.sample,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
    }
    if getattr(args, "quantize", None):
        options["quantize"] = args.quantize
    loaded = Translator.load(args.model, device=device, **options)

    def translate(batch: list[str]) -> list[str]:
        if args.n_best is None:
            return loaded.translate(batch)
        return [
            "\n".join(f"{score:.4f}\t{text}" for score, text in found)
            for found in loaded.n_best(batch, args.n_best)
        ]

    def translations(write: Callable[[str], object]) -> None:
        if args.text and args.text != ["-"]:
            for line in translate(args.text):
                write(line + "\n")
            return
        if not args.input:
            for batch in _chunks(sys.stdin, args.batch_lines):
                for line in translate(batch):
                    write(line + "\n")
            return
        from tqdm import tqdm

        size = Path(args.input).stat().st_size
        with (
            open(args.input, encoding="utf-8") as source,
            tqdm(
                total=size,
                unit="B",
                unit_scale=True,
                desc="translate",
                disable=not sys.stderr.isatty(),
                file=sys.stderr,
            ) as bar,
        ):
            for batch in _chunks(source, args.batch_lines):
                for line in translate(batch):
                    write(line + "\n")
                bar.update(sum(len(line.encode("utf-8")) + 1 for line in batch))

    if args.output:
        from .._io import atomic_write

        def fill(path: str) -> None:
            with open(path, "w", encoding="utf-8") as out:
                translations(out.write)

        atomic_write(args.output, fill)
        return 0

    def emit(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    translations(emit)
    return 0


# -- evaluate ----------------------------------------------------------------------------------


def _extend_evaluate(evaluate: argparse.ArgumentParser) -> None:
    evaluate.description = (evaluate.description or "") + (
        " --src FILE --ref FILE scores the model on any parallel text instead (one sentence a "
        "line; a language model takes --src alone and is scored by perplexity). MODEL may be "
        "OUT/model, a checkpoint OUT/checkpoints/step-N or a run OUT."
    )
    evaluate.add_argument("--src", default=None, metavar="FILE", help="source sentences")
    evaluate.add_argument("--ref", default=None, metavar="FILE", help="their references")
    evaluate.add_argument(
        "--alpha",
        type=_non_negative,
        default=None,
        help="beam search's length penalty (the job's [eval] alpha; 0.6 with --src)",
    )
    job_evaluate = evaluate.get_default("func")
    evaluate.set_defaults(func=resolving(functools.partial(cmd_evaluate, job_evaluate)))


def _read_lines(path: str, flag: str) -> list[str]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{flag}: {path}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{flag}: {path}: not UTF-8 text") from None
    return text.splitlines()


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
    for flag, value in (("--beam-size", args.beam_size), ("--alpha", args.alpha)):
        if value is not None:
            raise ValueError(
                f"{flag}: {args.model} holds a {kind!r} model, and {reason}, without beam "
                f"search; drop {flag}"
            )


def cmd_evaluate(job_evaluate: Callable, args: argparse.Namespace) -> int:
    from ..modeldir import kind_of

    device_of(args.device)  # --device cuda without CUDA: before any work
    kind = kind_of(args.model)
    _check_decoding_flags(args, kind)
    if args.src is None and args.ref is None:
        return job_evaluate(args)
    if args.split is not None:
        raise ValueError("--split: scores the job's own split; --src/--ref score files: choose one")
    if kind == "lm":
        return _evaluate_lm_file(args)
    check_kind(args.model, {"transformer"}, "evaluate --src/--ref", "--model")
    if args.src is None or args.ref is None:
        missing = "--ref" if args.ref is None else "--src"
        raise ValueError(f"{missing}: required with {'--src' if missing == '--ref' else '--ref'}")
    from ..evaluate import Translator, score
    from .jobs import print_scores

    sources = _read_lines(args.src, "--src")
    references = _read_lines(args.ref, "--ref")
    if len(sources) != len(references):
        raise ValueError(
            f"--ref: {args.ref} has {len(references):,} lines, but --src {args.src} has "
            f"{len(sources):,}; one reference per source line expected"
        )
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    if not sources:
        raise ValueError(f"--src: {args.src}: no lines to score")
    beam = args.beam_size or 4
    alpha = 0.6 if args.alpha is None else args.alpha
    translator = Translator.load(
        args.model, beam_size=beam, alpha=alpha, device=device_of(args.device)
    )
    hypotheses = translator.translate(sources)
    result = score(hypotheses, references).to_dict()
    result.update(
        {"split": Path(args.src).name, "task": "files", "beam_size": beam, "alpha": alpha}
    )
    if args.json:
        print(json.dumps(result))
        return 0
    result["examples"] = [
        {"source": s, "hypothesis": h, "reference": r}
        for s, h, r in zip(sources, hypotheses, references, strict=True)
        if h != r
    ]
    print_scores(result, show=args.show, beam_size=beam)
    return 0


def _evaluate_lm_file(args: argparse.Namespace) -> int:
    from ..evaluate import lm_perplexity, load_with_tokenizers
    from .jobs import print_scores

    if args.ref is not None or args.src is None:
        raise ValueError("--ref: a language model is scored on --src FILE alone (perplexity)")
    lines = _read_lines(args.src, "--src")[: args.limit] if args.limit else None
    if lines is None:
        lines = _read_lines(args.src, "--src")
    model, tokenizer, _ = load_with_tokenizers(args.model, device=device_of(args.device))
    result = lm_perplexity(model, tokenizer, lines)
    result.update({"split": Path(args.src).name, "task": "files"})
    if args.json:
        print(json.dumps(result))
    else:
        print_scores(result)
    return 0


# -- average -----------------------------------------------------------------------------------


def cmd_average(args: argparse.Namespace) -> int:
    import shutil

    from .._io import atomic_write, atomic_write_dir
    from ..modeldir import resolve_model_dir
    from ..train.checkpoint import average_checkpoints

    dirs = [resolve_model_dir(path, name="CKPT") for path in args.checkpoints]
    configs = []
    for path, directory in zip(args.checkpoints, dirs, strict=True):
        if not (directory / "model.safetensors").is_file():
            raise FileNotFoundError(f"CKPT: {path} holds no model.safetensors")
        configs.append(json.loads((directory / "config.json").read_text(encoding="utf-8")))
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
    average.add_argument("--out", required=True, metavar="DIR", help="the model directory")
    average.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    average.set_defaults(func=cmd_average)

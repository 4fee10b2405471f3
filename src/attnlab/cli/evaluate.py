"""``attnlab evaluate``: score a trained model on its job's split (:func:`attnlab.jobs.
evaluate_model`), or on any parallel text (``--src FILE --ref FILE``; a language model on
``--src`` alone, by perplexity); and :func:`print_scores`, the lines of a result, which
``attnlab train`` prints too."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ._args import (
    add_device_flag,
    add_engine_flag,
    add_input_bound_flags,
    add_json_flag,
    add_model_flag,
    add_threads_flag,
    apply_threads,
    decoding_of,
    device_of,
    engine_of,
    non_negative,
    positive_int,
)
from ._lines import read_lines
from ._model import EXIT_REFUSED, TooLongLines, check_kind, model_dirs, resolving


def print_scores(
    result: dict, task, show: int = 3, beam_size: int | None = None, tokenized: bool = False
) -> None:
    """Print the result's lines as ``task`` (the task, or its class, that scored it) writes
    them (no scores: a job without a test split)."""
    if result.get("split") is None:
        print("no test split: nothing scored on test")
        return
    for line in task.report(result, show=show, beam_size=beam_size, tokenized=tokenized):
        print(line)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score the model on its job's split, or on the parallel text of --src/--ref."""
    from ..inference.modeldir import kind_of

    models = model_dirs(args)  # several: an ensemble
    args.model = models[0]
    device_of(args.device)  # --device cuda without CUDA: before any work
    kind = kind_of(args.model)
    _check_decoding_flags(args, kind)
    engine_of(args, len(models))  # what the engine cannot do: before any work
    apply_threads(args)
    if len(models) > 1:
        for model in models:
            check_kind(model, {"transformer"}, "evaluate", "--model")
    if args.src is None and args.ref is None:
        for flag, default in (("too_long", "cut"), ("errors", "strict")):
            if getattr(args, flag) != default:
                raise ValueError(
                    f"--{flag.replace('_', '-')}: applies to the files of --src/--ref; the "
                    f"job's own split was read and bounded when it was built"
                )
        return _evaluate_split(args)
    if args.split is not None:
        raise ValueError("--split: scores the job's own split; --src/--ref score files: choose one")
    if kind == "lm":
        if args.too_long == "refuse":
            raise ValueError(
                "--too-long: refuse leaves translations out; a language model's perplexity "
                "is measured on each line's first max_len tokens (cut)"
            )
        return _evaluate_lm_file(args)
    for model in models:
        check_kind(model, {"transformer"}, "evaluate --src/--ref", "--model")
    if args.src is None or args.ref is None:
        missing = "--ref" if args.ref is None else "--src"
        raise ValueError(f"{missing}: required with {'--src' if missing == '--ref' else '--ref'}")
    from ..inference.scores import score
    from ..inference.translator import Translator
    from ..tasks import TranslationTask

    sources = list(read_lines(args.src, "--src", args.errors))
    references = list(read_lines(args.ref, "--ref", args.errors))
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
        models,
        decoding=decoding,
        device=device_of(args.device),
        too_long=args.too_long,
        engine=args.engine,
    )
    if notice:
        print(notice, file=sys.stderr, flush=True)
    too_long = TooLongLines("evaluate", f"--src {args.src} line")
    hypotheses = translator.translate(sources, on_too_long=too_long)
    status = EXIT_REFUSED if too_long.refused else 0
    lang = _target_language(args.model) if args.tokenized_bleu else None
    bleu = _bleu_options(args.model)
    result = score(hypotheses, references, tokenized_lang=lang, **bleu).to_dict()
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
    print_scores(
        result, TranslationTask, show=args.show, beam_size=beam, tokenized=args.tokenized_bleu
    )
    return status


def _bleu_options(model_dir: str) -> dict[str, str | None]:
    """BLEU's tokenizer for the model in ``model_dir``, as its job.json says: the task's
    target language (``tgt_lang`` of :func:`attnlab.inference.scores.score`) and ``[eval]
    bleu_tokenize``; neither for a model without a job.json (BLEU's default, 13a)."""
    from .._rundir import read_job_file

    try:
        job = read_job_file(model_dir)
    except (OSError, ValueError):
        return {"tgt_lang": None, "bleu_tokenize": None}
    task, evals = job.get("task"), job.get("eval")
    lang = task.get("tgt_lang") if isinstance(task, dict) else None
    tokenize = evals.get("bleu_tokenize") if isinstance(evals, dict) else None
    return {
        "tgt_lang": lang if isinstance(lang, str) else None,
        "bleu_tokenize": tokenize if isinstance(tokenize, str) else None,
    }


def _target_language(model_dir: str) -> str:
    """The target language of the task the model in ``model_dir`` was trained on (its
    job.json), for ``--tokenized-bleu``; ValueError naming the flag without one."""
    lang = _bleu_options(model_dir)["tgt_lang"]
    if not lang:
        raise ValueError(
            f"--tokenized-bleu: {model_dir} names no target language (task.tgt_lang of a "
            f"job.json), which Moses tokenisation needs"
        )
    return lang


def _evaluate_lm_file(args: argparse.Namespace) -> int:
    from ..inference.modeldir import load_with_tokenizers
    from ..inference.scores import lm_perplexity
    from ..tasks.text import Text

    if args.ref is not None or args.src is None:
        raise ValueError("--ref: a language model is scored on --src FILE alone (perplexity)")
    lines = list(read_lines(args.src, "--src", args.errors))
    if args.limit:
        lines = lines[: args.limit]
    model, tokenizer, _ = load_with_tokenizers(args.model, device=device_of(args.device))
    result = lm_perplexity(model, tokenizer, lines)
    result.update({"split": Path(args.src).name, "task": "text"})  # a language model's scores
    if args.json:
        print(json.dumps(result))
    else:
        print_scores(result, Text)
    return 0


def _evaluate_split(args: argparse.Namespace) -> int:
    """The job's own split (no --src/--ref): :func:`attnlab.jobs.evaluate_model`."""
    from ..jobs import evaluate_model, read_job

    models = model_dirs(args)
    job = read_job(args.model)
    flags = job.eval.decoding.updated(beam_size=args.beam_size, alpha=args.alpha)
    result = evaluate_model(
        models if len(models) > 1 else args.model,
        job=job,
        split=args.split,
        decoding=flags if job.task.decodes else None,  # the others refuse --beam-size
        engine=args.engine,
        limit=args.limit,
        device=device_of(args.device),
    )  # split None: the task's own (test, or valid for a language model)
    view = job.task.json_view(result, tokenized=args.tokenized_bleu, model=" + ".join(models))
    if args.json:
        print(json.dumps(view))
        return 0
    tokenized = args.tokenized_bleu
    print_scores(result, job.task, show=args.show, beam_size=args.beam_size, tokenized=tokenized)
    return 0


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
    engine = args.engine if args.engine != "torch" else None
    given = (("--beam-size", args.beam_size), ("--alpha", args.alpha), ("--engine", engine))
    for flag, value in (*given, ("--tokenized-bleu", args.tokenized_bleu or None)):
        if value is not None:
            raise ValueError(
                f"{flag}: {args.model} holds a {kind!r} model, and {reason}, without beam "
                f"search; drop {flag}"
            )


def add_parsers(sub) -> None:
    evaluate = sub.add_parser(
        "evaluate",
        help="score a trained model on its task: sacreBLEU, chrF, exact match; accuracy",
        description=(
            "Translate a split of the model's task (from its job.json) with beam search and "
            "score it: sacreBLEU BLEU and chrF (cased, detokenised; signatures printed) and "
            "exact match. Where most references are shorter than 4 tokens, exact match and "
            "chrF are the headline and BLEU comes with a note (it has no 4-grams to count). "
            "--json prints one object with bleu, chrf, exact_match (a fraction), headline (the "
            "keys to read first), short_references, note and the signatures. "
            "A language model is scored by perplexity; a Vision Transformer (the digits task) "
            "by accuracy (--json: accuracy, correct, images, per_class)."
            " --src FILE --ref FILE scores the model on any parallel text instead (one sentence a "
            "line; a language model takes --src alone and is scored by perplexity). MODEL may be "
            "OUT/model, a checkpoint OUT/checkpoints/step-N or a run OUT."
        ),
    )
    add_model_flag(evaluate, many=True)
    evaluate.add_argument(
        "--split",
        choices=("test", "valid", "train"),
        default=None,
        help="split (test; valid for a language model)",
    )
    evaluate.add_argument("--beam-size", type=positive_int, default=None, help="beam")
    evaluate.add_argument("--limit", type=positive_int, default=None, help="first N pairs")
    evaluate.add_argument(
        "--show", type=positive_int, default=3, help="held-out examples to print (3)"
    )
    add_json_flag(evaluate)
    evaluate.add_argument(
        "--tokenized-bleu",
        action="store_true",
        help="also BLEU as the text-only Multi30K literature reports it: lowercased, "
        "Moses-tokenised (sacremoses) for the task's target language, no further tokenisation",
    )
    add_device_flag(evaluate)
    add_engine_flag(evaluate)
    add_threads_flag(evaluate)
    evaluate.add_argument("--src", default=None, metavar="FILE", help="source sentences")
    evaluate.add_argument("--ref", default=None, metavar="FILE", help="their references")
    add_input_bound_flags(evaluate)
    evaluate.add_argument(
        "--alpha",
        type=non_negative,
        default=None,
        help="beam search's length penalty (the job's [eval] alpha; 0.6 with --src)",
    )
    evaluate.set_defaults(func=resolving(cmd_evaluate))

"""``attnlab translate``, ``evaluate`` and ``serve``: jobs on trained models (``train``, which
makes them, is :mod:`attnlab.cli.train`), and the printing of scores that ``train`` shares."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._args import (
    QUANTIZE_METAVAR,
    add_device_flag,
    add_json_flag,
    add_model_flag,
    device_of,
    positive_int,
)


def print_scores(
    result: dict, show: int = 3, beam_size: int | None = None, tokenized: bool = False
) -> None:
    """Print the result's lines as its task writes them (no scores: a job without a test
    split)."""
    from ..tasks import get_task

    if result.get("split") is None:
        print("no test split: nothing scored on test")
        return
    for line in get_task(result["task"]).report(
        result, show=show, beam_size=beam_size, tokenized=tokenized
    ):
        print(line)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..jobs import evaluate_model

    result = evaluate_model(
        args.model,
        split=args.split,
        beam_size=args.beam_size,
        alpha=args.alpha,
        limit=args.limit,
        device=device_of(args.device),
    )  # split None: the task's own (test, or valid for a language model)
    from ..tasks import get_task

    view = get_task(result["task"]).json_view(
        result, tokenized=args.tokenized_bleu, model=str(args.model)
    )
    if args.json:
        print(json.dumps(view))
        return 0
    print_scores(result, show=args.show, beam_size=args.beam_size, tokenized=args.tokenized_bleu)
    return 0


def _queue_size(text: str) -> int:
    """``--queue``: 0 to 256."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 256:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 256, got {text!r}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serve import run
    from ..serve.limits import Limits

    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"--model: {args.model}: no such model directory (OUT/model)")
    if not 0 < args.request_timeout <= 3600:
        raise ValueError(
            f"--request-timeout: expected 0 < seconds <= 3600, got {args.request_timeout}"
        )
    limits = Limits(
        queue=args.queue,
        request_timeout=args.request_timeout,
        attention_elements=args.max_weights,
    )
    from ._args import decoding_of

    device = device_of(args.device)  # --device cuda without CUDA: before anything is said
    decoding, notice = decoding_of(args, "serve")
    run(
        args.model,
        host=args.host,
        port=args.port,
        decoding=decoding,
        limits=limits,
        allow_hosts=args.allow_host or (),
        device=device,
        notice=notice,
    )
    return 0


def add_parsers(sub) -> None:
    translate = sub.add_parser(
        "translate",
        help="translate text with a trained model (beam search)",
        description=(
            "Translate TEXT arguments, or standard input line by line (no TEXT, or '-'), in "
            "batches, with beam search; one translation per line, in order."
        ),
    )
    add_model_flag(translate)
    translate.add_argument("text", nargs="*", help="sentences; none or '-' reads stdin")
    translate.add_argument(
        "--beam-size",
        type=positive_int,
        default=None,
        help="beam; default: the model's recipe ([eval] of its job.json), else 4",
    )
    translate.add_argument(
        "--max-tokens", type=positive_int, default=4096, help="source tokens per batch (4096)"
    )
    translate.add_argument(
        "--batch-lines", type=positive_int, default=64, help="stdin lines per batch (64)"
    )
    add_device_flag(translate)
    translate.add_argument(
        "--quantize",
        choices=["int8"],
        default=None,
        metavar=QUANTIZE_METAVAR,
        help="int8: decode with int8 weights (CPU, float32 models; faster for batches)",
    )
    # Its command is cli/translate.py's cmd_translate (inference.extend adds its options).

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
        ),
    )
    add_model_flag(evaluate)
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
    evaluate.set_defaults(func=cmd_evaluate)


def add_serve_parser(sub) -> None:
    """``serve``, separate from `add_parsers`: it is listed before ``viz`` in --help."""
    serve = sub.add_parser(
        "serve",
        help="the attention explorer: a web page and JSON API over a trained model",
        description=(
            "Serve the attention explorer of an encoder-decoder model trained by `attnlab "
            "train`: a page at / and a JSON API under /api (docs/serve.md). It binds the "
            "loopback interface by default and answers only requests addressed to it (the Host "
            "header); the API has no authentication. The model runs one request at a time, "
            "with --queue more waiting; beyond, or after --request-timeout, a request gets a "
            "503 with Retry-After. --port 0 picks a free port; the URL printed has the real one."
        ),
    )
    add_model_flag(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port, 0 picks a free one (8000)")
    serve.add_argument(
        "--beam-size",
        type=positive_int,
        default=None,
        help="default beam, 1-16; default: the model's recipe ([eval] of its job.json), else 4",
    )
    add_device_flag(serve)
    serve.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="also answer requests whose Host header is NAME (repeatable; the loopback names "
        "and --host always; '*' any: no DNS-rebinding protection)",
    )
    serve.add_argument(
        "--queue",
        type=_queue_size,
        metavar="N",
        default=8,
        help="model requests that may wait while one runs, 0-256; more get a 503 (8)",
    )
    serve.add_argument(
        "--max-weights",
        type=positive_int,
        default=1 << 18,
        metavar="N",
        help="the most attention weights in one answer; the page fetches further layers as it "
        "shows them (262144)",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a model request's longest wait and run before its 503 (30)",
    )
    serve.set_defaults(func=cmd_serve)

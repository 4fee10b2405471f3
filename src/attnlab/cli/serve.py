"""``attnlab serve``: the attention explorer (:mod:`attnlab.serve`) over a trained model, a
page and a JSON API, and a translation service (LibreTranslate's ``/translate``, health,
metrics), decoding as the model's recipe chose unless told."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable

from ..inference.bounds import MAX_TOKENS
from ._args import (
    QUANTIZE_METAVAR,
    add_device_flag,
    add_engine_flag,
    add_model_flag,
    add_threads_flag,
    apply_threads,
    decoding_of,
    device_of,
    engine_of,
    number_in,
    positive_int,
)
from ._model import model_dirs, resolving


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text!r}"
            )
        return value

    return parse


def _delay(text: str) -> float:
    """``--batch-delay``: 0 to 1 second."""
    return number_in(text, lambda v: 0 <= v <= 1, "0 to 1 (seconds)")


def _pair(text: str) -> tuple[str, str]:
    """``--languages SRC,TGT``: two language codes."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise argparse.ArgumentTypeError(
            f"expected two different language codes as SRC,TGT (en,de), got {text!r}"
        )
    return parts[0], parts[1]


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serve import run
    from ..serve.explorer import page_refusal
    from ..serve.keys import Gate
    from ..serve.limits import Limits

    models = model_dirs(args)  # resolved (resolving); several: an ensemble (--api-only)
    args.model = models[0]
    engine = engine_of(args, len(models))  # what the engine cannot do: before any work
    why = None if args.api_only else page_refusal(engine, len(models))
    if why:
        raise ValueError(why)
    apply_threads(args)
    if not 0 < args.request_timeout <= 3600:
        raise ValueError(
            f"--request-timeout: expected 0 < seconds <= 3600, got {args.request_timeout}"
        )
    limits = Limits(
        queue=args.queue,
        request_timeout=args.request_timeout,
        attention_elements=args.max_weights,
        translate_waiting=args.translate_queue,
        batch_tokens=args.max_tokens,
        batch_delay=args.batch_delay,
        batching=args.batching,
    )
    try:  # the keys file before any work: one line naming it, the line and what was expected
        gate = Gate(args.api_keys, args.req_limit, args.char_limit, args.trusted_proxy)
    except ValueError as e:
        raise ValueError(f"--api-keys: {e}") from None
    device = device_of(args.device)  # --device cuda without CUDA: before anything is said
    decoding, notice = decoding_of(args, "serve")
    run(
        models if len(models) > 1 else models[0],
        host=args.host,
        port=args.port,
        decoding=decoding,
        limits=limits,
        allow_hosts=args.allow_host or (),
        device=device,
        notice=notice,
        api_only=args.api_only,
        languages_served=args.languages,
        engine=engine,
        quantize=args.quantize,
        gate=gate,
    )
    return 0


def add_parsers(sub) -> None:
    serve = sub.add_parser(
        "serve",
        help="the attention explorer and a translation service over a trained model",
        description=(
            "Serve the attention explorer of an encoder-decoder model trained by `attnlab "
            "train`: a page at / and a JSON API under /api; and a translation service: "
            "LibreTranslate's POST /translate and GET /languages, GET /health and GET /metrics "
            "(docs/serve.md). It binds the loopback interface by default and answers only "
            "requests addressed to it (the Host header); the API has no authentication. The "
            "explorer's model routes run one request at a time, with --queue more waiting; "
            "/translate requests that arrive together are decoded together, up to --max-tokens "
            "source tokens a batch, with --translate-queue sentences waiting; beyond, or after "
            "--request-timeout, a request gets a 503 with Retry-After. Ctrl-C or SIGTERM "
            "drains: the requests in flight are answered, new ones get a 503. --port 0 picks "
            "a free port; the URL printed has the real one."
        ),
    )
    add_model_flag(serve, many=True)
    add_engine_flag(serve)
    serve.add_argument(
        "--quantize",
        choices=["int8"],
        default=None,
        metavar=QUANTIZE_METAVAR,
        help="int8: decode with int8 weights (the torch engine's decoder, or CTranslate2's "
        "int8 compute type)",
    )
    add_threads_flag(serve)
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
        type=_bounded_int(0, 256),
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
    serve.add_argument(
        "--api-only",
        action="store_true",
        help="serve the JSON routes without the page (/ and /static/ are 404s)",
    )
    serve.add_argument(
        "--languages",
        type=_pair,
        default=None,
        metavar="SRC,TGT",
        help="the model's language codes for /translate and /languages; default: the task's "
        "in the model's job.json, else src,tgt",
    )
    serve.add_argument(
        "--max-tokens",
        type=positive_int,
        default=MAX_TOKENS,
        help=f"source tokens per batch ({MAX_TOKENS})",
    )
    serve.add_argument(
        "--batch-delay",
        type=_delay,
        default=0.005,
        metavar="SECONDS",
        help="right after a batch, how long the batcher may wait for more /translate requests; "
        "a request that finds the model idle never waits (0.005)",
    )
    serve.add_argument(
        "--batching",
        choices=("stream", "whole"),  # serve.limits.BATCHING (not imported before it runs)
        default="stream",
        help="stream: greedy /translate requests on the torch engine decode together a token "
        "at a time, new ones joining between tokens and each answered as it ends; whole: "
        "each batch is decoded whole (stream)",
    )
    serve.add_argument(
        "--translate-queue",
        type=_bounded_int(1, 4096),
        metavar="N",
        default=256,
        help="sentences that may wait for the translation batcher, 1-4096; more get a 503 (256)",
    )
    serve.add_argument(
        "--api-keys",
        metavar="FILE",
        help="only clients with a key in FILE may use the model routes and /metrics: one a line, "
        "KEY [requests=N] [characters=N] [name=NAME]; SIGHUP reads it again",
    )
    for flag, what in (("--req-limit", "model requests"), ("--char-limit", "characters of q")):
        serve.add_argument(
            flag,
            type=positive_int,
            metavar="N",
            help=f"{what} a client (a key, else an address) may send a minute; more get a 429 "
            "(default no limit; a key's own come first)",
        )
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        type=ipaddress.ip_address,
        default=[],
        metavar="ADDRESS",
        help="a proxy whose X-Forwarded-For names the client for the per-address limits "
        "(repeatable; default none: the connection's peer)",
    )
    serve.set_defaults(func=resolving(cmd_serve))

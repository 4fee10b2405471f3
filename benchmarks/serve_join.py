"""The stream's join rule, measured: when should waiting requests join the sentences decoding?

    python benchmarks/serve_join.py --model runs/numbers-256/model [--ratios 0,1,2,4,8,16]
        [--client-counts 8,32] [--threads 1,2] [--seconds 15] [--repeats 2]
        [--out benchmarks/results/serve_join.json]
    python benchmarks/serve_join.py --markdown [--out FILE]   # the table docs/serve.md quotes

The torch batcher of `attnlab serve` (greedy, ``--batching stream``) lets the requests waiting at
the head of the line join a running stream when their sentences are at least ``JOIN_RATIO``
times those decoding (``attnlab.serve.batcher``): a join costs an encoder call and a copy of
the key/value cache, so joining at every step (ratio 0) pays that cost for one or two sentences
at a time, while a high ratio makes requests wait for the stream to run low. This script starts
one server per ratio in ``--ratios`` (the ratio set in the server's process before it serves)
and one decoding whole batches (``--batching whole``), all side by side (an idle server costs no
CPU), and asks each in turn, with each of ``--client-counts`` clients asking one sentence a
request without pause for ``--seconds``; the whole sweep runs ``--repeats`` times, interleaved,
and each setting keeps its round with the most sentences/s (best of the repeats).

Correctness first: before any server starts, a Translator translates every sentence of the set
alone; every 200 answer of every round must be its sentence's (float32: a stream decodes each
sentence as it decodes alone), and only 200 or 503 may come back. The exit status is 1 if not.
It prints and saves, per thread count and client count, each setting's sentences/s (200s only),
its ratio to whole batches, its 503 share and its p50 / p99 latency (of the answered requests).
Run it alone on the machine: the servers share its cores with nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx

import serve_load as sl

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "serve_join.json"
WHOLE = "whole batches"

#: ``python -c`` of a server whose batcher joins at the ratio given as its first argument.
LAUNCH = (
    "import sys\n"
    "import attnlab.serve.batcher as batcher\n"
    "batcher.JOIN_RATIO = float(sys.argv.pop(1))\n"
    "print(f'serve_join: a server joining at JOIN_RATIO {batcher.JOIN_RATIO:g}', file=sys.stderr)\n"
    "from attnlab.cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


def setting_name(ratio: float | None) -> str:
    return WHOLE if ratio is None else f"ratio {ratio:g}"


def start(
    model: str, threads: int, ratio: float | None, queue: int
) -> tuple[subprocess.Popen, str]:
    """A server decoding whole batches (``ratio`` None) or streaming with ``ratio``."""
    flags = ("--engine", "torch", "--api-only", "--translate-queue", str(queue))
    if ratio is None:
        return sl.start_server(model, threads, queue, (*flags, "--batching", "whole"))
    python = (sys.executable, "-c", LAUNCH, str(ratio))
    return sl.start_server(model, threads, queue, (*flags, "--batching", "stream"), python=python)


def measure(model: str, threads: int, args: argparse.Namespace) -> dict:
    ratios: list[float | None] = [None, *(float(r) for r in args.ratios.split(","))]
    counts = [int(c) for c in args.client_counts.split(",")]
    texts = sl.sentences()
    alone = sl.references(model, "torch", threads, {"run": (None, texts)})["run"]
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for ratio in ratios:
            servers[setting_name(ratio)] = start(model, threads, ratio, args.queue)
        for _, url in servers.values():
            sl.wait_ready(url)
        language = httpx.get(next(iter(servers.values()))[1] + "languages", timeout=120).json()
        pair = (language[0]["code"], language[0]["targets"][0])
        rounds = []
        for repeat in range(args.repeats):
            for clients in counts:
                for name, (_, url) in servers.items():
                    before = batches(url)
                    found = sl.translate_round(
                        url, "batcher", clients, args.seconds, texts=texts, pair=pair,
                        beam=None, requests=10**9, seed=clients + 1000 * repeat,
                        references=alone,
                    )  # fmt: skip
                    count, answered = (a - b for a, b in zip(batches(url), before, strict=True))
                    found.update(setting=name, repeat=repeat, batches=count)
                    found["requests_per_batch"] = round(answered / count, 2) if count else None
                    rounds.append(found)
    finally:
        sl.stop_servers(servers)
    return {
        "model": model,
        "shape": sl.model_shape(model),
        "threads": threads,
        "settings": list(servers),
        "client_counts": counts,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "latency": sl.LATENCY_NOTE,
        "rounds": rounds,
        "best": best_rounds(rounds),
    }


def batches(url: str) -> tuple[float, float]:
    """The server's batches so far and the requests they answered (``/metrics``): in a stream,
    each group of requests that joined together counts as one."""
    text = httpx.get(url + "metrics", timeout=120).text
    found = dict(re.findall(r"^attnlab_batch_requests_(count|sum) (\S+)$", text, re.M))
    return float(found.get("count", 0)), float(found.get("sum", 0))


def best_rounds(rounds: list[dict]) -> list[dict]:
    """Per client count and setting, its round with the most sentences/s, with that figure over
    whole batches' best at the same count."""
    best: dict[tuple[int, str], dict] = {}
    for r in rounds:
        key = (r["clients"], r["setting"])
        if key not in best or r["sentences_per_second"] > best[key]["sentences_per_second"]:
            best[key] = r
    rows = []
    for (clients, setting), r in best.items():
        whole = best.get((clients, WHOLE))
        rows.append(
            {
                "clients": clients,
                "setting": setting,
                "sentences_per_second": r["sentences_per_second"],
                "over_whole": sl._ratio(
                    r["sentences_per_second"], whole and whole["sentences_per_second"]
                ),
                "share_503": r["share_503"],
                "requests_per_batch": r["requests_per_batch"],
                "p50_ms": r["p50_ms"],
                "p99_ms": r["p99_ms"],
            }
        )
    return rows


def table(report: list[dict]) -> str:
    """The best rounds as one Markdown table: a row per thread count, client count and setting."""
    lines = [
        "| threads | clients | batcher | sentences/s | over whole batches | requests a batch "
        "| p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in report:
        for row in sorted(result["best"], key=lambda r: r["clients"]):
            over = row["over_whole"]
            lines.append(
                f"| {result['threads']} | {row['clients']} | {row['setting']} | "
                f"{row['sentences_per_second']:.1f} | {'-' if over is None else f'{over:.2f}x'} | "
                f"{row['requests_per_batch']} | {row['p50_ms']} | {row['p99_ms']} |"
            )
    return "\n".join(lines)


def failures(result: dict) -> list[str]:
    """What must never happen, whatever the speed: a wrong answer, a status other than 200 or
    503, a request left unanswered."""
    found = []
    for r in result["rounds"]:
        where = f"threads {result['threads']}, {r['clients']} clients, {r['setting']}"
        if r["wrong"]:
            found.append(f"{where}: {r['wrong']} answers unlike the sentence alone")
        other = {s: n for s, n in r["statuses"].items() if int(s) not in sl.ALLOWED}
        if other:
            found.append(f"{where}: statuses {other}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/numbers-256/model", help="model directory")
    parser.add_argument("--ratios", default="0,1,2,4,8,16", help="JOIN_RATIO values, a list")
    parser.add_argument("--client-counts", default="8,32", help="clients, a list")
    parser.add_argument("--threads", default="1,2", help="torch threads of the servers, a list")
    parser.add_argument("--seconds", type=float, default=15.0, help="a round's length")
    parser.add_argument("--repeats", type=int, default=2, help="sweeps (each setting's best)")
    parser.add_argument("--queue", type=int, default=256, help="the servers' --translate-queue")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON report")
    parser.add_argument("--markdown", action="store_true", help="only print --out's table")
    args = parser.parse_args()
    if args.markdown:
        print(table(json.loads(args.out.read_text(encoding="utf-8"))))
        return 0
    if not Path(args.model).is_dir():
        raise SystemExit(
            f"--model: {args.model}: no such directory (see serve_load.py's docstring)"
        )
    if args.repeats < 1 or args.seconds <= 0:
        raise SystemExit(
            f"--repeats: expected >= 1, --seconds > 0; got {args.repeats}, {args.seconds}"
        )
    report, problems = [], []
    for threads in (int(t) for t in args.threads.split(",")):
        report.append(measure(args.model, threads, args))
        problems += failures(report[-1])
    print(table(report))
    from common import write_json

    write_json(args.out, report)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

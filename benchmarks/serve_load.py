"""Load test of the attention explorer: many concurrent clients against a real `attnlab serve`.

    python benchmarks/serve_load.py --model runs/numbers/model [--clients 50] [--seconds 60]
        [--threads 1,2] [--out benchmarks/results/serve_load.json]

For each torch thread count, it starts `attnlab serve` on 127.0.0.1 (a subprocess, a free
port), measures the anchor, one client asking the same mix of requests one after another, and
then runs ``--clients`` clients, each on its own connection, asking without pause for
``--seconds`` seconds, then a second, shorter round. The mix: attention 40%, translate 30%,
and model, positional and masks 10% each, on numbers written as words. A client that gets a 503
waits as its Retry-After says (at most 2 s, times a random 0.5-1) and goes on. Meanwhile a
probe, a separate process, asks a cheap route (model, positional, masks in turn) every 50 ms:
the latency of the routes that must not wait for the model while the model is saturated,
measured apart from the clients' own busy process.

It prints and saves: the answers by status (only 200 and 503 are allowed: anything else makes
the exit status 1), requests per second, the p50 / p99 latency of the admitted (200) requests
for the model routes and for the others, each also as a ratio to the anchor's median for the
same routes, the probe's p50 / p99, and the server's resident memory (RSS) after the anchor,
after the first round and after the second (flat means no growth between the rounds). Only
loopback addresses are used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

MODEL_ROUTES = ("attention", "translate")
MIX = {"attention": 0.4, "translate": 0.3, "model": 0.1, "positional": 0.1, "masks": 0.1}
ALLOWED = (200, 503)


@dataclass
class Answer:
    route: str
    status: int  # 0: no answer (a transport error)
    seconds: float


def sentences(count: int = 200, seed: int = 0) -> list[str]:
    """English numbers as words (the demo task's sources)."""
    from num2words import num2words

    rng = random.Random(seed)
    return [num2words(rng.randint(0, 9999)) for _ in range(count)]


def request_for(route: str, rng: random.Random, texts: list[str]) -> tuple[str, str, dict | None]:
    """``(method, path, JSON body)`` of one request to ``route``."""
    if route == "attention":
        return "POST", "/api/attention", {"text": rng.choice(texts), "beam_size": 4}
    if route == "translate":
        return "POST", "/api/translate", {"text": rng.choice(texts), "beam_size": 4}
    if route == "positional":
        return "GET", f"/api/positional?length={rng.randint(1, 32)}", None
    if route == "masks":
        return "POST", "/api/masks", {"texts": rng.sample(texts, rng.randint(1, 4))}
    return "GET", "/api/model", None


async def one_client(
    url: str,
    texts: list[str],
    answers: list[Answer],
    *,
    seed: int,
    until: float | None = None,
    requests: int | None = None,
    routes: tuple[str, ...] | None = None,
) -> None:
    """One client on its own connection: asks until ``until`` (a ``time.monotonic()``), or
    ``requests`` times; a random route of :data:`MIX` (or of ``routes``, in turn) each time."""
    rng = random.Random(seed)
    names, weights = list(MIX), list(MIX.values())
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        done = 0
        while (until is None or time.monotonic() < until) and (requests is None or done < requests):
            route = routes[done % len(routes)] if routes else rng.choices(names, weights)[0]
            method, path, body = request_for(route, rng, texts)
            start = time.perf_counter()
            try:
                response = await http.request(method, path, json=body)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            answers.append(Answer(route, status, time.perf_counter() - start))
            done += 1
            if status == 503:  # as a polite client does: wait as told, a little less at random
                told = response.headers.get("retry-after", "1")
                wait = min(float(told), 2.0) if told.isdigit() else 1.0
                await asyncio.sleep(wait * rng.uniform(0.5, 1.0))


async def load(
    url: str,
    clients: int,
    *,
    seconds: float | None = None,
    requests: int | None = None,
    texts: list[str] | None = None,
    seed: int = 0,
) -> list[Answer]:
    """``clients`` concurrent clients for ``seconds`` (or ``requests`` each): every answer."""
    texts = texts or sentences()
    answers: list[Answer] = []
    until = time.monotonic() + seconds if seconds is not None else None
    await asyncio.gather(
        *(
            one_client(url, texts, answers, seed=seed * 1000 + i, until=until, requests=requests)
            for i in range(clients)
        )
    )
    return answers


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def summarize(answers: list[Answer], seconds: float, anchor: dict | None = None) -> dict:
    """Counts by status, requests per second, and the latency of the admitted requests."""
    statuses: dict[str, int] = {}
    for answer in answers:
        statuses[str(answer.status)] = statuses.get(str(answer.status), 0) + 1
    report: dict = {
        "requests": len(answers),
        "per_second": len(answers) / seconds,
        "statuses": statuses,
        "admitted_per_second": statuses.get("200", 0) / seconds,
    }
    for group, routes in (("model", MODEL_ROUTES), ("cheap", ("model", "positional", "masks"))):
        times = [a.seconds for a in answers if a.status == 200 and a.route in routes]
        p50, p99 = percentile(times, 50), percentile(times, 99)
        entry = {"admitted": len(times), "p50_ms": _ms(p50), "p99_ms": _ms(p99)}
        if anchor is not None and anchor[group]["p50_ms"] and p99 is not None:
            entry["p99_over_anchor_p50"] = round(p99 * 1000 / anchor[group]["p50_ms"], 1)
        report[group] = entry
    return report


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` (Linux /proc), MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


def start_server(model: str, threads: int, queue: int) -> tuple[subprocess.Popen, str]:
    """`attnlab serve` on 127.0.0.1 with ``threads`` torch threads: the process and its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "attnlab", "serve", "--model", model, "--port", "0"]
    command += ["--queue", str(queue)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    line = process.stdout.readline()  # "attnlab serve: the attention explorer is at URL ..."
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if found is None:
        process.kill()
        raise SystemExit(f"attnlab serve did not start: {line!r}")
    return process, found.group(0)


def probe(url: str, seconds: float) -> None:
    """``--probe``: a cheap request (model, positional, masks in turn) every 50 ms for
    ``seconds``; print the latencies' p50, p99 and count as JSON."""
    times: list[float] = []
    rng, texts, cheap = random.Random(5), sentences(), ("model", "positional", "masks")
    with httpx.Client(base_url=url, timeout=120) as http:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            method, path, body = request_for(cheap[len(times) % 3], rng, texts)
            start = time.perf_counter()
            status = http.request(method, path, json=body).status_code
            times.append(time.perf_counter() - start if status == 200 else float("inf"))
            time.sleep(0.05)
    print(json.dumps({"requests": len(times), "p50_ms": _ms(percentile(times, 50)),
                      "p99_ms": _ms(percentile(times, 99))}))  # fmt: skip


def start_probe(url: str, seconds: float) -> subprocess.Popen:
    command = [sys.executable, __file__, "--probe", url, "--seconds", str(seconds)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def measure(model: str, threads: int, clients: int, seconds: float, queue: int) -> dict:
    process, url = start_server(model, threads, queue)
    try:
        texts = sentences()
        anchor_answers: list[Answer] = []
        every = tuple(MIX)
        asyncio.run(  # warm-up, then the anchor: one client, 10 requests per route, in turn
            one_client(url, texts, [], seed=1, requests=len(every), routes=every)
        )
        start = time.perf_counter()
        asyncio.run(
            one_client(url, texts, anchor_answers, seed=2, requests=10 * len(every), routes=every)
        )
        anchor = summarize(anchor_answers, time.perf_counter() - start)
        rss = {"after_anchor": rss_mib(process.pid)}
        prober = start_probe(url, seconds)
        start = time.perf_counter()
        answers = asyncio.run(load(url, clients, seconds=seconds, texts=texts, seed=3))
        first = summarize(answers, time.perf_counter() - start, anchor)
        first["probe"] = json.loads(prober.communicate(timeout=300)[0])
        rss["after_round_1"] = rss_mib(process.pid)
        start = time.perf_counter()
        again = asyncio.run(load(url, clients, seconds=seconds / 3, texts=texts, seed=4))
        second = summarize(again, time.perf_counter() - start, anchor)
        rss["after_round_2"] = rss_mib(process.pid)
        check = httpx.post(url + "api/translate", json={"text": "forty-two"}, timeout=120)
        return {
            "threads": threads,
            "clients": clients,
            "seconds": seconds,
            "queue": queue,
            "anchor": anchor,
            "round_1": first,
            "round_2": second,
            "rss_mib": {k: round(v, 1) for k, v in rss.items()},
            "answers_afterwards": check.status_code == 200,
        }
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def print_report(result: dict) -> None:
    first, anchor, rss = result["round_1"], result["anchor"], result["rss_mib"]
    print(
        f"\n{result['clients']} clients x {result['seconds']:g} s, torch threads "
        f"{result['threads']}, queue {result['queue']}"
    )
    print(
        f"  {first['requests']:,} requests ({first['per_second']:.0f}/s), statuses "
        f"{first['statuses']}; admitted {first['admitted_per_second']:.1f}/s"
    )
    for group in ("model", "cheap"):
        entry, alone = first[group], anchor[group]
        print(
            f"  {group:5s} routes: p50 {entry['p50_ms']} ms, p99 {entry['p99_ms']} ms "
            f"({entry.get('p99_over_anchor_p50')}x the unloaded median of {alone['p50_ms']} ms)"
        )
    probe = first["probe"]
    print(
        f"  probe (a cheap route every 50 ms, its own process): p50 {probe['p50_ms']} ms, "
        f"p99 {probe['p99_ms']} ms over {probe['requests']} requests"
    )
    print(
        f"  server RSS: {rss['after_anchor']} MiB after the anchor, {rss['after_round_1']} "
        f"after round 1, {rss['after_round_2']} after round 2; still answering: "
        f"{result['answers_afterwards']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/numbers/model", help="model directory")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--threads", default="1,2", help="torch threads of the server, a list")
    parser.add_argument("--queue", type=int, default=8, help="the server's --queue")
    parser.add_argument("--out", default=None, help="a JSON report")
    parser.add_argument("--probe", default=None, metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, args.seconds)
        return 0
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model: {args.model}: no such directory (run `make demo` first)")
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        results.append(measure(args.model, threads, args.clients, args.seconds, args.queue))
        print_report(results[-1])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    bad = [
        (r["threads"], status)
        for r in results
        for round_ in ("round_1", "round_2")
        for status in r[round_]["statuses"]
        if int(status) not in ALLOWED
    ]
    if bad or not all(r["answers_afterwards"] for r in results):
        print(f"FAILED: answers other than {ALLOWED}: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

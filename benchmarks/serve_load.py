"""Load test of `attnlab serve`: many concurrent clients against a real server, in two mixes.

    python benchmarks/serve_load.py --model runs/numbers/model [--clients 50] [--seconds 60]
        [--threads 1,2] [--out benchmarks/results/serve_load.json]
    python benchmarks/serve_load.py --mix translate --model runs/numbers/model
        [--engines torch,ctranslate2] [--client-counts 1,8,32,64] [--seconds 15]
        [--soak-seconds 60] [--threads 1,2] [--beam N] [--batch-delay SECONDS]
        [--queue N] [--translate-queue 256] [--out benchmarks/results/serve_translate.json]

``--mix translate`` (issues 47 and 59) asks only for translations, one sentence a request,
through today's one-at-a-time queue (``POST /api/translate`` of the torch engine's server) and
through the batcher (LibreTranslate's ``POST /translate``) of each of ``--engines`` (default
torch; a ctranslate2 server runs with ``--api-only``; ``torch-whole`` is a torch server with
``--batching whole``, whose batcher decodes whole batches instead of streaming its greedy
requests, for the comparison: no goal, no soak). The servers run side by side (an idle one
costs no CPU), and each client count asks the queue, then each engine's batcher, in turn, for
``--seconds`` each (and at most ``--requests`` requests a client). The queue runs at its best:
its depth (``--queue``) is by default the batcher's (``--translate-queue``, 256; the CLI allows
at most 256), so that at these client counts it refuses nothing; the queue's best is its highest
sentences/s of the rounds where it refused nothing.

Correctness first: before the servers start, a Translator of each engine translates every
sentence of the set alone (what ``attnlab translate --engine E`` prints for it, decoding as the
server does); a set of sentences of mixed lengths, sent together to ``/translate``, must get
those translations, greedy and with beam 4 (and, on the torch server, what ``/api/translate``
gives each alone); and every 200 answer of every round must be its sentence's ("wrong" counts
those that are not). Then, still with no server, what batching can give on this model and set
(``decode_bound``): the torch Translator's milliseconds a sentence one at a time and in batches
of 32, over every sentence and over those whose output ends with EOS. It prints, per thread
count and client count, each mode and engine's sentences/s (200s only), 503 share and p50 / p99
latency, where the percentiles are of the answered (200) requests only and the 503s count in the
share beside them; each batcher's ratios to the queue at that count (sentences/s, p50, p99) and
its sentences/s over the queue at its best; the ctranslate2 batcher's over the torch batcher's.
Then the issues' goals, each with PASS or FAIL and the model it was set for (``applies``:
whether this model has that shape), never asserted: on the numbers demo model (d_model 128, 2 +
2 layers), greedy, the ctranslate2 batcher >= 3.0x the torch batcher's sentences/s at 1 client
and >= 1.5x at 32; on a d_model 256, 4 + 4-layer model, each engine's batcher >= 4x the queue at
its best at 32 clients, and only 200 or 503 at 64 clients; issue 47's torch batcher over the
queue at the same count (32 clients: >= 4x sentences/s, p99 no higher; 1 client: p50 within
10%). Then, per engine, a ``--soak-seconds`` round at the largest client count through its
batcher, and a second one a third as long: no 5xx other than 503, no request unanswered, every
answer right, and the server's RSS after each (flat means no growth). The exit status is 1 if
correctness or these fail (never for a goal).

The d_model 256, 4 + 4-layer model is one the user trains (docs/serve.md: "trained briefly on
the numbers task"), e.g. ``attnlab train --config configs/numbers.toml --out runs/numbers-256
--set model.d_model=256 --set model.d_ff=1024 --set model.num_encoder_layers=4
--set model.num_decoder_layers=4``, and names with ``--model runs/numbers-256/model``.

The default mix, the explorer's:

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

from lean_http import Connection, TransportError

MODEL_ROUTES = ("attention", "translate")
#: The batchers ``--engines`` may name: an engine, or the torch engine decoding whole batches
#: (``attnlab serve --batching whole``; the torch batcher's default streams its greedy requests).
WHOLE = "torch-whole"


def engine_of(batcher: str) -> str:
    """The engine a batcher of ``--engines`` decodes with."""
    return "torch" if batcher == WHOLE else batcher


def server_flags(batcher: str) -> tuple[str, ...]:
    """The ``attnlab serve`` flags of a batcher of ``--engines`` (the torch one serves the
    queue too, so it keeps the page)."""
    if batcher == "torch":
        return ("--engine", "torch")
    if batcher == WHOLE:
        return ("--engine", "torch", "--api-only", "--batching", "whole")
    return ("--engine", batcher, "--api-only")


MIX = {"attention": 0.4, "translate": 0.3, "model": 0.1, "positional": 0.1, "masks": 0.1}
ALLOWED = (200, 503)


@dataclass
class Answer:
    route: str
    status: int  # 0: no answer (a transport error)
    seconds: float
    text: str = ""  # the translate mix: the sentence asked
    got: str | None = None  # and its translation (a 200's)


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


def start_server(
    model: str,
    threads: int,
    queue: int,
    extra: tuple[str, ...] = (),
    python: tuple[str, ...] = (sys.executable, "-m", "attnlab"),
) -> tuple[subprocess.Popen, str]:
    """`attnlab serve` on 127.0.0.1 with ``threads`` torch threads (and the flags ``extra``):
    the process and its URL. ``python``: the command before ``serve`` (attnlab's CLI)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [*python, "serve", "--model", model, "--port", "0"]
    command += ["--threads", str(threads), "--queue", str(queue), *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    line = process.stdout.readline()  # "attnlab serve: the attention explorer is at URL ..."
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if found is None:
        process.kill()
        raise SystemExit(f"attnlab serve did not start: {line!r}")
    return process, found.group(0)


def stop_servers(servers: dict[str, tuple[subprocess.Popen, str]]) -> None:
    """Ctrl-C to every server (each drains and stops), then a kill for any still running after
    two minutes."""
    for process, _ in servers.values():
        process.send_signal(signal.SIGINT)
    for process, _ in servers.values():
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()


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


# -- the translate-only mix (issue 47) ---------------------------------------------------------

#: The two ways of translating in one server: today's one-at-a-time queue, and the batcher.
MODES = ("queue", "batcher")


def translate_request(
    mode: str, text: str, pair: tuple[str, str], beam: int | None
) -> tuple[str, dict]:
    """``(path, JSON body)`` of one sentence's translation through ``mode``."""
    if mode == "queue":
        body: dict = {"text": text}
        path = "/api/translate"
    else:
        body = {"q": text, "source": pair[0], "target": pair[1]}
        path = "/translate"
    if beam is not None:
        body["beam_size"] = beam
    return path, body


async def translate_client(
    url: str,
    texts: list[str],
    answers: list[Answer],
    *,
    mode: str,
    pair: tuple[str, str],
    beam: int | None,
    seed: int,
    until: float,
    requests: int,
) -> None:
    """One client on its own connection: one sentence a request, until ``until`` or
    ``requests`` requests; after a 503 it waits as Retry-After says (as :func:`one_client`)."""
    rng = random.Random(seed)
    async with Connection(url) as http:
        done = 0
        while time.monotonic() < until and done < requests:
            text = rng.choice(texts)
            path, body = translate_request(mode, text, pair, beam)
            start = time.perf_counter()
            try:
                status, headers, content = await http.request("POST", path, body)
            except TransportError:
                status, headers, content = 0, {}, b""
            seconds = time.perf_counter() - start
            got = None
            if status == 200:
                got = json.loads(content)["translation" if mode == "queue" else "translatedText"]
            answers.append(Answer(mode, status, seconds, text, got))
            done += 1
            if status == 503:
                told = headers.get("retry-after", "1")
                wait = min(float(told), 2.0) if told.isdigit() else 1.0
                await asyncio.sleep(wait * rng.uniform(0.5, 1.0))


def translate_round(
    url: str,
    mode: str,
    clients: int,
    seconds: float,
    *,
    texts: list[str],
    pair: tuple[str, str],
    beam: int | None,
    requests: int,
    seed: int,
    engine: str = "torch",
    references: dict[str, str] | None = None,
) -> dict:
    """``clients`` clients through ``mode`` of the server of ``engine`` for ``seconds``:
    sentences/s, the 503 share, the p50 / p99 latency of the answered requests, every status,
    the unanswered, and (given ``references``, each sentence's translation alone) how many
    answers differ from their sentence's."""
    answers: list[Answer] = []
    until = time.monotonic() + seconds
    start = time.perf_counter()

    async def run() -> None:
        await asyncio.gather(
            *(
                translate_client(url, texts, answers, mode=mode, pair=pair, beam=beam,
                                 seed=seed * 1000 + i, until=until, requests=requests)
                for i in range(clients)
            )
        )  # fmt: skip

    asyncio.run(run())
    elapsed = time.perf_counter() - start
    statuses: dict[str, int] = {}
    for answer in answers:
        statuses[str(answer.status)] = statuses.get(str(answer.status), 0) + 1
    times = [a.seconds for a in answers if a.status == 200]
    wrong = [
        a.text for a in answers if a.status == 200 and references and a.got != references[a.text]
    ]
    return {
        "mode": mode,
        "engine": engine,
        "clients": clients,
        "seconds": round(elapsed, 2),
        "requests": len(answers),
        "statuses": statuses,
        "sentences_per_second": round(len(times) / elapsed, 2),
        "share_503": round(statuses.get("503", 0) / max(len(answers), 1), 4),
        "p50_ms": _ms(percentile(times, 50)),
        "p99_ms": _ms(percentile(times, 99)),
        "unanswered": statuses.get("0", 0),
        "other_5xx": sum(n for s, n in statuses.items() if int(s) >= 500 and s != "503"),
        "checked": len(times) if references else 0,
        "wrong": len(wrong),
        "wrong_examples": sorted(set(wrong))[:3],
    }


def check_translations(
    url: str,
    texts: list[str],
    pair: tuple[str, str],
    beam: int,
    alone: list[str] | None = None,
    against: str = "/api/translate alone",
) -> dict:
    """Each of ``texts`` sent together to ``/translate`` (one request each, concurrently: they
    are decoded in batches of mixed lengths) against its translation alone: ``alone`` (a
    Translator's, one sentence a call), or else ``/api/translate`` on it alone."""
    if alone is None:
        with httpx.Client(base_url=url, timeout=120) as http:
            alone = []
            for text in texts:
                path, body = translate_request("queue", text, pair, beam)
                alone.append(http.post(path, json=body).json()["translation"])

    async def together() -> list[str]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            bodies = [translate_request("batcher", t, pair, beam) for t in texts]
            answers = await asyncio.gather(*(http.post(p, json=b) for p, b in bodies))
            return [a.json()["translatedText"] for a in answers]

    batched = asyncio.run(together())
    wrong = [t for t, a, b in zip(texts, alone, batched, strict=True) if a != b]
    return {
        "beam": beam,
        "against": against,
        "sentences": len(texts),
        "mismatches": len(wrong),
        "examples": wrong[:3],
    }


def wait_ready(url: str, seconds: float = 300) -> None:
    """Until ``/health`` says ready (the warm-up is done)."""
    until = time.monotonic() + seconds
    while httpx.get(url + "health", timeout=120).status_code != 200:
        if time.monotonic() > until:
            raise SystemExit(f"attnlab serve was not ready within {seconds:g} s")
        time.sleep(0.1)


#: What the latency percentiles count (printed and saved beside them).
LATENCY_NOTE = (
    "p50 / p99: of the answered (200) requests only; a refused request (503) is not in the "
    "percentiles, it counts in the 503 share beside them (and lowers sentences/s, which counts "
    "200s only)"
)
#: The issue's goal models: the numbers demo (configs/numbers.toml) and a small translation
#: model's shape (docs/serve.md's measurement).
DEMO_SHAPE = {"d_model": 128, "num_encoder_layers": 2, "num_decoder_layers": 2}
D256_SHAPE = {"d_model": 256, "num_encoder_layers": 4, "num_decoder_layers": 4}


def model_shape(model: str) -> dict:
    """d_model and the layer counts of a model directory (or run), from its config.json."""
    from attnlab.inference.modeldir import resolve_model_dir

    config = json.loads((resolve_model_dir(model) / "config.json").read_text())
    return {key: config.get(key) for key in DEMO_SHAPE}


def references(
    model: str, engine: str, threads: int, jobs: dict[str, tuple[int | None, list[str]]]
) -> dict[str, dict[str, str]]:
    """Per name in ``jobs``, ``(beam, texts)``: each distinct text translated alone (one
    sentence a call) by a Translator of ``engine`` at ``threads`` threads, decoding as the
    server does (the model's recipe, ``beam`` where not None): what ``attnlab translate
    --engine ENGINE`` prints for it."""
    import torch

    from attnlab.inference.translator import Translator

    torch.set_num_threads(threads)
    translator = Translator.load(model, device="cpu", engine=engine)
    found: dict[str, dict[str, str]] = {}
    for name, (beam, texts) in jobs.items():
        decoding = translator.decoding.updated(beam_size=beam)
        found[name] = {t: translator.translate([t], decoding=decoding)[0] for t in set(texts)}
    return found


def decode_bound(
    model: str, threads: int, texts: list[str], beam: int | None, batch: int = 32
) -> dict:
    """What batching can give on this model and set, with no server: the torch engine's
    Translator at ``threads`` threads, milliseconds a sentence one at a time and in batches of
    ``batch`` (the set in order, best of 3 passes), over every sentence and over those whose
    output ends with EOS alone (a model that never ends a sentence runs it to its length limit,
    and in a batch those rows go on alone, a step at a time, after the others end)."""
    import torch

    from attnlab.inference.translator import Translator

    torch.set_num_threads(threads)
    translator = Translator.load(model, device="cpu", engine="torch")
    translator.decoding = translator.decoding.updated(beam_size=beam)  # as the server decodes
    ended = [t for t, h in zip(texts, translator.hypotheses(texts), strict=True) if h[0].finished]

    def ms(sentences: list[str], size: int, passes: int) -> float:
        best = float("inf")
        for _ in range(passes):
            began = time.perf_counter()
            for i in range(0, len(sentences), size):
                translator.translate(sentences[i : i + size])
            best = min(best, time.perf_counter() - began)
        return 1000 * best / len(sentences)

    found: dict = {"sentences": len(texts), "ending": len(ended), "batch": batch}
    for name, sentences in (("all", texts), ("ending_only", ended)):
        if not sentences:  # a model that ends none
            found[name] = None
            continue
        one, many = ms(sentences, 1, 2), ms(sentences, batch, 3)
        found[name] = {"one_ms": round(one, 3), "batch_ms": round(many, 3)}
        found[name]["ratio"] = round(one / many, 2)
    return found


def measure_translate(model: str, threads: int, args: argparse.Namespace) -> dict:
    counts = [int(c) for c in args.client_counts.split(",")]
    engines = args.engines.split(",")
    rng = random.Random(11)
    texts = sentences()
    mixed = sorted(rng.sample(texts, 16), key=len)  # short to long, sent together
    reference = {  # before any server starts: the machine is quiet
        engine: references(
            model,
            engine,
            threads,
            {"run": (args.beam, texts), "beam 1": (1, mixed), "beam 4": (4, mixed)},
        )
        for engine in dict.fromkeys(["torch", *map(engine_of, engines)])
    }
    bound = decode_bound(model, threads, texts, args.beam)  # no server yet: a quiet machine
    extra = ["--translate-queue", str(args.translate_queue)]
    if args.batch_delay is not None:
        extra += ["--batch-delay", str(args.batch_delay)]
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    try:  # the torch server (the queue, and its batcher) and each other engine's, all at once
        for engine in ["torch", *(e for e in engines if e != "torch")]:
            flags = server_flags(engine)
            servers[engine] = start_server(model, threads, args.queue, (*flags, *extra))
        for _, url in servers.values():
            wait_ready(url)
        url = servers["torch"][1]
        language = httpx.get(url + "languages", timeout=120).json()[0]
        pair = (language["code"], language["targets"][0])
        correctness = [check_translations(url, mixed, pair, beam) for beam in (1, 4)]
        by_engine = {
            engine: [
                check_translations(
                    servers[engine][1], mixed, pair, beam,
                    [reference[engine_of(engine)][f"beam {beam}"][t] for t in mixed],
                    f"a Translator of engine {engine}, one sentence a call",
                )
                for beam in (1, 4)
            ]
            for engine in engines
        }  # fmt: skip
        plan = [("queue", "torch")] + [("batcher", engine) for engine in engines]
        rounds = []
        for clients in counts:
            for mode, engine in plan:  # the queue's answers are the torch engine's
                answers = reference[engine_of(engine)]["run"]
                rounds.append(
                    translate_round(servers[engine][1], mode, clients, args.seconds, texts=texts,
                                    pair=pair, beam=args.beam, requests=args.requests,
                                    seed=clients, engine=engine, references=answers)
                )  # fmt: skip
        rss = {f"{engine}_before_soak": rss_mib(p.pid) for engine, (p, _) in servers.items()}
        soak = []
        for engine in (e for e in engines if e != WHOLE):  # the served batchers' soaks
            for i, seconds in enumerate((args.soak_seconds, args.soak_seconds / 3)):
                soak.append(
                    translate_round(servers[engine][1], "batcher", max(counts), seconds,
                                    texts=texts, pair=pair, beam=args.beam, requests=10**9,
                                    seed=100 + i, engine=engine,
                                    references=reference[engine_of(engine)]["run"])
                )  # fmt: skip
                soak[-1]["soak"] = i + 1
                rss[f"{engine}_after_soak_{i + 1}"] = rss_mib(servers[engine][0].pid)
        result = {
            "mix": "translate",
            "model": model,
            "shape": model_shape(model),
            "threads": threads,
            "engines": engines,
            "beam": args.beam,
            "batch_delay": args.batch_delay,
            "queue": args.queue,
            "translate_queue": args.translate_queue,
            "pair": pair,
            "latency": LATENCY_NOTE,
            "correctness": correctness,
            "correctness_by_engine": by_engine,
            "decode_bound": bound,
            "rounds": rounds,
            "soak": soak,
            "rss_mib": {k: round(v, 1) for k, v in rss.items()},
        }
        result.update(translate_ratios(rounds))
        result["goals"] = translate_goals(result)
        return result
    finally:
        stop_servers(servers)


def translate_ratios(rounds: list[dict]) -> dict:
    """The queue at its best (its highest sentences/s of the rounds where it refused nothing);
    per engine and client count, the batcher's sentences/s, p50 and p99 over the queue's at
    that count, and its sentences/s over the queue's best; per client count, the ctranslate2
    batcher's over the torch batcher's. ``ratios``: the torch batcher's over the queue's."""
    keys = ("sentences_per_second", "p50_ms", "p99_ms")
    by = {(r["clients"], r["mode"], r["engine"]): r for r in rounds}
    counts = sorted({r["clients"] for r in rounds})
    clean = [r for r in rounds if r["mode"] == "queue" and r["statuses"].get("503", 0) == 0]
    best = max(clean, key=lambda r: r["sentences_per_second"], default=None)
    queue_best = (
        None
        if best is None
        else {"clients": best["clients"], "sentences_per_second": best["sentences_per_second"]}
    )
    over_queue: dict = {}
    for engine in dict.fromkeys(r["engine"] for r in rounds if r["mode"] == "batcher"):
        over_queue[engine] = {}
        for clients in counts:
            queue, batcher = by[(clients, "queue", "torch")], by[(clients, "batcher", engine)]
            entry = {key: _ratio(batcher[key], queue[key]) for key in keys}
            entry["sentences_per_second_over_queue_best"] = _ratio(
                batcher["sentences_per_second"], best and best["sentences_per_second"]
            )
            over_queue[engine][str(clients)] = entry
    engines = {
        str(clients): {
            key: _ratio(by[(clients, "batcher", "ctranslate2")][key],
                        by[(clients, "batcher", "torch")][key])
            for key in keys
        }
        for clients in counts
        if (clients, "batcher", "ctranslate2") in by and (clients, "batcher", "torch") in by
    }  # fmt: skip
    return {
        "queue_best": queue_best,
        "ratios": over_queue.get("torch", {}),
        "batcher_over_queue": over_queue,
        "ctranslate2_over_torch": engines,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 2)


def _goal(goal: str, model: str, applies: bool, value: float | None, target: str) -> dict:
    """One goal of the issues: ``value`` against ``target`` (``>= x`` or ``<= x``)."""
    sign, bound = target.split()
    passed = (
        None
        if value is None
        else (value >= float(bound) if sign == ">=" else value <= float(bound))
    )
    return {"goal": goal, "model": model, "applies": applies, "value": value,
            "target": target, "passed": passed}  # fmt: skip


def translate_goals(result: dict) -> list[dict]:
    """The goals of issues 47 and 59, each with its value and PASS/FAIL (never asserted): each
    says which model the issue set it for and whether this run's model has that shape."""
    shape, goals = result["shape"], []
    demo, d256 = shape == DEMO_SHAPE, shape == D256_SHAPE
    engines = result["ctranslate2_over_torch"]
    for clients, target in (("1", ">= 3.0"), ("32", ">= 1.5")):
        if clients in engines:
            goals.append(_goal(f"ctranslate2 / torch batcher sentences/s, {clients} client(s)",
                               "numbers demo, greedy", demo,
                               engines[clients]["sentences_per_second"], target))  # fmt: skip
    for engine, ratios in result["batcher_over_queue"].items():
        if "32" in ratios and engine != WHOLE:
            value = ratios["32"]["sentences_per_second_over_queue_best"]
            goal = f"{engine} batcher / the queue at its best, sentences/s, 32 clients"
            goals.append(_goal(goal, "d_model 256 4+4", d256, value, ">= 4"))
    for engine in (e for e in result["engines"] if e != WHOLE):
        at64 = [
            r
            for r in [*result["rounds"], *result["soak"]]
            if r["engine"] == engine and r["mode"] == "batcher" and r["clients"] == 64
        ]
        if at64:
            bad = sum(n for r in at64 for s, n in r["statuses"].items() if s not in ("200", "503"))
            goals.append(_goal(f"{engine} batcher at 64 clients: answers other than 200 or 503",
                               "d_model 256 4+4", d256, bad, "<= 0"))  # fmt: skip
    torch_ratios = result["ratios"]
    if "32" in torch_ratios:
        goals.append(_goal("torch batcher / queue sentences/s, 32 clients (issue 47)", "any",
                           True, torch_ratios["32"]["sentences_per_second"], ">= 4"))  # fmt: skip
        goals.append(_goal("torch batcher / queue p99, 32 clients (issue 47)", "any", True,
                           torch_ratios["32"]["p99_ms"], "<= 1"))  # fmt: skip
    if "1" in torch_ratios:
        goals.append(_goal("torch batcher / queue p50, 1 client (issue 47)", "any", True,
                           torch_ratios["1"]["p50_ms"], "<= 1.1"))  # fmt: skip
    return goals


def print_translate_report(result: dict) -> None:
    shape = result["shape"]
    print(
        f"\ntranslate-only mix, {result['model']} (d_model {shape['d_model']}, "
        f"{shape['num_encoder_layers']}+{shape['num_decoder_layers']} layers), threads "
        f"{result['threads']}, beam {result['beam'] or 'the server default'}, "
        f"{result['pair'][0]}->{result['pair'][1]}; queue depth {result['queue']} (the queue: "
        f"the torch server's /api/translate), batcher {result['translate_queue']} sentences"
    )
    for check in result["correctness"]:
        print(
            f"  correctness, beam {check['beam']}: {check['sentences']} sentences of mixed "
            f"lengths sent together to /translate, {check['mismatches']} differ from "
            f"{check['against']}"
        )
    for engine, checks in result["correctness_by_engine"].items():
        for check in checks:
            print(
                f"  correctness, {engine}, beam {check['beam']}: {check['mismatches']} of "
                f"{check['sentences']} sent together differ from {check['against']}"
            )
    print(f"  {result['latency']}")
    b = result["decode_bound"]
    print(
        f"  decoding alone (the torch Translator, no server), batches of {b['batch']} over one "
        f"at a time: {b['all']['ratio']}x over all {b['sentences']} sentences "
        f"({b['all']['one_ms']} against {b['all']['batch_ms']} ms a sentence), "
        + (
            f"{b['ending_only']['ratio']}x over the {b['ending']} whose output ends"
            if b["ending_only"]
            else "none of them ends"
        )
    )
    print(
        "  clients  mode     engine       sentences/s  503 share  p50 ms  p99 ms  wrong   | "
        "batcher/queue: sent/s  p50  p99  sent/s over queue best"
    )
    over = result["batcher_over_queue"]
    for r in result["rounds"]:
        tail = ""
        if r["mode"] == "batcher":
            x = over[r["engine"]][str(r["clients"])]
            tail = (
                f"| {x['sentences_per_second']}x  {x['p50_ms']}x  {x['p99_ms']}x  "
                f"{x['sentences_per_second_over_queue_best']}x"
            )
        print(
            f"  {r['clients']:7d}  {r['mode']:7s}  {r['engine']:11s}  "
            f"{r['sentences_per_second']:11.1f}  {r['share_503']:9.1%}  {r['p50_ms']!s:>6}  "
            f"{r['p99_ms']!s:>6}  {r['wrong']:5d}   {tail}"
        )
    best = result["queue_best"]
    if best is None:
        print("  the queue at its best: every queue round refused some requests")
    else:
        print(
            f"  the queue at its best (no 503): {best['sentences_per_second']} sentences/s at "
            f"{best['clients']} client(s)"
        )
    for clients, x in result["ctranslate2_over_torch"].items():
        print(
            f"  ctranslate2 / torch batcher, {clients} client(s): sentences/s "
            f"{x['sentences_per_second']}x, p50 {x['p50_ms']}x, p99 {x['p99_ms']}x"
        )
    for g in result["goals"]:
        verdict = "n/a" if g["passed"] is None else ("PASS" if g["passed"] else "FAIL")
        where = "this model" if g["applies"] else "not this model"
        print(
            f"  goal ({g['model']}; {where}): {g['goal']}: {g['value']} ({g['target']}) {verdict}"
        )
    rss = result["rss_mib"]
    for r in result["soak"]:
        after = rss[f"{r['engine']}_after_soak_{r['soak']}"]
        print(
            f"  soak {r['soak']}, {r['engine']}: {r['clients']} clients x {r['seconds']:g} s "
            f"through the batcher, {r['requests']:,} requests, statuses {r['statuses']}, other 5xx "
            f"{r['other_5xx']}, unanswered {r['unanswered']}, wrong {r['wrong']}; RSS after: "
            f"{after} MiB"
        )
    for engine in result["engines"]:
        print(f"  RSS before the soak, {engine}: {rss[f'{engine}_before_soak']} MiB")
    whole = result["batcher_over_queue"].get(WHOLE, {})
    for clients, x in whole.items():
        mine = result["batcher_over_queue"]["torch"][clients]["sentences_per_second"]
        print(
            f"  torch batcher streaming / decoding whole batches, {clients} client(s): "
            f"sentences/s {_ratio(mine, x['sentences_per_second'])}x"
        )


def translate_failures(result: dict) -> list[str]:
    problems = [
        f"beam {c['beam']}: {c['mismatches']} batched translations differ from "
        f"{c['against']}, e.g. {c['examples']}"
        for c in [
            *result["correctness"],
            *(c for cs in result["correctness_by_engine"].values() for c in cs),
        ]
        if c["mismatches"]
    ]
    for r in [*result["rounds"], *result["soak"]]:
        where = f"{r['mode']} ({r['engine']}) x {r['clients']}"
        if r["other_5xx"] or r["unanswered"] or set(r["statuses"]) - {"200", "503"}:
            problems.append(f"{where}: statuses {r['statuses']}")
        if r["wrong"]:
            problems.append(
                f"{where}: {r['wrong']} answers differ from the sentence translated alone, "
                f"e.g. {r['wrong_examples']}"
            )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/numbers/model", help="model directory")
    parser.add_argument("--mix", choices=("explorer", "translate"), default="explorer")
    parser.add_argument("--clients", type=int, default=50, help="the explorer mix's clients")
    parser.add_argument(
        "--seconds", type=float, default=None, help="a round's length (explorer 60, translate 15)"
    )
    parser.add_argument(
        "--client-counts", default="1,8,32,64", help="the translate mix's client counts"
    )
    parser.add_argument(
        "--soak-seconds", type=float, default=60.0, help="the translate mix's no-failure round"
    )
    parser.add_argument(
        "--requests", type=int, default=100_000, help="the most requests of one client a round"
    )
    parser.add_argument("--beam", type=int, default=None, help="beam (default: the server's)")
    parser.add_argument(
        "--batch-delay", type=float, default=None, help="the server's (default: its default)"
    )
    parser.add_argument("--threads", default="1,2", help="torch threads of the server, a list")
    parser.add_argument(
        "--queue",
        type=int,
        default=None,
        help="the server's --queue (explorer 8; translate: --translate-queue, at most 256)",
    )
    parser.add_argument(
        "--translate-queue", type=int, default=256, help="the translate mix's --translate-queue"
    )
    parser.add_argument(
        "--engines",
        default="torch",
        help="the translate mix's batchers, a list of engines (torch,ctranslate2), and "
        f"{WHOLE}: the torch engine decoding whole batches (--batching whole)",
    )
    parser.add_argument("--out", default=None, help="a JSON report")
    parser.add_argument("--probe", default=None, metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, args.seconds)
        return 0
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model: {args.model}: no such directory (run `make demo` first)")
    if args.mix == "translate":
        args.seconds = 15.0 if args.seconds is None else args.seconds
        if args.queue is None:  # the queue at its best: as deep as the batcher's line
            args.queue = min(args.translate_queue, 256)
        found, problems = [], []
        for threads in (int(t) for t in args.threads.split(",")):
            found.append(measure_translate(args.model, threads, args))
            print_translate_report(found[-1])
            problems += translate_failures(found[-1])
        if args.out:
            from common import write_json

            write_json(args.out, found)
        for problem in problems:
            print(f"FAILED: {problem}", file=sys.stderr)
        return 1 if problems else 0
    args.seconds = 60.0 if args.seconds is None else args.seconds
    args.queue = 8 if args.queue is None else args.queue
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        results.append(measure(args.model, threads, args.clients, args.seconds, args.queue))
        print_report(results[-1])
    if args.out:
        from common import write_json

        write_json(args.out, results)
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

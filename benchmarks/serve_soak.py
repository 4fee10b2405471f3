"""An hour under hostile load (issue 57): `attnlab serve` with keys and limits on, against many
clients on loopback, some of them rude; nothing may break, leak or go unanswered.

    python benchmarks/serve_soak.py --model runs/numbers/model [--minutes 60] [--clients 64]
        [--requests N] [--idle-requests 200] [--threads 1] [--batching stream|whole]
        [--out benchmarks/results/serve_soak.json]

The server is `attnlab serve --api-only --batching B` (``--batching``: stream, the server's
default, or whole) on 127.0.0.1 (a free port, started as benchmarks/serve_load.py starts it)
with ``--api-keys`` (a file made for the run: a key for each client), ``--req-limit 240`` and
``--char-limit 100000`` a minute. Before it starts, every sentence of the set is translated
alone by a Translator on the same model and decoding (what `attnlab translate` prints for it);
once it is ready, one polite client asks
``--idle-requests`` times, one request after another: the idle service's latency. Then, for
``--minutes``:

* ``--clients`` clients (64), each on its own connection: a tenth flood (no pause, their keys'
  own limit of 10 requests a minute: nearly every answer is a 429), a tenth disconnect
  mid-request (half while sending the body, half while the answer is coming; a pause of 0.5
  to 1.5 s between), the rest are polite (a pause of 0.5 to 1.5 s between requests; after a
  503 they wait as ``Retry-After`` says); a tenth of the polite and flooding clients' requests
  are malformed or oversized (bad JSON, a wrong type, a pair the model does not translate, no
  key, a wrong key, ``q`` over 10,000 characters or 64 sentences), the others one sentence,
  its key in the JSON body, a ``Bearer`` header or a form by turns;
* every ``--burst-every`` seconds (a minute; a third of a shorter run), a burst: 4x the
  clients more, each with one request on a connection of its own. Past 128 open connections
  the server answers each request 503 (uvicorn's ``limit_concurrency``), and it closes
  connections at once only past 512 (docs/serve.md, "Limits"): a burst of 4x 64 clients stays
  under that, so a burst request without an answer counts as unanswered like any other
  (``burst_closed`` says how many of those were closed connections).

Every client asks through ``benchmarks/lean_http.py`` (a keep-alive connection of its own, a
request's cost about ``http.client``'s), so that the load generator takes little of the CPU the
server shares with it. ``--requests`` bounds each client's requests (the smoke test's run).

It measures, prints as a table and writes to ``--out``: the answers by role and status; the 5xx
answers other than 503 (goal 0); the requests left unanswered (no answer within 120 s, or a
connection closed without one; goal 0); every 200 answer against its sentence's translation
alone (goal: all equal); the server's resident memory (VmRSS) at the end against after the first
twelfth of the run (5 minutes of the hour; goal within 5%); the p99 latency of the polite
clients' 200 answers against the idle service's (goal within 2x); the 429s in ``/metrics`` by
key name. The exit status is 1 if a correctness goal fails (5xx, unanswered, wrong), never for
memory or latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx

from lean_http import Connection, TransportError
from serve_load import percentile, references, rss_mib, sentences, start_server, wait_ready

WAIT = 120.0  # seconds: the longest a request may take before it counts as unanswered
PAIR = {"source": "en", "target": "de"}
REQ_LIMIT, CHAR_LIMIT, FLOOD_LIMIT = 240, 100_000, 10
IDLE_KEY, BURST_KEY = "soak-key-idle", "soak-key-burst"
MALFORMED = ("bad json", "wrong type", "unknown pair", "no key", "wrong key", "too long",
             "too many")  # fmt: skip


@dataclass
class Answer:
    role: str  # polite, flood, burst, idle
    kind: str  # json, bearer, form, or the malformed kind
    status: int  # 0: no answer (closed: see ``closed``)
    seconds: float
    text: str = ""
    got: str | None = None
    closed: bool = False  # the connection closed (or never opened) without an answer
    retry_after: float = 1.0  # a 429's or 503's, in seconds


def keys_text(clients: int) -> str:
    """The run's keys file: one a client (``polite-I``, ``flood-I`` with its own limit of
    :data:`FLOOD_LIMIT` requests a minute, ``disconnect-I``), ``idle`` and ``burst``."""
    lines = ["# serve_soak.py's keys", f"{IDLE_KEY} name=idle", f"{BURST_KEY} name=burst"]
    for i in range(clients):
        role = role_of(i, clients)
        limit = f" requests={FLOOD_LIMIT}" if role == "flood" else ""
        lines.append(f"{key_of(i, clients)}{limit} name={role}-{i}")
    return "\n".join(lines) + "\n"


def key_of(i: int, clients: int) -> str:
    return f"soak-key-{i:04d}-{role_of(i, clients)}"


def role_of(i: int, clients: int) -> str:
    """A tenth of the clients flood, a tenth disconnect, the others are polite."""
    tenth = max(1, round(clients / 10))
    return "flood" if i < tenth else "disconnect" if i < 2 * tenth else "polite"


def request(
    rng: random.Random, key: str, text: str, turn: int, malformed: bool
) -> tuple[str, bytes, dict[str, str]]:
    """``(kind, body, headers)`` of one ``POST /translate``."""
    body = {"q": text, **PAIR, "api_key": key}
    if not malformed:
        kind = ("json", "bearer", "form")[turn % 3]
        if kind == "bearer":
            return kind, *_json({"q": text, **PAIR}, Authorization=f"Bearer {key}")
        if kind == "form":
            form = {"content-type": "application/x-www-form-urlencoded"}
            return kind, urlencode(body).encode(), form
        return kind, *_json(body)
    kind = rng.choice(MALFORMED)
    bad = {
        "wrong type": {**body, "q": 5},
        "unknown pair": {**body, "target": "xx"},
        "no key": {"q": text, **PAIR},
        "wrong key": {**body, "api_key": "soak-key-not-one"},
        "too long": {**body, "q": "nine " * 2100},
        "too many": {**body, "q": [text] * 65},
    }
    if kind == "bad json":
        return kind, json.dumps(body)[:-3].encode(), {"content-type": "application/json"}
    return kind, *_json(bad[kind])


def _json(body: dict, **headers: str) -> tuple[bytes, dict[str, str]]:
    return json.dumps(body).encode(), {"content-type": "application/json", **headers}


async def ask(
    http: Connection, role: str, kind: str, call: tuple[bytes, dict[str, str]], text: str
) -> Answer:
    start = time.perf_counter()
    try:
        status, headers, content = await http.request("POST", "/translate", None, call[1],
                                                      content=call[0])  # fmt: skip
    except TransportError as e:
        return Answer(role, kind, 0, time.perf_counter() - start, text, closed=not e.timeout)
    seconds, got = time.perf_counter() - start, None
    if status == 200 and kind in ("json", "bearer", "form"):
        got = json.loads(content)["translatedText"]
    told = headers.get("retry-after", "1")
    wait = float(told) if told.isdigit() else 1.0
    return Answer(role, kind, status, seconds, text, got, retry_after=wait)


async def client(url: str, i: int, args, texts: list[str], answers: list[Answer], until: float):
    """Client ``i`` until ``until`` or ``args.requests`` requests, as its role says."""
    rng, role, key = random.Random(i), role_of(i, args.clients), key_of(i, args.clients)
    async with Connection(url, timeout=WAIT) as http:
        for turn in range(args.requests):
            if time.monotonic() >= until:
                return
            text = rng.choice(texts)
            if role == "disconnect":
                await disconnect(url, key, text, rng)
                answers.append(Answer(role, "left", 0, 0.0))
                await asyncio.sleep(rng.uniform(0.5, 1.5))
                continue
            kind, *call = request(rng, key, text, turn, rng.random() < 0.1)
            answers.append(await ask(http, role, kind, (call[0], call[1]), text))
            if role == "polite":  # after a 429 or 503, as Retry-After says (at most 2 s)
                told = answers[-1].status in (429, 503)
                await asyncio.sleep(
                    min(answers[-1].retry_after, 2.0) if told else rng.uniform(0.5, 1.5)
                )


async def disconnect(url: str, key: str, text: str, rng: random.Random) -> None:
    """A request whose client leaves: mid-body, or once it is sent, before the answer."""
    host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
    body = json.dumps({"q": text, **PAIR, "api_key": key}).encode()
    head = (f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    try:
        _, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        return
    try:
        writer.write(head + (body[: len(body) // 2] if rng.random() < 0.5 else body))
        await writer.drain()
        await asyncio.sleep(rng.uniform(0, 0.02))
    except OSError:
        pass
    finally:
        writer.close()


async def burst(url: str, clients: int, texts: list[str], answers: list[Answer], seed: int):
    """4x ``clients`` requests at once, each on a connection of its own."""
    rng = random.Random(seed)

    async def one() -> None:
        text = rng.choice(texts)
        async with Connection(url, timeout=WAIT) as http:
            call = _json({"q": text, **PAIR, "api_key": BURST_KEY})
            answers.append(await ask(http, "burst", "json", call, text))

    await asyncio.gather(*(one() for _ in range(4 * clients)))


async def soak(url: str, pid: int, args, texts: list[str]) -> tuple[list[Answer], dict]:
    """The load for ``args.minutes``: every answer, and the server's RSS at the checkpoint (a
    twelfth of the run) and at the end."""
    seconds = args.minutes * 60
    start = time.monotonic()
    until = start + seconds
    answers: list[Answer] = []
    rss: dict = {"checkpoint_seconds": round(seconds / 12, 1)}

    async def checkpoint() -> None:
        await asyncio.sleep(seconds / 12)
        rss["checkpoint_mib"] = round(rss_mib(pid), 1)

    async def bursts() -> None:
        every = args.burst_every or min(60.0, seconds / 3)
        for n in range(1, int(seconds // every) + 1):
            await asyncio.sleep(max(0.0, start + n * every - time.monotonic()))
            if time.monotonic() < until:
                await burst(url, args.clients, texts, answers, seed=1000 + n)

    watch = asyncio.ensure_future(checkpoint())
    await asyncio.gather(
        bursts(), *(client(url, i, args, texts, answers, until) for i in range(args.clients))
    )
    await watch  # a run bounded by --requests may end before its checkpoint
    rss["end_mib"] = round(rss_mib(pid), 1)
    rss["seconds"] = round(time.monotonic() - start, 1)
    return answers, rss


async def idle(url: str, requests: int, texts: list[str]) -> list[Answer]:
    """One polite client, one request after another, with nothing else running."""
    answers: list[Answer] = []
    async with Connection(url, timeout=WAIT) as http:
        for i in range(requests):
            text = texts[i % len(texts)]
            call = _json({"q": text, **PAIR, "api_key": IDLE_KEY})
            answers.append(await ask(http, "idle", "json", call, text))
    return answers


def limited_by_key(url: str, key: str) -> dict[str, int]:
    """The 429s in ``/metrics`` (attnlab_client_requests_total), by key name."""
    page = httpx.get(url + "metrics", headers={"Authorization": f"Bearer {key}"}, timeout=WAIT)
    pattern = (
        r'attnlab_client_requests_total\{client="([^"]+)",outcome="(requests|characters)"\} (\S+)'
    )
    found: dict[str, int] = {}
    for name, _, count in re.findall(pattern, page.text):
        found[name] = found.get(name, 0) + int(float(count))
    return found


def summarize(
    answers: list[Answer], idle_answers: list[Answer], reference: dict, rss: dict
) -> dict:
    by_role: dict[str, dict[str, int]] = {}
    for a in answers:
        status = "closed" if a.closed else str(a.status)
        by_role.setdefault(a.role, {}).setdefault(status, 0)
        by_role[a.role][status] += 1
    asked = [a for a in answers if a.role != "disconnect"]
    errors = [a for a in asked if a.status >= 500 and a.status != 503]
    unanswered = [a for a in asked if a.status == 0]
    checked = [a for a in [*asked, *idle_answers] if a.got is not None]
    wrong = [a for a in checked if a.got != reference[a.text]]
    idle_p99 = percentile([a.seconds for a in idle_answers if a.status == 200], 99)
    polite = [a.seconds for a in asked if a.role == "polite" and a.status == 200]
    polite_p99 = percentile(polite, 99)
    growth = rss.get("end_mib", 0) / rss["checkpoint_mib"] if rss.get("checkpoint_mib") else None
    ratio = polite_p99 / idle_p99 if polite_p99 and idle_p99 else None
    return {
        "requests": len(answers),
        "by_role": by_role,
        "errors_5xx": len(errors),
        "error_examples": [asdict(a) for a in errors[:3]],
        "unanswered": len(unanswered),
        "unanswered_examples": [asdict(a) for a in unanswered[:3]],
        "burst_closed": by_role.get("burst", {}).get("closed", 0),
        "checked": len(checked),
        "wrong": len(wrong),
        "wrong_examples": sorted({a.text for a in wrong})[:3],
        "idle_p99_ms": None if idle_p99 is None else round(idle_p99 * 1000, 1),
        "polite_p99_ms": None if polite_p99 is None else round(polite_p99 * 1000, 1),
        "polite_answered": len(polite),
        "rss_mib": rss,
        "goals": [
            goal("5xx answers other than 503", len(errors), "<= 0"),
            goal("requests unanswered", len(unanswered), "<= 0"),
            goal("200 answers unlike the sentence translated alone", len(wrong), "<= 0"),
            goal("server RSS at the end / after a twelfth of the run", growth, "<= 1.05"),
            goal("polite clients' p99 / the idle service's p99", ratio, "<= 2"),
        ],
    }


def goal(what: str, value: float | None, target: str) -> dict:
    bound = float(target.split()[1])
    value = None if value is None else round(value, 3)
    return {"goal": what, "value": value, "target": target,
            "passed": None if value is None else value <= bound}  # fmt: skip


def print_report(result: dict) -> None:
    print(
        f"\nserve soak: {result['model']}, {result['clients']} clients for "
        f"{result['rss_mib']['seconds']:g} s (asked: {result['minutes']:g} min), torch threads "
        f"{result['threads']}, --req-limit {REQ_LIMIT}, --char-limit {CHAR_LIMIT:,}, flooders' "
        f"keys {FLOOD_LIMIT} a minute; {result['requests']:,} requests"
    )
    for role, statuses in result["by_role"].items():
        print(f"  {role:10s} {dict(sorted(statuses.items()))}")
    print(f"  429s in /metrics by key name: {result['limited_by_key']}")
    rss = result["rss_mib"]
    print(
        f"  RSS {rss.get('checkpoint_mib')} MiB after {rss['checkpoint_seconds']:g} s, "
        f"{rss['end_mib']} MiB at the end; p99 of polite 200s {result['polite_p99_ms']} ms "
        f"({result['polite_answered']:,} answers), idle {result['idle_p99_ms']} ms; "
        f"burst requests closed without an answer: {result['burst_closed']:,}"
    )
    print("\n| goal | value | target | |\n|---|---|---|---|")
    for g in result["goals"]:
        verdict = "n/a" if g["passed"] is None else "PASS" if g["passed"] else "FAIL"
        print(f"| {g['goal']} | {g['value']} | {g['target']} | {verdict} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/numbers/model", help="model directory")
    parser.add_argument("--minutes", type=float, default=60.0, help="the load's length (60)")
    parser.add_argument("--clients", type=int, default=64, help="steady clients (64)")
    parser.add_argument(
        "--requests", type=int, default=10**9, help="the most requests of one client"
    )
    parser.add_argument("--idle-requests", type=int, default=200, help="the idle latency's")
    parser.add_argument("--burst-every", type=float, default=None, help="seconds between bursts")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    parser.add_argument(
        "--batching", choices=("stream", "whole"), default="stream", help="the server's (stream)"
    )
    parser.add_argument("--out", default="benchmarks/results/serve_soak.json", help="JSON report")
    args = parser.parse_args()
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model: {args.model}: no such directory (run `make demo` first)")
    texts = sentences()
    reference = references(args.model, "torch", args.threads, {"run": (None, texts)})["run"]
    with tempfile.TemporaryDirectory() as folder:
        keys = Path(folder) / "keys.txt"
        keys.write_text(keys_text(args.clients))
        flags = ("--api-only", "--api-keys", str(keys), "--req-limit", str(REQ_LIMIT),
                 "--char-limit", str(CHAR_LIMIT), "--batching", args.batching)  # fmt: skip
        process, url = start_server(args.model, args.threads, 8, flags)
        try:
            wait_ready(url)
            idle_answers = asyncio.run(idle(url, args.idle_requests, texts))
            answers, rss = asyncio.run(soak(url, process.pid, args, texts))
            limited = limited_by_key(url, IDLE_KEY)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
    result = {"model": args.model, "minutes": args.minutes, "clients": args.clients,
              "threads": args.threads, "batching": args.batching, "req_limit": REQ_LIMIT,
              "char_limit": CHAR_LIMIT, "flood_limit": FLOOD_LIMIT,
              "limited_by_key": limited}  # fmt: skip
    result.update(summarize(answers, idle_answers, reference, rss))
    print_report(result)
    from common import write_json

    write_json(args.out, result)
    failed = [g["goal"] for g in result["goals"][:3] if not g["passed"]]
    for what in failed:
        print(f"FAILED: {what}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

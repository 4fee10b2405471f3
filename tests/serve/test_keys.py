"""Keys and limits of the translation service (docs/serve.md, "Keys and limits"): the keys file
(its one-line errors, at start-up in the command), a key from LibreTranslate's ``api_key``
field (JSON or form) or an ``Authorization: Bearer`` header, 403 without one (the key never in
an answer or a log), the limits a minute per key (the file's own first) or per address, 429 with
``Retry-After``, a flooding client throttled while a polite one is answered, ``/metrics`` by key
name, and SIGHUP reading the file again in a real ``attnlab serve``.

Nothing here depends on time: the gate's clock is a number the test sets, and every wait ends
on an outcome under a generous deadline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from _helpers import start_serve
from attnlab.cli import main
from attnlab.serve import create_app, keys
from attnlab.serve.keys import WINDOW, Gate, read_keys
from attnlab.serve.process import make_server, url_of

WAIT = 120.0  # seconds: the most any wait below may take before the test fails
ALPHA, BETA, GAMMA = "alpha-7f3a9c01d2", "beta-88e1c0ffee", "gamma-0b5d2e77aa"
KEYS = f"""# the service's keys
{ALPHA} name=alpha
{BETA} requests=2      # named key-3 by its line
{GAMMA} characters=30 name=gamma
"""
ASK = {"source": "en", "target": "de"}


class Clock:
    """The gate's clock: seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keys_file(directory: Path, text: str = KEYS) -> Path:
    path = directory / "keys.txt"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def app(numbers_model_dir, tmp_path_factory):
    gate = Gate(keys_file(tmp_path_factory.mktemp("keys")), requests=1000, characters=100_000)
    gate.clock = Clock()
    app = create_app(numbers_model_dir, device="cpu", gate=gate)
    app.state.service.warming.join(WAIT)
    assert app.state.service.ready.is_set(), "the warm-up"
    yield app
    app.state.service.close(wait=WAIT)
    app.state.queue.close()


@pytest.fixture
def client(app) -> TestClient:
    """The app, every window of its gate closed (its clock a minute on)."""
    app.state.gate.clock.now += WINDOW
    return TestClient(app, base_url="http://localhost")


def alone(app, text: str) -> str:
    return app.state.service.translator.translate([text])[0]


def metric(client: TestClient, key: str, name: str, outcome: str) -> float:
    page = client.get("/metrics", headers={"Authorization": f"Bearer {key}"})
    assert page.status_code == 200, page.text
    line = f'attnlab_client_requests_total{{client="{name}",outcome="{outcome}"}} '
    found = [row for row in page.text.splitlines() if row.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


# -- the keys file -----------------------------------------------------------------------------


def test_the_keys_file_names_limits_and_comments(tmp_path):
    keys = read_keys(keys_file(tmp_path))
    assert [(k.name, k.requests, k.characters) for k in keys] == [
        ("alpha", None, None), ("key-3", 2, None), ("gamma", None, 30),
    ]  # fmt: skip
    assert all(ALPHA not in repr(k) for k in keys)  # a key is never shown


@pytest.mark.parametrize(
    "line",
    [
        "k1 requests=0",
        "k1 requests=five",
        "k1 rate=5",
        "k1 requests=5 requests=6",
        "k1 name=bad/name",
        "k1 characters=3 requests=5",  # out of order
        "k1 second-key",
        "k" * 257,
        "kéy",
    ],
)
def test_a_malformed_line_is_one_error_naming_the_file_and_line(tmp_path, line):
    path = keys_file(tmp_path, f"# comment\n\nk0 name=first\n{line}\n")
    with pytest.raises(ValueError) as error:
        read_keys(path)
    message = str(error.value)
    assert message.startswith(f"{path}: line 4: expected KEY [requests=N]"), message
    assert "\n" not in message and "second-key" not in message


def test_a_repeated_key_or_name_an_empty_file_and_a_missing_one_are_refused(tmp_path):
    for text, line in (("k1\nk1\n", 2), ("k1 name=a\nk2 name=a\n", 2)):
        with pytest.raises(ValueError, match=f"line {line}: the key or name of an earlier line"):
            read_keys(keys_file(tmp_path, text))
    with pytest.raises(ValueError, match="no key; expected one a line"):
        read_keys(keys_file(tmp_path, "# nothing yet\n\n"))
    with pytest.raises(ValueError, match="cannot read it"):
        read_keys(tmp_path / "absent.txt")


def test_the_command_refuses_a_malformed_keys_file_in_one_line(tmp_path, capsys):
    """Checked before the model is read: an empty directory stands in for it."""
    (tmp_path / "model").mkdir()
    serve = ["serve", "--model", str(tmp_path / "model"), "--port", "0"]
    path = keys_file(tmp_path, "secret-one-123\nsecret-two-456 requests=many\n")
    assert main([*serve, "--api-keys", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"attnlab serve: error: --api-keys: {path}: line 2: expected KEY [requests=N] "
        f"[characters=N] [name=NAME] in this order (N: a positive integer, a minute's; NAME: "
        f"letters, digits, '_.-')\n"
    )
    assert main([*serve, "--api-keys", str(tmp_path / "none.txt")]) == 2
    assert capsys.readouterr().err.startswith("attnlab serve: error: --api-keys: ")
    for flag, value in (("--req-limit", "0"), ("--char-limit", "x"), ("--trusted-proxy", "a.b")):
        with pytest.raises(SystemExit) as stop:  # argparse's usage, then one line
            main([*serve, flag, value])
        last = capsys.readouterr().err.splitlines()[-1]
        assert stop.value.code == 2 and last.startswith(f"attnlab serve: error: argument {flag}:")


# -- keys --------------------------------------------------------------------------------------


def test_no_key_or_an_unknown_key_is_403_and_never_shown_or_logged(client, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-key-5e5e5e5e"
    tries = [
        client.post("/translate", json={"q": "seven", **ASK}),
        client.post("/translate", json={"q": "seven", **ASK, "api_key": wrong}),
        client.post("/translate", json={"q": "seven", **ASK, "api_key": 5}),
        client.post("/translate", json={"q": "seven", **ASK, "api_key": ALPHA.upper()}),
        client.post("/translate", data={"q": "seven", **ASK, "api_key": wrong}),
        client.post("/translate", json={"q": "7", **ASK}, headers={"Authorization": wrong}),
        client.post("/api/translate", json={"text": "seven"}),
        client.post("/api/attention", json={"text": "seven"}, headers={"Authorization": wrong}),
        client.get("/metrics"),
        client.get("/metrics", headers={"Authorization": f"Bearer {wrong}"}),
    ]
    for answer in tries:
        assert answer.status_code == 403, answer.text
        body = answer.json()
        assert body["status"] == 403 and body["error"].startswith("api_key: "), body
        assert wrong not in answer.text and ALPHA.upper() not in answer.text
    assert tries[0].json()["error"].startswith("api_key: missing;")
    assert tries[1].json()["error"].startswith("api_key: not a key of this server;")
    assert wrong not in caplog.text and ALPHA not in caplog.text


def test_a_key_as_api_key_in_json_or_a_form_or_a_bearer_header_is_answered(app, client):
    text = "three hundred and twelve"
    body = {"q": text, **ASK}
    answers = [
        client.post("/translate", json={**body, "api_key": ALPHA}),
        client.post("/translate", data={**body, "api_key": ALPHA}),
        client.post("/translate", json=body, headers={"Authorization": f"Bearer {ALPHA}"}),
        client.post("/translate", json=body, headers={"authorization": f"bearer  {GAMMA} "}),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"translatedText": alone(app, text)}
    explorer = client.post(
        "/api/translate", json={"text": text}, headers={"Authorization": f"Bearer {ALPHA}"}
    )
    assert explorer.status_code == 200
    assert explorer.json() == app.state.explorer.translate(text)


def test_the_routes_that_run_no_model_need_no_key(client):
    assert client.get("/health").status_code == 200
    assert client.get("/languages").status_code == 200
    assert client.get("/api/model").status_code == 200


# -- limits ------------------------------------------------------------------------------------


def _as(key: str, q: object = "seven", client: TestClient | None = None) -> httpx.Response:
    return client.post("/translate", json={"q": q, **ASK, "api_key": key})


def test_a_keys_own_request_limit_comes_before_req_limit_with_retry_after(app, client):
    clock = app.state.gate.clock
    assert [_as(BETA, client=client).status_code for _ in range(2)] == [200, 200]
    clock.now += 20
    refused = _as(BETA, client=client)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == str(int(WINDOW) - 20)
    assert refused.json() == {
        "error": f"too many requests: this client may send 2 a minute; try in {int(WINDOW) - 20} s",
        "status": 429,
    }
    assert BETA not in refused.text
    statuses = [_as(ALPHA, client=client).status_code for _ in range(5)]  # --req-limit: 1,000
    assert statuses == [200] * 5
    clock.now += WINDOW - 20  # the window has passed: the key is answered again
    assert _as(BETA, client=client).status_code == 200


def test_char_limit_counts_the_characters_of_q(client, app):
    clock = app.state.gate.clock
    assert _as(GAMMA, ["seven", "forty-two", "eighteen"], client).status_code == 200  # 22
    refused = _as(GAMMA, "nine hundred", client)  # 12 more: 34 > 30
    assert refused.status_code == 429 and refused.json()["error"].startswith(
        "too many characters: this client may send 30 a minute"
    )
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
    assert _as(GAMMA, "eight", client).status_code == 200  # 27: refused ones do not count
    too_long = _as(GAMMA, "three hundred and thirty-three", client)  # 30 alone: fits next time
    assert too_long.status_code == 429
    clock.now += WINDOW
    assert _as(GAMMA, "three hundred and thirty-three", client).status_code == 200
    never = _as(GAMMA, "three hundred and thirty-three thousand", client)
    assert never.status_code == 400  # it could never pass: no Retry-After to wait for
    assert never.json()["error"] == "q: 39 characters; this client may send 30 a minute"


def test_metrics_count_by_key_name_never_by_key(client):
    before = metric(client, ALPHA, "key-3", "requests")
    admitted = metric(client, ALPHA, "key-3", "admitted")
    statuses = [_as(BETA, client=client).status_code for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    assert metric(client, ALPHA, "key-3", "requests") - before == 2
    assert metric(client, ALPHA, "key-3", "admitted") - admitted == 2
    page = client.get("/metrics", headers={"Authorization": f"Bearer {GAMMA}"}).text
    assert 'client="alpha"' in page and all(k not in page for k in (ALPHA, BETA, GAMMA))


def test_per_address_limits_without_keys(numbers_model_dir):
    gate = Gate(requests=3, trusted=["10.0.0.9"])
    gate.clock = Clock()
    app = create_app(numbers_model_dir, device="cpu", warm_up=False, api_only=True, gate=gate)
    clients = {
        address: TestClient(app, base_url="http://localhost", client=(address, 5000))
        for address in ("10.0.0.1", "10.0.0.2", "10.0.0.9")
    }
    try:
        ask = {"q": "seven", **ASK}

        def statuses(address: str, times: int, **kwargs) -> list[int]:
            post = clients[address].post
            return [post("/translate", json=ask, **kwargs).status_code for _ in range(times)]

        assert statuses("10.0.0.1", 5) == [200, 200, 200, 429, 429]
        assert statuses("10.0.0.2", 3) == [200, 200, 200]  # its own window
        # An untrusted peer's X-Forwarded-For is not read: it is still 10.0.0.1.
        spoofed = {"headers": {"X-Forwarded-For": "203.0.113.7"}}
        assert statuses("10.0.0.1", 1, **spoofed) == [429]
        # The trusted proxy's: the address it added (the last) is the client.
        for address in ("203.0.113.7", "203.0.113.8"):
            forwarded = {"headers": {"X-Forwarded-For": f"198.51.100.1, {address}"}}
            assert statuses("10.0.0.9", 4, **forwarded) == [200, 200, 200, 429]
        page = clients["10.0.0.1"].get("/metrics").text  # no keys: no key needed
        assert 'attnlab_client_requests_total{client="10.0.0.1",outcome="requests"} 3' in page
        assert 'client="203.0.113.8",outcome="admitted"} 3' in page
        assert 'client="10.0.0.9"' not in page
    finally:
        app.state.service.close(wait=WAIT)
        app.state.queue.close()


def test_a_429_is_held_for_its_retry_after_at_most_the_gates_hold(tmp_path, monkeypatch):
    """``Gate.admit`` sends a 429 after ``min(Retry-After, hold)`` seconds (a flooder that asks
    again at once asks once a second), and a 403 or an admitted request at once."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(keys.asyncio, "sleep", sleep)
    gate = Gate(keys_file(tmp_path), requests=1)
    gate.clock = clock = Clock()
    scope = {"type": "http", "headers": [], "client": ("10.0.0.1", 5)}

    def admit(**fields: object) -> int:
        try:
            asyncio.run(gate.admit(scope, {"q": "one", **fields}))
        except HTTPException as refused:
            return refused.status_code
        return 200

    assert (admit(api_key=BETA), admit(api_key=BETA), admit(api_key=BETA)) == (200, 200, 429)
    assert slept == [keys.HOLD] == [1.0]  # Retry-After 60 s, held a second
    assert admit(api_key="no-such-key") == 403 and slept == [1.0]
    gate.hold, clock.now = 30.0, clock.now + WINDOW - 1.5  # 1.5 s of the window left
    assert admit(api_key=BETA) == 429 and slept == [1.0, 2.0]  # Retry-After 2 s


def test_a_flooding_client_is_throttled_while_a_polite_one_is_answered(numbers_model_dir, tmp_path):
    """Concurrently, over a real server: the flooder (its own limit 5 a minute) asks 40 times
    without pause on 4 connections, the polite client 8 times, one after another, and is
    answered while the flooder's 429s are held. The clock stands still, so the outcome is
    counts alone."""
    path = keys_file(
        tmp_path, "flood-key-0001 requests=5 name=flood\npolite-key-0002 name=polite\n"
    )
    gate = Gate(path, requests=100)
    gate.clock = Clock()
    app = create_app(numbers_model_dir, device="cpu", api_only=True, gate=gate)
    app.state.service.warming.join(WAIT)

    async def ask(url: str, key: str, times: int, pause: float) -> list[int]:
        found = []
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as http:
            for _ in range(times):
                body = {"q": "forty-two", **ASK, "api_key": key}
                found.append((await http.post("translate", json=body)).status_code)
                await asyncio.sleep(pause)
        return found

    async def both(url: str) -> tuple[list[int], list[int]]:
        flood = asyncio.gather(*(ask(url, "flood-key-0001", 10, 0) for _ in range(4)))
        polite = ask(url, "polite-key-0002", 8, 0.01)
        floods, polite_statuses = await asyncio.gather(flood, polite)
        return [s for f in floods for s in f], polite_statuses

    with served(app) as url:
        flooded, polite = asyncio.run(both(url))
    assert sorted(flooded) == [200] * 5 + [429] * 35
    assert polite == [200] * 8
    assert gate.counts.value(client="flood", outcome="requests") == 35
    assert gate.counts.value(client="polite", outcome="admitted") == 8


@contextmanager
def served(app) -> Iterator[str]:
    """``app`` on a uvicorn server on 127.0.0.1 (a free port), in a thread: its URL."""
    server, sock = make_server(app, port=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)
        sock.close()
        app.state.service.close(wait=WAIT)
        app.state.queue.close()


# -- SIGHUP ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sighup_reads_the_keys_again_and_keeps_them_when_the_file_is_bad(
    numbers_model_dir, tmp_path
):
    """A real `attnlab serve`: the file rewritten atomically, then SIGHUP: the new key works
    and the old one does not; a malformed file then keeps the keys, said in one log line."""
    old, new = "old-key-31415926", "new-key-27182818"
    path = keys_file(tmp_path, f"{old}\n")
    process = start_serve(
        numbers_model_dir, "--api-only", "--device", "cpu", "--api-keys", str(path)
    )
    errors: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [errors.put(x) for x in process.stderr], daemon=True).start()
    try:
        first = process.stdout.readline()
        assert "the translation API is at http://127.0.0.1:" in first, first
        url = re.search(r"http://\S+/", first).group(0)

        def status(key: str) -> int:
            body = {"q": "seven", **ASK, "api_key": key}
            return httpx.post(url + "translate", json=body, timeout=WAIT).status_code

        deadline = time.monotonic() + WAIT
        while httpx.get(url + "health", timeout=WAIT).status_code != 200:
            assert time.monotonic() < deadline and process.poll() is None, "/health 200"
            time.sleep(0.05)
        assert (status(old), status(new)) == (200, 403)

        def rewrite(text: str) -> None:
            (tmp_path / "keys.new").write_text(text)
            os.replace(tmp_path / "keys.new", path)
            process.send_signal(signal.SIGHUP)

        rewrite(f"# rotated\n{new} name=rotated\n")
        deadline = time.monotonic() + WAIT
        while status(new) != 200:
            assert time.monotonic() < deadline and process.poll() is None, "the new key"
            time.sleep(0.05)
        assert status(old) == 403
        lines: list[str] = []

        def logged(text: str) -> None:
            while text not in lines:
                lines.append(errors.get(timeout=WAIT).strip())

        logged(f"1 keys read again from {path}")
        rewrite(f"{new} requests=lots\n")
        logged(
            f"the keys are not read again, the old ones stay: {path}: line 1: expected KEY "
            f"[requests=N] [characters=N] [name=NAME] in this order (N: a positive integer, a "
            f"minute's; NAME: letters, digits, '_.-')"
        )
        assert (status(new), status(old)) == (200, 403)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=WAIT) == 0
        while not errors.empty():
            lines.append(errors.get())
        assert all(old not in line and new not in line for line in lines), lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)

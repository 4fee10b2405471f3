"""The explorer's limits (attnlab.serve.limits, docs/serve.md "Limits"): the model's bounded
queue and its deadline, requests whose clients left, cheap routes that never wait for the
model, the Host allow-list, HEAD, generic 500s, capped attention answers, and uvicorn's
timeouts and connection cap, through a real server on 127.0.0.1.

Nothing here asserts a duration: the model is held busy by an event the test controls, and
waits end on outcomes (a status, a closed socket, a counter) under generous deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from attnlab.serve import create_app
from attnlab.serve.limits import Busy, ClientGone, Limits, ModelQueue
from attnlab.serve.process import make_server, url_of

WAIT = 60.0  # seconds: the most any wait below may take before the test fails


def wait_until(condition: Callable[[], bool], what: str, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(0.01)


# -- the queue alone ---------------------------------------------------------------------------


def test_queue_runs_in_order_and_refuses_beyond_its_capacity():
    gate = threading.Event()
    ran: list[int] = []

    def work(i: int):
        def job() -> int:
            assert gate.wait(WAIT)
            ran.append(i)
            return i

        return job

    async def scenario() -> tuple[list[int], Busy]:
        queue = ModelQueue(waiting=2, timeout=WAIT)
        tasks = [asyncio.ensure_future(queue.run(work(i))) for i in range(3)]
        while queue.pending < 3:
            await asyncio.sleep(0.01)
        with pytest.raises(Busy) as refused:
            await queue.run(work(99))
        gate.set()
        results = await asyncio.gather(*tasks)
        assert dict(queue.counts) == {"admitted": 3, "refused": 1, "done": 3}
        queue.close()
        return results, refused.value

    results, refused = asyncio.run(scenario())
    assert results == ran == [0, 1, 2]  # first come, first served
    assert refused.retry_after >= 1 and "the model is busy" in str(refused)


def test_queue_deadline_and_a_departed_client_drop_waiting_jobs():
    gate = threading.Event()
    ran: list[str] = []

    def job(name: str):
        def run() -> str:
            assert gate.wait(WAIT)
            ran.append(name)
            return name

        return run

    async def scenario() -> None:
        queue = ModelQueue(waiting=4, timeout=0.5)  # the deadline under test
        running = asyncio.ensure_future(queue.run(job("running")))
        while queue.pending < 1:
            await asyncio.sleep(0.01)
        left = asyncio.Event()

        async def receive():
            await left.wait()
            return {"type": "http.disconnect"}

        gone = asyncio.ensure_future(queue.run(job("gone"), receive))
        left.set()
        with pytest.raises(ClientGone):
            await gone
        with pytest.raises(Busy, match=r"no answer within 0\.5 s"):
            await queue.run(job("late"))
        gate.set()
        with pytest.raises(Busy):  # the running job itself outlived the deadline
            await running
        while queue.pending:
            await asyncio.sleep(0.01)
        assert queue.counts["dropped"] == 2 and queue.counts["expired"] == 2
        queue.close()

    asyncio.run(scenario())
    assert ran == ["running"]  # neither dropped job reached the model


# -- a real server -----------------------------------------------------------------------------


@contextlib.contextmanager
def live(app) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in a thread: its base URL."""
    server, sock = make_server(app, port=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), "the server starting")
        assert server.started
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)
        sock.close()
        app.state.queue.close()


class BlockedModel:
    """Replaces the explorer's translation with one that waits for :meth:`release`."""

    def __init__(self, app) -> None:
        self.explorer = app.state.explorer
        self.real = self.explorer.run_translate
        self.gate = threading.Event()
        self.calls = 0
        self.explorer.run_translate = self

    def __call__(self, *args):
        self.calls += 1
        assert self.gate.wait(WAIT), "the test never released the model"
        return self.real(*args)

    def release(self) -> None:
        self.gate.set()


def post_translate(url: str, text: str = "seven") -> httpx.Response:
    return httpx.post(url + "api/translate", json={"text": text, "beam_size": 1}, timeout=WAIT)


def test_cheap_routes_answer_while_the_model_is_busy_and_the_queue_full(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu", limits=Limits(queue=2))
    model = BlockedModel(app)
    with live(app) as url, ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(post_translate, url) for _ in range(3)]
        wait_until(lambda: app.state.queue.pending == 3, "three requests admitted")
        refused = post_translate(url)
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"].startswith("the model is busy: 3 requests")
        with httpx.Client(base_url=url, timeout=WAIT) as http:  # the model is still blocked
            assert http.get("/api/model").status_code == 200
            assert http.get("/api/positional", params={"length": 8}).status_code == 200
            assert http.post("/api/masks", json={"texts": ["two"]}).status_code == 200
            assert http.get("/").status_code == 200
            assert http.head("/static/app.js").status_code == 200
        assert not any(f.done() for f in waiting) and model.calls == 1
        model.release()
        assert [f.result().status_code for f in waiting] == [200, 200, 200]


def test_requests_whose_clients_left_never_reach_the_model(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu", limits=Limits(queue=8))
    model = BlockedModel(app)
    host, port = "127.0.0.1", None
    with live(app) as url, ThreadPoolExecutor(1) as pool:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        first = pool.submit(post_translate, url)
        wait_until(lambda: model.calls == 1, "the first request reaching the model")
        body = b'{"text": "nine"}'
        head = (
            f"POST /api/translate HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        for i in range(6):  # six clients that ask, then hang up while they wait
            with socket.create_connection((host, port), timeout=WAIT) as client:
                client.sendall(head + body)
                admitted = lambda i=i: app.state.queue.counts["admitted"] == i + 2  # noqa: E731
                wait_until(admitted, "the request admitted")
        wait_until(lambda: app.state.queue.counts["dropped"] == 6, "six dropped requests")
        assert app.state.queue.pending == 1
        model.release()
        assert first.result().status_code == 200
        assert post_translate(url).status_code == 200
    assert model.calls == 2  # the first and the last: none of the six ran


def test_a_request_past_its_deadline_gets_a_503_and_is_dropped(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu", limits=Limits(request_timeout=0.5))
    model = BlockedModel(app)
    with live(app) as url, ThreadPoolExecutor(1) as pool:
        first = pool.submit(post_translate, url)
        wait_until(lambda: model.calls == 1, "the first request reaching the model")
        late = post_translate(url)
        assert late.status_code == 503 and "no answer within 0.5 s" in late.json()["error"]
        assert "retry-after" in late.headers
        model.release()
        assert first.result().status_code == 503  # it ran past the deadline too
    assert model.calls == 1 and app.state.queue.counts["dropped"] == 1


def test_positional_and_masks_take_no_model_lock(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu")
    with TestClient(app, base_url="http://localhost") as client, app.state.explorer.lock:
        assert client.get("/api/positional").status_code == 200
        assert client.post("/api/masks", json={"texts": ["two", "three"]}).status_code == 200
        assert client.get("/api/model").status_code == 200


def test_attention_answers_are_encoded_outside_the_lock(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu", warm_up=False)  # nothing else holds it
    explorer = app.state.explorer
    real, held = explorer.attention_answer, []

    def answer(*args):
        held.append(explorer.lock.locked())
        return real(*args)

    explorer.attention_answer = answer
    with TestClient(app, base_url="http://localhost") as client:
        assert client.post("/api/attention", json={"text": "seven"}).status_code == 200
    assert held == [False]


def test_an_over_long_target_is_refused_before_the_beam_search(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu")
    explorer = app.state.explorer
    searched = []
    real = explorer._generate
    explorer._generate = lambda *a: searched.append(1) or real(*a)
    with TestClient(app, base_url="http://localhost") as client:
        body = {"text": "seven", "target": "drei " * 200, "beam_size": 16}
        answer = client.post("/api/attention", json=body)
    assert answer.status_code == 422 and answer.json()["error"].startswith("target: ")
    assert searched == []


# -- capped attention answers ------------------------------------------------------------------


def _capped(numbers_model_dir, cap: int, body: dict) -> dict:
    app = create_app(numbers_model_dir, device="cpu", limits=Limits(attention_elements=cap))
    with TestClient(app, base_url="http://localhost") as client:
        answer = client.post("/api/attention", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_attention_answers_are_capped_and_say_so(numbers_model_dir):
    body = {"text": "seven hundred and two"}
    full = _capped(numbers_model_dir, 1 << 18, body)
    assert full["capped"] is False and full["encoder"]["layers"] == [0, 1]
    kinds = ("encoder", "decoder", "cross")
    per_head = sum(full[kind]["queries"] * full[kind]["keys"] for kind in kinds)
    assert full["elements"] == 2 * 4 * per_head

    def check(answer: dict, layers: list[int], heads: list[int]) -> None:
        for kind in kinds:
            maps = answer[kind]
            assert (maps["layers"], maps["heads"]) == (layers, heads)
            assert len(maps["weights"]) == len(layers) * len(heads) * maps["queries"] * maps["keys"]
        assert answer["elements"] == len(layers) * len(heads) * per_head
        assert answer["translation"] == full["translation"]

    one_layer = _capped(numbers_model_dir, int(6.5 * per_head), body)  # 4 heads fit, not 8
    assert one_layer["capped"] is True and one_layer["max_elements"] == int(6.5 * per_head)
    check(one_layer, [0], [0, 1, 2, 3])
    check(_capped(numbers_model_dir, int(2.5 * per_head), body), [0], [0, 1])  # 2 heads fit
    check(_capped(numbers_model_dir, 1, body), [0], [0])  # one head always comes
    picked = _capped(numbers_model_dir, 1, {**body, "layers": [1], "heads": [3, 2]})
    check(picked, [1], [2])  # the asked-for ones, in order, as many as fit
    exact = _capped(numbers_model_dir, 1 << 18, {**body, "layers": [1], "heads": [3, 2]})
    assert exact["capped"] is False
    check(exact, [1], [2, 3])


def test_the_default_cap_bounds_the_largest_answer(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu")
    explorer = app.state.explorer
    greedy = explorer.decoding.updated(beam_size=1)
    job = explorer.prepare_attention(" ".join(["seven hundred and seventy-seven"] * 12), greedy)
    result = explorer.run_attention(job)
    answer = explorer.attention_answer(result, job, 5000)
    assert answer["elements"] <= 3 * 4 * 64 * 64  # at most the first layer: 64 x 64 maps
    assert answer["capped"] is True and answer["encoder"]["layers"] == [0]


# -- HTTP: Host, HEAD, 500, static names -------------------------------------------------------


@pytest.fixture(scope="module")
def app(numbers_model_dir):
    return create_app(numbers_model_dir, device="cpu", allowed_hosts=["localhost", "explorer.lan"])


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("localhost", 200),
        ("localhost:8000", 200),
        ("LOCALHOST.", 200),
        ("explorer.lan:80", 200),
        ("evil.com", 400),
        ("evil.com:8000", 400),
        ("localhost.evil.com", 400),
        ("127.0.0.1", 400),  # not in this app's list
        ("", 400),
    ],
)
def test_host_allow_list(app, host, status):
    with TestClient(app, base_url="http://localhost") as client:
        answer = client.get("/api/model", headers={"host": host})
    assert answer.status_code == status
    if status == 400:
        assert answer.json()["error"].startswith("host: ")


def test_host_allow_list_defaults_and_wildcard(numbers_model_dir):
    default = create_app(numbers_model_dir, device="cpu")
    with TestClient(default, base_url="http://localhost") as client:
        for host in ("127.0.0.1:9000", "[::1]:9000", "localhost"):
            assert client.get("/api/model", headers={"host": host}).status_code == 200
        assert client.get("/api/model", headers={"host": "testserver"}).status_code == 400
    anyone = create_app(numbers_model_dir, device="cpu", allowed_hosts=["*"])
    with TestClient(anyone) as client:
        assert client.get("/api/model").status_code == 200


def test_head_on_get_routes(app):
    with TestClient(app, base_url="http://localhost") as client:
        for path in ("/api/model", "/api/positional?length=4", "/", "/static/app.js"):
            got, head = client.get(path), client.head(path)
            assert head.status_code == 200, path
            assert head.content == b""
            assert head.headers["content-length"] == str(len(got.content))
            assert head.headers["content-type"] == got.headers["content-type"]
        assert client.head("/api/translate").status_code == 405
        assert client.head("/nowhere").status_code == 404


def test_a_500_is_generic_and_logged_on_one_line(numbers_model_dir, caplog):
    app = create_app(numbers_model_dir, device="cpu")
    secret = "/opt/site-packages/attnlab/secret: File name too long"

    def broken() -> dict:
        raise OSError(36, secret)

    app.state.explorer.info = broken
    with (
        caplog.at_level(logging.ERROR, logger="attnlab.serve"),
        TestClient(app, base_url="http://localhost") as client,
    ):
        answer = client.get("/api/model")
        assert client.get("/api/positional").status_code == 200  # still serving
    assert answer.status_code == 500
    assert answer.json() == {
        "error": "internal error: the server could not answer this request (logged)",
        "status": 500,
    }
    assert "secret" not in answer.text
    records = [r for r in caplog.records if r.name == "attnlab.serve"]
    assert len(records) == 1 and records[0].exc_info is None
    line = records[0].getMessage()
    assert "\n" not in line and line.startswith("500 GET /api/model: OSError: ")
    assert secret in line


def test_static_names_are_length_capped(app, monkeypatch):
    with TestClient(app, base_url="http://localhost") as client:
        for name in ("a" * 65, "a" * 300 + ".js", "x" * 5000):
            answer = client.get(f"/static/{name}")
            assert answer.status_code == 404 and "static" in answer.json()["error"]
        assert client.get("/static/" + "a" * 64).status_code == 404  # allowed, just missing

        def refuse(self) -> bool:
            raise OSError(36, "File name too long")

        monkeypatch.setattr("pathlib.Path.is_symlink", refuse)
        answer = client.get("/static/app.js")  # whatever the file system says: a 404
    assert answer.status_code == 404


# -- uvicorn: timeouts and connections ---------------------------------------------------------


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server closes ``sock`` (reads until end of stream, within WAIT)."""
    sock.settimeout(WAIT)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def _address(url: str) -> tuple[str, int]:
    host, port = url[len("http://") :].strip("/").rsplit(":", 1)
    return host, int(port)


@pytest.fixture(scope="module")
def strict(numbers_model_dir) -> Iterator[tuple[str, int]]:
    """A server with one-second timeouts for heads, bodies and idle connections, and a cap of
    8 connections: its (host, port)."""
    limits = Limits(header_timeout=1, body_timeout=1, keep_alive=1, max_connections=8)
    app = create_app(numbers_model_dir, device="cpu", limits=limits)
    with live(app) as url:
        yield _address(url)


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /api/model HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow:"],
    ids=["nothing", "partial-head"],
)
def test_a_head_that_does_not_arrive_closes_the_connection(strict, sent):
    with socket.create_connection(strict, timeout=WAIT) as sock:
        sock.sendall(sent)
        assert _closed_by_server(sock)


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_a_slow_body_gets_a_408(strict):
    host, port = strict
    with socket.create_connection(strict, timeout=WAIT) as sock:
        sock.sendall(
            f"POST /api/translate HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{".encode()
        )
        answer = b""
        while b"}" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b'"error":"body: not received within 1 s"' in answer


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_an_idle_keep_alive_connection_is_closed(strict):
    host, port = strict
    with socket.create_connection(strict, timeout=WAIT) as sock:
        sock.sendall(f"GET /api/model HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        assert _closed_by_server(sock)


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_silent_connections_are_all_closed(strict):
    """300 connections that say nothing: those beyond the cap at once, the others when their
    head is late; the server answers afterwards."""
    host, port = strict
    opened = [socket.create_connection(strict, timeout=WAIT) for _ in range(300)]
    try:
        assert all(_closed_by_server(sock) for sock in opened)
    finally:
        for sock in opened:
            sock.close()
    with httpx.Client(timeout=WAIT) as http:
        assert http.get(f"http://{host}:{port}/api/model").status_code == 200


def test_connections_beyond_the_cap_are_closed_at_once(numbers_model_dir):
    limits = Limits(header_timeout=WAIT, max_connections=8, concurrency=100)
    app = create_app(numbers_model_dir, device="cpu", limits=limits)
    with live(app) as url:
        host, port = _address(url)
        opened = [socket.create_connection((host, port), timeout=WAIT) for _ in range(40)]
        answered = 0
        try:
            for sock in opened:
                try:
                    sock.sendall(f"GET /api/model HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                    first = sock.recv(65536)
                except (BrokenPipeError, ConnectionResetError):
                    first = b""
                answered += first.startswith(b"HTTP/1.1 200 ")
                assert first == b"" or first.startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in opened:
                sock.close()
    assert answered == 8  # the first eight; the 32 others were closed unread

"""benchmarks/lean_http.py, the load benchmarks' HTTP client, against a scripted asyncio server
on 127.0.0.1: keep-alive, a server that closes, a chunked answer it refuses to misread, an
answer cut short; and against `attnlab serve`'s own app, the same answers as httpx."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lean(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import lean_http

    return lean_http


def _answer(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _serve(script):
    """A server that reads each request (head and Content-Length body) and answers with
    ``script(connection number, request number, request) -> bytes | None`` (None: close
    without an answer); ``(url, connections opened, server)``."""
    opened: list[int] = []

    async def handle(reader, writer):
        n = len(opened)
        opened.append(n)
        try:
            for k in range(100):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        (line.split(b":")[1] for line in head.split(b"\r\n")
                         if line.lower().startswith(b"content-length")),
                        b"0",
                    )
                )  # fmt: skip
                body = await reader.readexactly(length)
                out = script(n, k, head + body)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}/", opened, server


def test_keep_alive_json_and_headers(lean):
    async def main():
        seen = []

        def script(n, k, request):
            seen.append(request)
            return _answer(json.dumps({"k": k}).encode(), "Retry-After: 3")

        url, opened, server = await _serve(script)
        async with server, lean.Connection(url) as http:
            first = await http.request("POST", "/translate", {"q": "twelve"})
            second = await http.request("GET", "/health")
        return first, second, opened, seen

    first, second, opened, seen = asyncio.run(main())
    assert first == (200, {"content-length": "8", "retry-after": "3"}, b'{"k": 0}')
    assert second[2] == b'{"k": 1}' and opened == [0]  # one connection, kept alive
    head, body = seen[0].split(b"\r\n\r\n")
    assert head.startswith(b"POST /translate HTTP/1.1\r\n")
    assert b"Content-Type: application/json" in head and json.loads(body) == {"q": "twelve"}
    assert seen[1].startswith(b"GET /health HTTP/1.1\r\n") and b"Content-Length: 0" in seen[1]


def test_a_closed_connection_is_opened_again_and_nothing_is_retried(lean):
    """Connection: close, and a server that drops the connection after its first answer: the
    request it dropped is an error (never sent again), the next goes on a new connection."""

    async def main():
        def script(n, k, request):
            if n == 0:
                return _answer(b"a", "Connection: close")
            return _answer(b"b") if k == 0 else None

        url, opened, server = await _serve(script)
        answers = []
        async with server, lean.Connection(url) as http:
            for _ in range(5):
                try:
                    answers.append((await http.request("GET", "/"))[2])
                except lean.TransportError:
                    answers.append(None)
        return answers, opened

    answers, opened = asyncio.run(main())
    assert answers == [b"a", b"b", None, b"b", None]
    assert opened == [0, 1, 2]


def test_what_it_cannot_read_is_an_error_not_a_wrong_answer(lean):
    async def main():
        def script(n, k, request):
            if b"/chunked" in request:
                return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"
            if b"/short" in request:
                return b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"  # then closes
            return None  # a fresh connection closed without an answer

        url, _, server = await _serve(script)
        errors = []
        async with server, lean.Connection(url, timeout=30) as http:
            for path in ("/chunked", "/short", "/none"):
                with pytest.raises(lean.TransportError) as caught:
                    await http.request("GET", path)
                errors.append(str(caught.value))
        return errors

    chunked, short, none = asyncio.run(main())
    assert chunked.startswith("GET /chunked: ValueError") and "chunked" in chunked
    assert short.startswith("GET /short: ")
    assert none.startswith("GET /none: IncompleteReadError")


def test_url_must_name_host_and_port(lean):
    with pytest.raises(ValueError, match="url: expected http://HOST:PORT/"):
        lean.Connection("https://example.org/")


def test_the_same_answers_as_httpx_from_the_service(lean, numbers_model_dir):
    """`attnlab serve`'s app under uvicorn: /translate and a 400 through both clients."""
    from attnlab.serve import create_app
    from attnlab.serve.process import make_server, url_of

    app = create_app(numbers_model_dir, device="cpu", api_only=True)
    server, sock = make_server(app, port=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = url_of(sock)
    try:
        ok = {"q": "forty-two", "source": "en", "target": "de"}
        bad = {"q": 5, "source": "en", "target": "de"}
        with httpx.Client(base_url=url, timeout=120) as client:
            for _ in range(600):
                if client.get("health").status_code == 200:
                    break
                threading.Event().wait(0.1)
            expected = [client.post("translate", json=body) for body in (ok, bad)]

        async def ask():
            async with lean.Connection(url) as http:
                return [await http.request("POST", "/translate", body) for body in (ok, bad)]

        got = asyncio.run(ask())
        assert [g[0] for g in got] == [e.status_code for e in expected] == [200, 400]
        assert [json.loads(g[2]) for g in got] == [e.json() for e in expected]
    finally:
        server.should_exit = True
        thread.join(60)

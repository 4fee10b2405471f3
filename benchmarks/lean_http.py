"""A lean HTTP/1.1 client for the load benchmarks: one keep-alive connection over asyncio
streams, JSON in, status, headers and body out.

Why not httpx: a load generator must cost little beside what it measures. On the 2-core
machine, one httpx ``AsyncClient`` asking ``attnlab serve`` (the numbers demo model on the
ctranslate2 engine, one sentence a request, 1 client) took 3.44 ms a request against 1.98 ms
for ``http.client`` on the same server (medians of 300, 2026-12-06): 1.46 ms of the client's
own Python, on the critical path at 1 client and eating the server's core at 32. This client
writes the request in one ``write`` and parses only what the benchmarks read (the status line,
``Content-Length``, ``Retry-After``, ``Connection: close``), so a request costs about what
``http.client``'s does.

It speaks only what ``attnlab serve`` answers (uvicorn: a ``Content-Length`` on every answer,
no chunked bodies; a chunked answer is an error here, not silently misread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Connection", "TransportError"]


class TransportError(Exception):
    """No answer: the connection failed, closed mid-answer, or the answer was not HTTP/1.1
    this client reads; ``timeout``: none came within the connection's ``timeout``."""

    def __init__(self, message: str, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class Connection:
    """One client's keep-alive connection to ``url`` (``http://host:port/``), opened on first
    use and again after it closed. ``await request(method, path, body)`` -> ``(status,
    headers, body)``, headers lowercased; :class:`TransportError` where no answer came (within
    ``timeout`` seconds), the request it closed on included."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"url: expected http://HOST:PORT/, got {url!r}")
        self.host, self.port, self.timeout = parts.hostname, parts.port, timeout
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        content: bytes | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """``body`` sent as JSON; or ``content`` as it is (its type among ``headers``)."""
        data = b"" if body is None else json.dumps(body).encode("utf-8")
        data = data if content is None else content
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if body is not None and content is None:
            head.append("Content-Type: application/json")
        head.append(f"Content-Length: {len(data)}")
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
        try:
            return await asyncio.wait_for(self._exchange(raw), self.timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
            await self.close()
            timeout = isinstance(e, asyncio.TimeoutError)
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}", timeout) from None

    async def _exchange(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        # Never retried: a request without an answer is reported (the benchmarks count it as
        # unanswered), even where the server only dropped an idle keep-alive connection.
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._streams
        writer.write(raw)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        version, status, *_ = status_line.decode("latin-1").split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x answer: {status_line[:40]!r}")
        headers: dict[str, str] = {}
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", ""):
            raise ValueError("a chunked answer (this client reads Content-Length bodies only)")
        content = await reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return int(status), headers, content

    async def close(self) -> None:
        if self._streams is not None:
            writer = self._streams[1]
            self._streams = None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

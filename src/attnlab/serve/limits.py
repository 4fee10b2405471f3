"""The explorer's limits: what keeps one slow or hostile client from taking the server.

* :class:`Limits`: every number in one place (docs/serve.md, "Limits").
* :class:`ModelQueue`: the model runs one request at a time, in one worker thread; at most
  ``Limits.queue`` more wait, in order; beyond that a request is refused at once (503 with
  ``Retry-After``). A request that has waited and run for ``Limits.request_timeout`` seconds
  gets a 503; one whose client has gone away is dropped before it reaches the model.
* ASGI middleware: :class:`HostGuard` (the Host header must name this server: DNS rebinding),
  :class:`HeadAsGet` (HEAD on every GET route), :class:`InternalErrors` (a generic 500 body,
  the details in one log line), :class:`Draining` (a 503 for new requests while the server
  shuts down).
* :func:`protocol_class`: uvicorn's h11 protocol with a deadline for each request's head and a
  cap on open connections (uvicorn has neither of its own); :func:`server_config` gives it to
  uvicorn with the keep-alive timeout, the concurrency limit and the largest head.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._checks import is_int, is_number
from ..inference.bounds import MAX_TOKENS

__all__ = [
    "LOOPBACK_NAMES",
    "MAX_BEAM",
    "Busy",
    "ClientGone",
    "Draining",
    "HeadAsGet",
    "HostGuard",
    "InternalErrors",
    "Limits",
    "ModelQueue",
    "client_left",
    "protocol_class",
    "retrieve",
    "server_config",
]

log = logging.getLogger("attnlab.serve")
T = TypeVar("T")

#: Host names that always reach a loopback-bound server.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: The widest beam a request may ask for (and the server's default may be).
MAX_BEAM = 16


#: How the translation batcher decodes (:class:`Limits`' ``batching``).
BATCHING = ("stream", "whole")


@dataclass(frozen=True)
class Limits:
    """The explorer's limits (seconds, counts); the defaults suit one person's browser.

    Attributes:
        queue: model requests that may wait while one runs; more get a 503 at once.
        request_timeout: seconds a model request may wait and run before its 503.
        body_timeout: seconds to receive a request body (a 408 after).
        header_timeout: seconds for a request's head (request line and headers) to arrive,
            from the connection's start or the previous answer; the connection is closed after.
        keep_alive: seconds an idle connection is kept open between requests.
        concurrency: uvicorn's ``limit_concurrency``: a request that arrives while this many
            connections are open gets uvicorn's plain-text 503.
        max_connections: connections beyond this many open ones are closed at once (above
            ``concurrency``, so that a burst of connections is answered 503, not dropped).
        max_head_bytes: the largest request head (h11's ``max_incomplete_event_size``).
        attention_elements: the most attention weights in one answer (see docs/serve.md).
        translate_waiting: sentences that may wait for the translation batcher; more get a
            503 at once.
        batch_tokens: source tokens in one batch of the translation batcher.
        batch_delay: seconds the batcher may wait, right after a batch, for more requests.
        batching: ``"stream"``: greedy requests on the torch engine decode as a stream that
            takes new requests between steps (docs/serve.md, "Batching"); ``"whole"``: every
            batch is decoded whole.
    """

    queue: int = 8
    request_timeout: float = 30.0
    body_timeout: float = 10.0
    header_timeout: float = 10.0
    keep_alive: float = 5.0
    concurrency: int = 128
    max_connections: int = 512
    max_head_bytes: int = 16 * 1024
    attention_elements: int = 1 << 18
    translate_waiting: int = 256
    batch_tokens: int = MAX_TOKENS
    batch_delay: float = 0.005
    batching: str = "stream"

    def __post_init__(self) -> None:
        names = ("queue", "concurrency", "max_connections", "max_head_bytes")
        for name in (*names, "translate_waiting", "batch_tokens"):
            value = getattr(self, name)
            if not (is_int(value) and value >= 0):
                raise ValueError(f"{name}: expected an integer >= 0, got {value!r}")
        if self.attention_elements < 1 or self.concurrency < 1 or self.max_connections < 1:
            raise ValueError("attention_elements, concurrency, max_connections: expected >= 1")
        if self.translate_waiting < 1 or self.batch_tokens < 1:
            raise ValueError("translate_waiting, batch_tokens: expected >= 1")
        if self.batching not in BATCHING:
            raise ValueError(
                f"batching: expected one of {', '.join(BATCHING)}, got {self.batching!r}"
            )
        if not (is_number(self.batch_delay) and 0 <= self.batch_delay <= 1):
            raise ValueError(f"batch_delay: expected 0 to 1 second, got {self.batch_delay!r}")
        for name in ("request_timeout", "body_timeout", "header_timeout", "keep_alive"):
            value = getattr(self, name)
            if not (is_number(value) and value > 0):
                raise ValueError(f"{name}: expected a positive number of seconds, got {value!r}")


# -- the model's queue -------------------------------------------------------------------------


class Busy(Exception):
    """The model cannot take the request now: a 503 with ``Retry-After: retry_after``."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ClientGone(Exception):
    """The client closed its connection while its request waited: nobody to answer."""


class _Dropped(Exception):
    """Raised in the worker for a job whose request was given up before its turn."""


class ModelQueue:
    """Runs model work one job at a time in one worker thread, first come first served, with
    at most ``waiting`` jobs waiting behind the one that runs (docs/serve.md, "Limits").

    :meth:`run` is called from the event loop; it never holds a thread while it waits, so
    requests that do not need the model are not delayed by those that do.
    ``counts`` says what happened to the jobs: admitted, refused (queue full), dropped (given
    up before they started: the client left or the deadline passed), expired (a 503 at the
    deadline), done (finished in the worker).
    """

    def __init__(self, *, waiting: int = Limits.queue, timeout: float = Limits.request_timeout):
        self.capacity = waiting + 1
        self.timeout = timeout
        self.counts: collections.Counter[str] = collections.Counter()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnlab-model")
        self._mutex = threading.Lock()
        self._pending = 0  # admitted and not finished: waiting or running
        self._seconds_per_job = 0.1  # a running mean, for Retry-After

    @property
    def pending(self) -> int:
        """Jobs admitted and not finished (the running one included)."""
        return self._pending

    def retry_after(self) -> int:
        """Seconds after which the queue is likely to have room: a whole number, at least 1."""
        return max(1, math.ceil(self._seconds_per_job * max(self._pending, 1)))

    async def run(self, work: Callable[[], T], receive: Receive | None = None) -> T:
        """``work()``'s result, computed in the model's worker thread in its turn.

        ``receive``: the request's ASGI receive, whose ``http.disconnect`` means the client
        left (only once the body has been read).

        Raises:
            Busy: the queue is full, or the request timeout passed (the job is dropped if it
                had not started; one already running finishes unseen).
            ClientGone: the client left before the answer (the job is dropped likewise).
            Exception: whatever ``work`` raises.
        """
        with self._mutex:
            if self._pending >= self.capacity:
                self.counts["refused"] += 1
                raise Busy(
                    f"the model is busy: {self._pending} requests are running or waiting, the "
                    f"most it takes; try again in {self.retry_after()} s",
                    self.retry_after(),
                )
            self._pending += 1
            self.counts["admitted"] += 1
        given_up = threading.Event()
        job = self._pool.submit(self._job, work, given_up)
        job.add_done_callback(self._finished)

        def give_up(reason: str) -> None:
            given_up.set()
            job.cancel()  # succeeds unless it has started
            if reason == "timeout":
                self.counts["expired"] += 1

        return await awaited(job, receive, self.timeout, give_up, "the model", self.retry_after)

    def _job(self, work: Callable[[], T], given_up: threading.Event) -> T:
        if given_up.is_set():  # its client left, or its deadline passed, while it waited
            raise _Dropped()
        start = time.monotonic()
        try:
            return work()
        finally:
            seconds = time.monotonic() - start
            self._seconds_per_job += 0.2 * (seconds - self._seconds_per_job)

    def _finished(self, job: Future) -> None:
        with self._mutex:
            self._pending -= 1
            if job.cancelled() or isinstance(job.exception(), _Dropped):
                self.counts["dropped"] += 1
            else:
                self.counts["done"] += 1

    def close(self) -> None:
        """Stop the worker thread once the jobs admitted so far have run."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def retrieve(future: asyncio.Future) -> None:
    """Mark a result nobody awaits any more as seen (no 'never retrieved' warning)."""
    if not future.cancelled():
        future.exception()


async def awaited(
    job: Future[T],
    receive: Receive | None,
    timeout: float,
    give_up: Callable[[str], object],
    what: str,
    retry_after: Callable[[], int],
) -> T:
    """``job``'s result, awaited until it comes, the client leaves (``receive`` says
    ``http.disconnect``; None: not watched) or ``timeout`` seconds pass. Otherwise
    ``give_up(reason)`` (``"client_gone"``, also when the caller is cancelled, or
    ``"timeout"``), then ClientGone, or Busy saying ``what`` is busy. An answer nobody awaits
    any more is marked seen (:func:`retrieve`)."""
    answer = asyncio.wrap_future(job)
    answer.add_done_callback(retrieve)
    left = None if receive is None else asyncio.ensure_future(client_left(receive))
    try:
        waits = {answer} if left is None else {answer, left}
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when="FIRST_COMPLETED")
    except asyncio.CancelledError:
        give_up("client_gone")
        raise
    finally:
        if left is not None:
            left.cancel()
    if answer in done:
        return answer.result()
    if left is not None and left in done:
        give_up("client_gone")
        raise ClientGone()
    give_up("timeout")
    wait = retry_after()
    raise Busy(f"no answer within {timeout:g} s: {what} is busy; try again in {wait} s", wait)


async def client_left(receive: Receive) -> None:
    """Return when ``receive`` says the client disconnected."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


# -- ASGI middleware ---------------------------------------------------------------------------


def error_response(status: int, message: str, headers: dict[str, str] | None = None):
    """The API's error answer: ``{"error": message, "status": status}``."""
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


def _host_name(value: str) -> str:
    """The name in a Host header, lower case, without port, brackets or a final dot."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8000
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:  # name:port (a bare IPv6 address has more colons)
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _normalize(name: str) -> str:
    name = _host_name(name)
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


class HostGuard:
    """A 400 for a request whose Host header names another server than this one: a page on
    another site that re-points its own name at 127.0.0.1 (DNS rebinding) reaches the port,
    but its requests carry its own name. ``allowed``: host names or addresses; ``"*"``
    allows any."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = {_normalize(name) for name in allowed}
        self.any = "*" in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any:
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        if host is None or _normalize(host) not in self.allowed:
            shown = "missing" if host is None else repr(host[:60])
            names = ", ".join(sorted(self.allowed))
            message = f"host: {shown} is not this server; expected one of {names}"
            await error_response(400, message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class HeadAsGet:
    """HEAD on every GET route: the GET's status and headers, no body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


class InternalErrors:
    """A bug's answer: a generic 500 body; what went wrong goes to one log line (the route and
    the exception's class and message), never to the client and never as a traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as error:
            detail = " ".join(str(error).split())[:300]
            path = scope.get("path", "")[:200]
            log.error("500 %s %s: %s: %s", scope.get("method"), path, type(error).__name__, detail)
            if not started:
                message = "internal error: the server could not answer this request (logged)"
                await error_response(500, message)(scope, receive, send)


class Draining:
    """Once ``draining()`` is true (Ctrl-C or SIGTERM: the server is shutting down), every new
    request but those to ``exempt`` paths gets a 503 and its connection is closed; requests
    already in the app are answered as usual."""

    def __init__(
        self, app: ASGIApp, draining: Callable[[], bool], exempt: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.draining = draining
        self.exempt = frozenset(exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.draining() or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        message = "the server is shutting down: it answers the requests it has, and no more"
        headers = {"Connection": "close", "Retry-After": "1"}
        await error_response(503, message, headers)(scope, receive, send)


# -- uvicorn -----------------------------------------------------------------------------------


def protocol_class(limits: Limits) -> type:
    """uvicorn's h11 protocol, closing a connection whose request head has not arrived
    ``limits.header_timeout`` seconds after the connection opened or the previous answer
    went out (partial headers, or a client that connects and says nothing), and any connection
    beyond ``limits.max_connections`` open ones."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self.transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a whole head has arrived
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(limits.header_timeout, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def server_config(app: ASGIApp, limits: Limits, log_level: str = "warning") -> Any:
    """A ``uvicorn.Config`` for ``app`` with ``limits``: the guarded h11 protocol, the
    keep-alive timeout, ``limit_concurrency``, the largest request head; no Server header, no
    proxy headers (nothing sits in front of this server). On shutdown it waits for the
    requests in flight as long as the longest of them may take (the request and body
    deadlines, then 5 s), so that each is answered."""
    import uvicorn

    drain = math.ceil(max(limits.request_timeout, limits.body_timeout)) + 5
    return uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="off",
        http=protocol_class(limits),
        timeout_keep_alive=limits.keep_alive,
        limit_concurrency=limits.concurrency,
        h11_max_incomplete_event_size=limits.max_head_bytes,
        timeout_graceful_shutdown=drain,
        server_header=False,
        proxy_headers=False,
    )

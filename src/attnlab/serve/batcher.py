"""The translation service's batcher: requests that arrive while the model is busy are decoded
together (docs/serve.md, "Batching").

Requests wait in one first-come-first-served line. One worker thread takes the oldest request
and, behind it, the later ones with the same decoding options (one
:class:`~attnlab.decode.options.DecodingOptions`), up to a budget of source tokens, and hands
their sentences to one ``decode`` call (the app's: one call to the Translator, which sorts
them by length into its own batches); each request then gets its own sentences' results.
Requests with other options wait for a batch of their own.

* **No wait when idle**: a request that finds the model idle starts at once. Only right after a
  batch (within ``max_delay`` seconds of its end) does the worker wait, at most until then, for
  as many requests as that batch answered: the clients it answered are likely sending their
  next ones, and one batch of them costs less than many small ones.
* **Fairness**: a request is never overtaken by more than ``max_tokens`` source tokens of
  later requests (of other options that a batch took past it): the oldest request leads every
  batch, so each waits at most for the batches ahead of it.
* **Bounds**: at most ``waiting`` sentences wait (more: :class:`~attnlab.serve.limits.Busy`,
  a 503); a request that gets no answer within ``timeout`` seconds is a 503 too, and one
  whose client has gone, or whose deadline passed, before its batch started is dropped.
* **Draining**: :meth:`Batcher.close` lets every admitted request be decoded, then stops the
  worker; requests after it are refused.
* **Streams** (iteration-level batching): where ``stream(options)`` gives a :class:`Stream`
  (the app's: greedy search on the torch engine, :class:`~attnlab.inference.translator.
  TranslationStream`), a batch is not decoded whole: its sentences decode one token a step,
  each request is answered as its last sentence ends, and between steps the requests at the
  head of the line with the same options join, while their source tokens and those still
  decoding fit the budget. A request of other options at the head stops the joining: the
  stream ends with its last sentence and that request's batch comes next. One sentence that
  runs long holds back the requests that came meanwhile only until ``JOIN_RATIO`` times its
  sentences wait; then they join it.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.types import Receive

from ..decode.options import DecodingOptions
from ..inference.bounds import MAX_TOKENS
from .limits import Busy, awaited

__all__ = ["Batcher", "Stream"]

log = logging.getLogger("attnlab.serve")

#: Requests waiting join a stream when their sentences are at least this many times those
#: decoding: joining costs an encoder call and a copy of the cache, so sentences join in
#: groups, mostly when the stream runs low, and one that runs on alone to its length limit is
#: joined as soon as enough wait (docs/serve.md, "Batching"). Chosen by
#: benchmarks/serve_join.py (benchmarks/results/serve_join.json): of 0, 1, 2, 4, 8 and 16, at
#: 8 and 32 clients and 1 and 2 threads, 16 answered the most sentences/s in all four, and 0,
#: joining at every step, the fewest (the table in docs/serve.md).
JOIN_RATIO = 16


@dataclass(eq=False)
class _Request:
    texts: list[str]
    options: DecodingOptions  # what a batch's requests share
    tokens: int  # source tokens, the budget's unit
    future: Future = field(default_factory=Future)
    overtaken: int = 0  # source tokens of later requests decoded before it
    started: bool = False
    results: list[Any] = field(default_factory=list)  # a stream's answers so far, in order
    left: int = 0  # a stream's sentences of it not yet answered


#: ``decode(options, texts)``: one result per text, in order.
Decode = Callable[[DecodingOptions, list[str]], Sequence[Any]]


class Stream(Protocol):
    """Sentences decoded a step at a time, joining between steps (see the module docstring)."""

    @property
    def rows(self) -> int: ...  # sentences decoding

    def add(self, texts: list[str], keys: list[Hashable]) -> list[tuple[Hashable, Any]]: ...

    def step(self) -> list[tuple[Hashable, Any]]: ...


class Batcher:
    """Decodes concurrent translation requests together, in one worker thread (see the module
    docstring).

    Args:
        decode: ``decode(options, texts)`` -> one result per text, in order; it runs in the
            worker thread, one call at a time.
        max_tokens: source tokens in one batch (a request over it goes alone).
        max_delay: seconds the worker may wait after a batch for its clients' next requests.
        waiting: sentences that may wait (not counting the batch being decoded); a request
            that finds none waiting is admitted whatever its size (the caller caps that).
        timeout: seconds a request may wait and be decoded before its 503.
        on_batch: called after each batch with ``(requests, sentences, seconds)``.
        on_drop: called with a reason (``"client_gone"``, ``"timeout"``) for each request
            given up before its batch.
        stream: ``stream(options)`` -> a :class:`Stream` for requests of these options, or
            None where they decode as whole batches (None: always whole batches). Its calls
            run in the worker thread, one at a time; ``add`` returns the answers it knows at
            once, ``step`` those that ended, each with its key.
    """

    def __init__(
        self,
        decode: Decode,
        *,
        max_tokens: int = MAX_TOKENS,
        max_delay: float = 0.005,
        waiting: int = 256,
        timeout: float = 30.0,
        on_batch: Callable[[int, int, float], object] | None = None,
        on_drop: Callable[[str], object] | None = None,
        stream: Callable[[DecodingOptions], Stream | None] | None = None,
    ) -> None:
        if max_tokens < 1 or waiting < 1 or max_delay < 0 or timeout <= 0:
            raise ValueError(
                "max_tokens, waiting: expected >= 1; max_delay: >= 0; timeout: > 0 seconds"
            )
        self.decode = decode
        self.max_tokens, self.max_delay = max_tokens, max_delay
        self.waiting, self.timeout = waiting, timeout
        self.on_batch, self.on_drop = on_batch, on_drop
        self.stream = stream
        #: What happened to the requests: admitted, refused, dropped, expired, done; batches.
        self.counts: collections.Counter[str] = collections.Counter()
        self._line: collections.deque[_Request] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._last_end = -math.inf  # when the last batch ended (time.monotonic())
        self._last_size = 0  # requests it answered
        self._seconds_per_batch = 0.1  # a running mean, for Retry-After
        self._worker = threading.Thread(target=self._loop, name="attnlab-batcher", daemon=True)
        self._worker.start()

    # -- the event loop's side -----------------------------------------------------------------

    @property
    def sentences_waiting(self) -> int:
        """Sentences admitted and not yet in a batch."""
        with self._cond:
            return sum(len(r.texts) for r in self._line)

    def retry_after(self) -> int:
        """Seconds after which the line is likely to have room: a whole number, at least 1."""
        with self._cond:  # the worker changes the line
            batches = 1 + sum(r.tokens for r in self._line) / self.max_tokens
        return max(1, math.ceil(self._seconds_per_batch * batches))

    async def run(
        self,
        texts: list[str],
        options: DecodingOptions,
        tokens: int,
        receive: Receive | None = None,
    ) -> list[Any]:
        """The results of ``texts`` (one per text, in order), decoded in their turn with
        ``options``. ``tokens``: their source tokens; ``receive``: the request's ASGI receive,
        whose ``http.disconnect`` means the client left (the body already read).

        Raises:
            Busy: the line is full or closed, or no answer came within ``timeout``.
            ClientGone: the client left before the answer.
            Exception: whatever ``decode`` raised for the batch.
        """
        request = _Request(list(texts), options, max(1, tokens))
        with self._cond:
            if self._closed:
                self.counts["refused"] += 1
                raise Busy("the server is shutting down; try another", 1)
            waiting = sum(len(r.texts) for r in self._line)
            if waiting and waiting + len(request.texts) > self.waiting:
                self.counts["refused"] += 1
                raise Busy(
                    f"the translation service is busy: {waiting} sentences are waiting, the "
                    f"most it takes is {self.waiting}; try again in {self.retry_after()} s",
                    self.retry_after(),
                )
            self._line.append(request)
            self.counts["admitted"] += 1
            self._cond.notify_all()

        def give_up(reason: str) -> None:
            self._give_up(request, reason)
            if reason == "timeout":
                self.counts["expired"] += 1

        what = "the translation service"
        return await awaited(request.future, receive, self.timeout, give_up, what, self.retry_after)

    def _give_up(self, request: _Request, reason: str) -> None:
        """Drop ``request`` from the line unless its batch has started."""
        with self._cond:
            if request.started or request not in self._line:
                return
            self._line.remove(request)
            self.counts["dropped"] += 1
        self._tell(self.on_drop, reason)

    def close(self, wait: float | None = None) -> None:
        """Refuse new requests; the worker decodes those admitted, then stops. ``wait``:
        seconds to wait for it (None: do not wait)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait is not None:
            self._worker.join(wait)

    # -- the worker's side ---------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = self._gather()
                if batch is None:
                    return
                self._start(batch)
            stream = None if self.stream is None else self.stream(batch[0].options)
            if stream is None:
                self._decode(batch)
            else:
                self._stream(stream, batch)

    def _start(self, batch: list[_Request]) -> None:
        """Take ``batch`` out of the line (holding the lock): it can no longer be given up."""
        for request in batch:
            request.started = True
            self._line.remove(request)

    def _decode(self, batch: list[_Request]) -> None:
        """One batch decoded whole: one ``decode`` call."""
        start = time.monotonic()
        texts = [text for request in batch for text in request.texts]
        failure = None
        try:
            results = list(self.decode(batch[0].options, texts))
            if len(results) != len(texts):
                raise RuntimeError(f"decode returned {len(results)} results for {len(texts)} texts")
        except Exception as error:  # every request of the batch gets the error
            failure = error
        self._batch_done(batch, time.monotonic() - start, wait=True)  # counted, then answered
        at = 0
        for request in batch:
            if failure is not None:
                request.future.set_exception(failure)
            else:
                request.future.set_result(results[at : at + len(request.texts)])
                at += len(request.texts)

    def _batch_done(self, batch: list[_Request], seconds: float, *, wait: bool) -> None:
        """Count ``batch``, answered in ``seconds``; ``wait``: the next batch may wait for as
        many requests (whole batches; a stream takes requests as they come)."""
        with self._cond:
            self._last_end, self._last_size = time.monotonic(), len(batch) if wait else 0
            self._seconds_per_batch += 0.2 * (seconds - self._seconds_per_batch)
            self.counts["batches"] += 1
            self.counts["done"] += len(batch)
        sentences = sum(len(request.texts) for request in batch)
        self._tell(self.on_batch, len(batch), sentences, seconds)

    def _stream(self, stream: Stream, first: list[_Request]) -> None:
        """Decode ``first`` through ``stream``, and the requests that join it between steps,
        until its last sentence ends (see the module docstring). Each group of requests that
        joined together counts as a batch, answered when its last request is."""
        options = first[0].options
        live: dict[int, tuple[_Request, int]] = {}  # id(request) -> (request, its group)
        groups: dict[int, tuple[list[_Request], float, list[int]]] = {}  # id -> (, start, left)

        def answered(key: Hashable, result: Any) -> None:
            request_id, index = key  # type: ignore[misc]
            request = live[request_id][0]
            request.results[index] = result
            request.left -= 1
            if not request.left:
                finish(request_id, None)

        def finish(request_id: int, error: Exception | None) -> None:
            request, group = live.pop(request_id)
            requests, start, waiting = groups[group]
            waiting[0] -= 1
            if not waiting[0]:  # its group is counted before its last request is answered
                del groups[group]
                self._batch_done(requests, time.monotonic() - start, wait=False)
            if error is None:
                request.future.set_result(request.results)
            else:
                request.future.set_exception(error)

        def join(requests: list[_Request]) -> None:
            group = id(requests)
            groups[group] = (requests, time.monotonic(), [len(requests)])
            texts: list[str] = []
            keys: list[Hashable] = []
            for request in requests:
                request_id = id(request)
                live[request_id] = (request, group)
                request.results, request.left = [None] * len(request.texts), len(request.texts)
                texts += request.texts
                keys += [(request_id, i) for i in range(len(request.texts))]
            try:  # one call: the sources are encoded together
                ready = stream.add(texts, keys)
            except Exception as error:  # these requests get the error; the stream goes on
                for request in requests:
                    finish(id(request), error)
                return
            for key, result in ready:
                answered(key, result)

        join(first)
        while live:
            try:
                if not stream.rows:
                    raise RuntimeError("the stream ended with requests unanswered")
                ended = stream.step()
            except Exception as error:  # every request in the stream gets the error
                for request_id in list(live):
                    finish(request_id, error)
                return
            for key, result in ended:
                answered(key, result)
            with self._cond:
                tokens = sum(request.tokens for request, _ in live.values())
                joining = []
                for request in self._line:
                    if request.options != options or (
                        (tokens or joining) and tokens + request.tokens > self.max_tokens
                    ):
                        break
                    joining.append(request)
                    tokens += request.tokens
                if sum(len(r.texts) for r in joining) < JOIN_RATIO * stream.rows:
                    joining = []
                self._start(joining)
            if joining:
                join(joining)

    @staticmethod
    def _tell(callback: Callable[..., object] | None, *args: object) -> None:
        """Call a metrics callback; its failure is logged, not the request's or the worker's."""
        try:
            if callback is not None:
                callback(*args)
        except Exception:
            log.exception("the batcher's metrics callback failed; serving goes on")

    def _gather(self) -> list[_Request] | None:
        """The next batch (called holding the lock), or None once closed and empty."""
        while not self._line:
            if self._closed:
                return None
            self._cond.wait()
        # Right after a batch, wait (a little) for as many requests as it answered.
        deadline = self._last_end + self.max_delay
        while (
            not self._closed
            and len(self._line) < self._last_size
            and sum(r.tokens for r in self._line) < self.max_tokens
        ):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        if not self._line:  # every waiting request was given up meanwhile
            return self._gather()
        return self._select()

    def _select(self) -> list[_Request]:
        """The oldest request and the later ones of its options that fit the budget, none of
        them taken past an older request whose overtaken tokens would then exceed it."""
        head = self._line[0]
        batch, tokens = [head], head.tokens
        passed: list[_Request] = []  # older requests of other options, left waiting
        for request in list(self._line)[1:]:
            if request.options != head.options:
                passed.append(request)
                continue
            if tokens + request.tokens > self.max_tokens:
                break
            if any(p.overtaken + request.tokens > self.max_tokens for p in passed):
                break
            batch.append(request)
            tokens += request.tokens
            for p in passed:
                p.overtaken += request.tokens
        return batch

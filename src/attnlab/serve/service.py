"""The server's model host, apart from HTTP (docs/serve.md, "The translation service"): the
one loaded :class:`~attnlab.inference.translator.Translator` (either engine, one model or an
ensemble) behind the one :class:`~attnlab.serve.batcher.Batcher`, the warm-up that makes the
server ready, and the model's language pair. The translation routes stand on it; the explorer
page, when it is on, shares its Translator and its lock.

Every whole batch is one call of :meth:`Translator.hypotheses
<attnlab.inference.translator.Translator.hypotheses>` over the sentences of its requests (it
sorts them by length into batches of its ``max_tokens``), under the model lock, so that the
explorer's routes and the batcher never run the model at once; greedy requests on the torch
engine decode instead through a :meth:`Translator.stream
<attnlab.inference.translator.Translator.stream>`, each of its steps under the lock. A
request's decoding is one :class:`~attnlab.decode.options.DecodingOptions` (the server's, with
what the request asks), handed to the Translator per call; the batcher groups requests by it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import torch
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive

from .._rundir import read_job_file
from ..decode.options import DecodingOptions
from ..inference.bounds import MAX_TOKENS
from ..inference.translator import TranslationStream, Translator
from .batcher import Batcher
from .libre import TranslateCall, translate_answer
from .metrics import ServeMetrics

__all__ = ["TranslationService", "model_languages"]

log = logging.getLogger("attnlab.serve")

#: Sentences the warm-up translates (any text: unknown words are <unk>).
WARM_UP = ["one", "two hundred", "three thousand four hundred and fifty six"]
#: A request of at most this many characters is tokenized (for the batch budget) on the event
#: loop; a longer one in a worker thread.
INLINE_CHARACTERS = 1000
#: The language codes of a model whose directory does not say them (no job.json).
UNKNOWN_PAIR = ("src", "tgt")


def model_languages(model_dir: str | Path) -> tuple[str, str]:
    """The ``(source, target)`` language codes of the task the model was trained on (its
    ``job.json``: ``task.src_lang``, ``task.tgt_lang``), else :data:`UNKNOWN_PAIR`."""
    try:
        task = read_job_file(model_dir).get("task")
    except (OSError, ValueError):
        return UNKNOWN_PAIR
    if isinstance(task, dict):
        pair = task.get("src_lang"), task.get("tgt_lang")
        if all(isinstance(code, str) and code for code in pair):
            return pair  # type: ignore[return-value]
    return UNKNOWN_PAIR


class TranslationService:
    """The model host: ``/translate``'s work for ``translator``: check, batch, decode, answer.

    Args:
        translator: the loaded model.
        languages: the model's ``(source, target)`` codes.
        metrics: where batches and dropped requests are counted.
        max_tokens, max_delay, waiting, timeout: the :class:`Batcher`'s.
        streams: greedy requests on the torch engine decode as a stream, joining between
            steps (:meth:`Translator.stream <attnlab.inference.translator.Translator.stream>`);
            False: every request in whole batches.

    :attr:`lock` is held while the model runs (the explorer's routes take it too).
    """

    def __init__(
        self,
        translator: Translator,
        languages: tuple[str, str],
        metrics: ServeMetrics,
        *,
        max_tokens: int = MAX_TOKENS,
        max_delay: float = 0.005,
        waiting: int = 256,
        timeout: float = 30.0,
        streams: bool = True,
    ) -> None:
        self.translator = translator
        self.lock = threading.Lock()
        self.languages = languages
        self.metrics = metrics
        self.ready = threading.Event()
        #: The warm-up's thread while it runs (:meth:`start_warm_up`).
        self.warming: threading.Thread | None = None
        #: Model calls the batcher made (one per whole batch or stream), for tests.
        self.calls = 0

        def on_batch(requests: int, sentences: int, seconds: float) -> None:
            metrics.batch_requests.observe(requests)
            metrics.batch_sentences.observe(sentences)
            metrics.batch_seconds.observe(seconds)

        self.batcher = Batcher(
            self._decode,
            max_tokens=max_tokens,
            max_delay=max_delay,
            waiting=waiting,
            timeout=timeout,
            on_batch=on_batch,
            on_drop=lambda reason: metrics.dropped.inc(reason=reason),
            stream=self._stream if streams else None,
        )

    # -- requests ------------------------------------------------------------------------------

    def source_tokens(self, texts: Sequence[str]) -> int:
        """The source tokens of ``texts``, each counted up to the model's ``max_len`` (the
        batcher's budget unit); no model work."""
        most = self.translator.max_len
        encoded = self.translator.src_tokenizer.encode_batch(list(texts))
        return sum(min(len(ids), most) for ids in encoded)

    async def translate(self, call: TranslateCall, receive: Receive | None = None) -> dict:
        """The LibreTranslate answer of ``call``, decoded in a batch in its turn."""
        if call.characters <= INLINE_CHARACTERS:  # microseconds: not worth a thread's hop
            tokens = self.source_tokens(call.texts)
        else:
            tokens = await run_in_threadpool(self.source_tokens, call.texts)
        results = await self.batcher.run(call.texts, call.decoding, tokens, receive)
        return translate_answer(call, results, self.languages[0])

    # -- the model -----------------------------------------------------------------------------

    def _decode(self, options: DecodingOptions, texts: list[str]) -> list[list[Any]]:
        """One batch: the ``options.n_best`` best hypotheses of each of ``texts``, one Translator
        call under the model lock (a source over ``max_len`` tokens is cut, as ``attnlab
        translate`` does)."""
        self.calls += 1  # the worker's alone: one thread
        return self._hypotheses(options, texts)

    def _stream(self, options: DecodingOptions) -> _LockedStream | None:
        """The stream the batcher decodes requests of ``options`` with, or None where the
        Translator has none for them (they decode in whole batches)."""
        stream = self.translator.stream(options)
        if stream is None:
            return None
        self.calls += 1  # one model call: a stream
        return _LockedStream(stream, self.lock)

    def _hypotheses(self, options: DecodingOptions, texts: list[str]) -> list[list[Any]]:
        with self.lock, torch.no_grad():
            return self.translator.hypotheses(
                texts, decoding=options, on_too_long=_cut_silently, scored=False
            )

    def warm_up(self) -> None:
        """Translate a few sentences greedily and with the server's beam (the first calls of
        a model are slow: allocations, kernels chosen), then mark the service ready. A model
        that fails here raises, and the service stays not ready."""
        start = time.monotonic()
        for beam in sorted({1, self.translator.decoding.beam_size}):
            options = self.translator.decoding.updated(beam_size=beam)
            self._hypotheses(options, WARM_UP)
            self._hypotheses(options, WARM_UP[:1])
        self.ready.set()
        log.info("warm-up done in %.2f s", time.monotonic() - start)

    def start_warm_up(self) -> threading.Thread:
        """:meth:`warm_up` in a thread of its own (the server answers meanwhile, not ready)."""

        def run() -> None:
            try:
                self.warm_up()
            except Exception as error:  # logged; /health stays 503, the routes say their own
                log.error("warm-up failed: %s: %s", type(error).__name__, error)

        thread = threading.Thread(target=run, name="attnlab-warm-up", daemon=True)
        thread.start()
        self.warming = thread
        return thread

    def close(self, wait: float | None = None) -> None:
        """Stop the batcher once the admitted requests are answered, and let a warm-up still
        running end (``wait``: seconds for each; None: do not wait): a process that exits
        while a thread is inside torch can abort ("terminate called without an active
        exception") instead of exiting 0."""
        self.batcher.close(wait)
        if self.warming is not None and wait is not None:
            self.warming.join(wait)


class _LockedStream:
    """A :class:`~attnlab.inference.translator.TranslationStream` whose calls hold the model
    lock (one step at a time: the explorer's routes may run between steps)."""

    def __init__(self, stream: TranslationStream, lock: threading.Lock) -> None:
        self.stream, self.lock = stream, lock

    @property
    def rows(self) -> int:
        return self.stream.rows

    def add(self, texts: list[str], keys: list[Hashable]) -> list[tuple[Hashable, Any]]:
        with self.lock, torch.no_grad():
            return self.stream.add(texts, keys, on_too_long=_cut_silently)

    def step(self) -> list[tuple[Hashable, Any]]:
        with self.lock, torch.no_grad():
            return self.stream.step()


def _cut_silently(report: object) -> None:
    """A source over ``max_len`` tokens is cut to them (the docs say so); nothing to report."""

"""The translation service (docs/serve.md, "The translation service"): the batcher alone with a
fake model (batching, options apart, fairness, departed clients, bounds, draining), then
LibreTranslate's ``/translate`` and ``/languages`` on the numbers model through a real server
(answers equal to the Translator's on each sentence alone, the request and answer shapes, every
error and cap), ``/health``, ``/metrics`` (parsed), ``--api-only``, and SIGTERM's drain.

Nothing here asserts a duration: the model is held busy by a lock or an event the test
controls, and every wait ends on an outcome under a generous deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from _helpers import start_serve
from attnlab.decode.options import DecodingOptions as Options
from attnlab.serve import batcher as batcher_module
from attnlab.serve import create_app
from attnlab.serve.batcher import Batcher
from attnlab.serve.libre import MAX_ALTERNATIVES, MAX_CHARACTERS, MAX_SENTENCES
from attnlab.serve.limits import MAX_BEAM, Busy, ClientGone
from attnlab.serve.process import make_server, url_of

WAIT = 120.0  # seconds: the most any wait below may take before the test fails
SENTENCES = [
    "three hundred and twelve",
    "forty-two",
    "seven",
    "nine hundred and ninety-nine",
    "sixty-one",
    "one hundred and twenty-eight",
    "eighteen",
    "five hundred and five",
]


def wait_until(condition: Callable[[], bool], what: str, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(0.01)


# -- the batcher alone, with a fake model ------------------------------------------------------


class FakeModel:
    """``decode(options, texts)``: each text upper-cased with its beam, one call per batch,
    recorded; the first call waits for ``gate`` (so that requests pile up behind it)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls: list[tuple[Options, list[str]]] = []

    def __call__(self, options: Options, texts: list[str]) -> list[str]:
        if not self.calls:
            assert self.gate.wait(WAIT), "the test never opened the gate"
        self.calls.append((options, list(texts)))
        return [f"{t.upper()}/{options.beam_size}" for t in texts]


def run_requests(
    batcher: Batcher, model: FakeModel, requests: list[tuple[list[str], Options, int]]
) -> list:
    """Send ``requests`` (texts, options, tokens) in order: the first holds the model, the
    rest wait behind it; then open the gate. Their results (or exceptions), in order."""

    async def scenario() -> list:
        first = asyncio.ensure_future(batcher.run(*requests[0]))
        while not model.calls and not batcher.counts["admitted"]:
            await asyncio.sleep(0.01)
        while batcher.sentences_waiting:  # the first request is in the model, at the gate
            await asyncio.sleep(0.01)
        rest = []
        for request in requests[1:]:
            rest.append(asyncio.ensure_future(batcher.run(*request)))
            await asyncio.sleep(0)  # admitted in this order
        while batcher.counts["admitted"] < len(requests):
            await asyncio.sleep(0.01)
        model.gate.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    return asyncio.run(scenario())


def test_requests_that_wait_are_decoded_together_and_each_gets_its_own_answer():
    model = FakeModel()
    batcher = Batcher(model, max_tokens=1000, timeout=WAIT)
    greedy = Options(1)
    requests = [([f"s{i}"], greedy, 3) for i in range(9)]
    requests.append((["a", "b", "c"], greedy, 3))  # a request may carry several sentences
    results = run_requests(batcher, model, requests)
    assert results == [[f"S{i}/1"] for i in range(9)] + [["A/1", "B/1", "C/1"]]
    assert len(model.calls) == 2 < len(requests)  # the first alone, the other nine together
    assert model.calls[1][1] == [f"s{i}" for i in range(1, 9)] + ["a", "b", "c"]
    assert batcher.counts["batches"] == 2 and batcher.counts["done"] == 10
    batcher.close(wait=WAIT)


def test_requests_with_other_options_are_batched_apart():
    model = FakeModel()
    batcher = Batcher(model, max_tokens=1000, timeout=WAIT)
    greedy, beam, two_best = Options(1), Options(4), Options(4, n_best=2)
    kinds = [greedy, beam, greedy, two_best, beam, greedy, two_best]
    requests = [([f"t{i}"], kind, 2) for i, kind in enumerate(kinds)]
    results = run_requests(batcher, model, requests)
    assert results == [[f"T{i}/{kind.beam_size}"] for i, kind in enumerate(kinds)]
    batches = model.calls[1:]
    assert [options for options, _ in batches] == [beam, greedy, two_best]  # oldest first
    assert dict((o, t) for o, t in batches)[greedy] == ["t2", "t5"]
    assert dict((o, t) for o, t in batches)[beam] == ["t1", "t4"]
    batcher.close(wait=WAIT)


def test_no_request_is_overtaken_by_more_than_the_token_budget():
    """The fairness the issue asks for: a greedy request that waits behind a beam request is
    passed by at most ``max_tokens`` source tokens of later beam requests."""
    model = FakeModel()
    budget = 10
    batcher = Batcher(model, max_tokens=budget, timeout=WAIT)
    beam, greedy = Options(4), Options(1)
    requests = [(["hold"], beam, 1), (["b0"], beam, 1), (["g"], greedy, 1)]
    requests += [([f"b{i}"], beam, 3) for i in range(1, 12)]  # later, and 33 tokens in all
    results = run_requests(batcher, model, requests)
    assert not [r for r in results if isinstance(r, BaseException)]
    order = [text for _, texts in model.calls for text in texts]
    later = [f"b{i}" for i in range(1, 12)]
    passed = [t for t in order[: order.index("g")] if t in later]
    assert 3 * len(passed) <= budget  # 3 tokens each
    assert passed  # the budget let some pass: the bound, not a refusal to batch, holds
    batcher.close(wait=WAIT)


def test_a_request_whose_client_left_is_dropped_before_its_turn():
    model = FakeModel()
    dropped: list[str] = []
    batcher = Batcher(model, timeout=WAIT, on_drop=dropped.append)

    async def scenario():
        left = asyncio.Event()

        async def receive() -> dict:
            await left.wait()
            return {"type": "http.disconnect"}

        first = asyncio.ensure_future(batcher.run(["first"], Options(1), 1))
        while batcher.sentences_waiting or not batcher.counts["admitted"]:
            await asyncio.sleep(0.01)
        gone = asyncio.ensure_future(batcher.run(["gone"], Options(1), 1, receive))
        stays = asyncio.ensure_future(batcher.run(["stays"], Options(1), 1))
        while batcher.sentences_waiting < 2:
            await asyncio.sleep(0.01)
        left.set()
        with pytest.raises(ClientGone):
            await gone
        model.gate.set()
        return await first, await stays

    assert asyncio.run(scenario()) == (["FIRST/1"], ["STAYS/1"])
    assert [texts for _, texts in model.calls] == [["first"], ["stays"]]  # "gone" never ran
    assert dropped == ["client_gone"] and batcher.counts["dropped"] == 1
    batcher.close(wait=WAIT)


def test_a_request_past_its_deadline_is_a_503_and_never_reaches_the_model():
    """The deadline is short here, but the outcome does not depend on time: the model is held
    until both requests have had their 503."""
    model = FakeModel()
    dropped: list[str] = []
    batcher = Batcher(model, timeout=0.2, on_drop=dropped.append)

    async def scenario():
        first = asyncio.ensure_future(batcher.run(["running"], Options(1), 1))
        while batcher.sentences_waiting or not batcher.counts["admitted"]:
            await asyncio.sleep(0.01)
        with pytest.raises(Busy, match="no answer within"):
            await batcher.run(["waiting"], Options(1), 1)
        with pytest.raises(Busy, match="no answer within"):
            await first  # it started: it runs to its end, unseen
        model.gate.set()

    asyncio.run(scenario())
    batcher.close(wait=WAIT)
    assert [texts for _, texts in model.calls] == [["running"]]
    assert dropped == ["timeout"] and batcher.counts["expired"] == 2


def test_a_full_line_refuses_and_a_closed_batcher_drains_then_refuses():
    model = FakeModel()
    batcher = Batcher(model, waiting=3, timeout=WAIT)

    async def scenario():
        first = asyncio.ensure_future(batcher.run(["hold"], Options(1), 1))
        while batcher.sentences_waiting or not batcher.counts["admitted"]:
            await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(batcher.run(["a", "b"], Options(1), 2))
        while batcher.sentences_waiting < 2:
            await asyncio.sleep(0.01)
        with pytest.raises(Busy) as full:
            await batcher.run(["c", "d"], Options(1), 2)  # 2 + 2 > 3
        batcher.close()  # draining: what was admitted is still decoded
        with pytest.raises(Busy) as closed:
            await batcher.run(["late"], Options(1), 1)
        model.gate.set()
        return full.value, closed.value, await first, await waiting

    full, closed, first, waiting = asyncio.run(scenario())
    assert "busy" in str(full) and full.retry_after >= 1
    assert "shutting down" in str(closed)
    assert (first, waiting) == (["HOLD/1"], ["A/1", "B/1"])
    assert batcher.counts["refused"] == 2


def test_decode_errors_reach_every_request_of_the_batch_and_the_batcher_goes_on():
    calls = []

    def decode(options: Options, texts: list[str]) -> list[str]:
        calls.append(texts)
        if "bad" in texts:
            raise RuntimeError("boom")
        return texts

    batcher = Batcher(decode, timeout=WAIT)

    async def scenario():
        with pytest.raises(RuntimeError, match="boom"):
            await batcher.run(["bad"], Options(1), 1)
        return await batcher.run(["good"], Options(1), 1)

    assert asyncio.run(scenario()) == ["good"]
    batcher.close(wait=WAIT)


def test_failing_metrics_callbacks_are_logged_and_the_batcher_goes_on(caplog):
    """Issue 59: an on_batch that raised ended the worker (every later request waited to its
    503), and an on_drop that raised replaced the request's own answer."""
    release = threading.Event()

    def decode(options: Options, texts: list[str]) -> list[str]:
        assert "hold" not in texts or release.wait(WAIT), "the test never released the model"
        return [text.upper() for text in texts]

    def boom(*args) -> None:
        raise RuntimeError("the metrics are broken")

    batcher = Batcher(decode, timeout=10.0, on_batch=boom, on_drop=boom)

    async def gone() -> dict:
        return {"type": "http.disconnect"}

    async def scenario():
        answers = [await batcher.run([f"s{i}"], Options(1), 1) for i in range(3)]
        held = asyncio.ensure_future(batcher.run(["hold"], Options(1), 1))
        while batcher.sentences_waiting or batcher.counts["admitted"] < 4:
            await asyncio.sleep(0.01)
        with pytest.raises(ClientGone):  # dropped before its batch: on_drop is told
            await batcher.run(["gone"], Options(1), 1, gone)
        release.set()
        return [*answers, await held]

    assert asyncio.run(scenario()) == [["S0"], ["S1"], ["S2"], ["HOLD"]]
    batcher.close(wait=WAIT)
    failed = [r for r in caplog.records if r.name == "attnlab.serve" and r.exc_info]
    assert len(failed) == 5, caplog.text  # four batches, one drop


def test_retry_after_reads_the_line_under_the_lock():
    """Issue 59: retry_after walked the line while the worker could change it (a 500 where the
    503 belonged); it now waits for the lock the line's changes hold."""
    batcher = Batcher(FakeModel(), timeout=WAIT)
    with ThreadPoolExecutor(1) as pool:
        with batcher._cond:  # as the worker holds it while it takes a batch off the line
            asked = pool.submit(batcher.retry_after)
            with pytest.raises(TimeoutError):
                asked.result(timeout=0.2)
        assert asked.result(timeout=WAIT) >= 1
    batcher.close(wait=WAIT)


# -- streams: sentences that join between steps -------------------------------------------------


class FakeStream:
    """A stream whose text ``"name:N"`` decodes in N steps to ``"NAME"``, recording what it was
    given (``adds``: the step count and the texts of each call); ``"bad"`` in an add raises,
    and so does a step once ``fail_at`` steps were taken. The first step waits for ``gate``."""

    def __init__(self, log: list, gate: threading.Event, fail_at: int | None = None) -> None:
        self.log, self.gate, self.fail_at = log, gate, fail_at
        self.left: dict = {}  # key -> (steps left, answer)
        self.steps = 0

    @property
    def rows(self) -> int:
        return len(self.left)

    def add(self, texts: list[str], keys: list) -> list:
        self.log.append(("add", self.steps, list(texts)))
        if "bad" in texts:
            raise ValueError("bad text")
        ready = []
        for key, text in zip(keys, texts, strict=True):
            name, _, steps = text.partition(":")
            if not steps:
                ready.append((key, ""))  # answered at once, as an empty text is
            else:
                self.left[key] = (int(steps), name.upper())
        return ready

    def step(self) -> list:
        assert self.gate.wait(WAIT), "the test never opened the gate"
        self.steps += 1
        if self.fail_at is not None and self.steps >= self.fail_at:
            raise RuntimeError("step failed")
        ended = []
        for key, (left, answer) in list(self.left.items()):
            if left == 1:
                del self.left[key]
                ended.append((key, answer))
                self.log.append(("end", self.steps, answer))
            else:
                self.left[key] = (left - 1, answer)
        return ended


@pytest.fixture
def join_ratio_4(monkeypatch):
    """The scenarios below are sized for requests joining at four times the sentences decoding:
    they test the rule; benchmarks/serve_join.py chooses the ratio the service runs with (held
    to its results by tests/serve/test_serve_load.py)."""
    monkeypatch.setattr(batcher_module, "JOIN_RATIO", 4)


def streamed(fail_at: int | None = None) -> tuple[Batcher, FakeModel, list]:
    """A batcher whose greedy requests stream (beam ones decode whole with a FakeModel)."""
    model, log = FakeModel(), []

    def stream(options: Options) -> FakeStream | None:
        return FakeStream(log, model.gate, fail_at) if options.beam_size == 1 else None

    return Batcher(model, max_tokens=1000, timeout=WAIT, stream=stream), model, log


def run_streamed(batcher: Batcher, log: list, gate: threading.Event, requests: list) -> list:
    """As :func:`run_requests`, the first request holding the stream's first step."""

    async def scenario() -> list:
        first = asyncio.ensure_future(batcher.run(*requests[0]))
        while not log:  # the first request is in the stream, at the gate
            await asyncio.sleep(0.01)
        rest = []
        for request in requests[1:]:
            rest.append(asyncio.ensure_future(batcher.run(*request)))
            await asyncio.sleep(0)
        while batcher.counts["admitted"] < len(requests):
            await asyncio.sleep(0.01)
        gate.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    return asyncio.run(scenario())


@pytest.mark.usefixtures("join_ratio_4")
def test_a_stream_answers_each_request_as_it_ends_and_takes_requests_in_groups():
    batcher, model, log = streamed()
    greedy = Options(1)
    requests = [(["long:30"], greedy, 1)]  # one sentence decoding: 4 waiting may join it
    requests += [([f"s{i}:2"], greedy, 1) for i in range(3)]
    requests += [(["a:5", "b:3", ":"], greedy, 1)]  # several sentences; an empty one
    results = run_streamed(batcher, log, model.gate, requests)
    assert results == [["LONG"], ["S0"], ["S1"], ["S2"], ["A", "B", ""]]
    adds = [entry for entry in log if entry[0] == "add"]
    assert adds == [
        ("add", 0, ["long:30"]),
        ("add", 1, ["s0:2", "s1:2", "s2:2", "a:5", "b:3", ":"]),
    ]
    ends = {answer: step for kind, step, answer in log if kind == "end"}
    assert ends == {"S0": 3, "S1": 3, "S2": 3, "B": 4, "A": 6, "LONG": 30}  # each as it ends
    assert not model.calls  # nothing decoded whole
    assert batcher.counts["batches"] == 2 and batcher.counts["done"] == 5
    batcher.close(wait=WAIT)


@pytest.mark.usefixtures("join_ratio_4")
def test_requests_join_a_stream_only_when_four_times_its_sentences_wait():
    batcher, model, log = streamed()
    greedy = Options(1)
    requests = [(["x:6", "y:8"], greedy, 1)]  # two decoding: 3 waiting (< 8) do not join
    requests += [([f"w{i}:1"], greedy, 1) for i in range(3)]
    results = run_streamed(batcher, log, model.gate, requests)
    assert results == [["X", "Y"], ["W0"], ["W1"], ["W2"]]
    adds = [entry for entry in log if entry[0] == "add"]
    # y alone after step 6: 3 < 4; after step 8 none decode, and the three start together
    assert [step for _, step, _ in adds] == [0, 8]
    batcher.close(wait=WAIT)


@pytest.mark.usefixtures("join_ratio_4")
def test_a_request_of_other_options_at_the_head_ends_the_joining():
    batcher, model, log = streamed()
    greedy, beam = Options(1), Options(4)
    requests = [(["first:3"], greedy, 1), (["beam"], beam, 1)]
    requests += [([f"g{i}:1"], greedy, 1) for i in range(5)]  # behind the beam request
    results = run_streamed(batcher, log, model.gate, requests)
    assert results == [["FIRST"], ["BEAM/4"]] + [[f"G{i}"] for i in range(5)]
    assert [texts for _, texts in model.calls] == [["beam"]]
    adds = [texts for kind, _, texts in log if kind == "add"]
    assert adds == [["first:3"], [f"g{i}:1" for i in range(5)]]  # a new stream after the beam
    assert next(entry for entry in log if entry[0] == "end") == ("end", 3, "FIRST")
    batcher.close(wait=WAIT)


@pytest.mark.usefixtures("join_ratio_4")
def test_stream_errors_reach_their_requests_and_the_batcher_goes_on():
    batcher, model, log = streamed()
    greedy = Options(1)
    requests = [(["ok:2"], greedy, 1)] + [([t], greedy, 1) for t in ("bad", "c:1", "d:1", "e:1")]
    results = run_streamed(batcher, log, model.gate, requests)
    # the four join together: the add's error is theirs; the first request's answer stands
    assert results[0] == ["OK"]
    assert all(isinstance(r, ValueError) and "bad text" in str(r) for r in results[1:])
    batcher.close(wait=WAIT)
    batcher, model, log = streamed(fail_at=2)
    requests = [(["p:5"], greedy, 1), (["q:5", "r:5", "s:5", "t:5"], greedy, 1)]
    results = run_streamed(batcher, log, model.gate, requests)
    assert all(isinstance(r, RuntimeError) and "step failed" in str(r) for r in results)

    async def after() -> list:
        return await batcher.run(["later:1"], greedy, 1)  # a new stream, done in one step

    assert asyncio.run(after()) == ["LATER"]
    batcher.close(wait=WAIT)


# -- the service through a real server ---------------------------------------------------------


@contextlib.contextmanager
def served(app) -> Iterator[str]:
    """``app`` on a uvicorn server on 127.0.0.1 (a free port), in a thread: its URL."""
    server, sock = make_server(app, port=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the server's start")
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)
        sock.close()
        app.state.service.close(wait=WAIT)
        app.state.queue.close()


@pytest.fixture(scope="module")
def app(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu")  # greedy: what the numbers model carries
    wait_until(app.state.service.ready.is_set, "the warm-up")
    return app


@pytest.fixture(scope="module")
def url(app) -> Iterator[str]:
    with served(app) as url:
        yield url


def translate(url: str, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(url + "translate", json=body, timeout=WAIT, **kwargs)


def test_concurrent_requests_are_decoded_in_fewer_model_calls_each_as_alone(app, url):
    service = app.state.service
    translator = app.state.explorer.translator
    assert translator.decoding.beam_size == 1
    alone = {text: translator.translate([text])[0] for text in SENTENCES}
    four = translator.decoding.updated(beam_size=4)
    for beam in (1, 4):
        calls = service.calls
        expected_admitted = service.batcher.counts["admitted"] + len(SENTENCES)
        body = {"source": "en", "target": "de", "beam_size": beam}
        # The model is busy (its lock held here): the requests pile up in the batcher's line;
        # the lock is let go before the pool waits for the answers.
        with ThreadPoolExecutor(len(SENTENCES)) as pool, app.state.explorer.lock:
            futures = [pool.submit(translate, url, {**body, "q": t}) for t in SENTENCES]
            wait_until(
                lambda: service.batcher.counts["admitted"] == expected_admitted,  # noqa: B023
                "every request in the batcher's line",
            )
        answers = [future.result() for future in futures]
        assert [a.status_code for a in answers] == [200] * len(SENTENCES), answers[0].text
        made = service.calls - calls
        assert 1 <= made <= 2 < len(SENTENCES), made  # one batch, or one and the rest
        expected = alone if beam == 1 else {
            t: service.translator.translate([t], decoding=four)[0] for t in SENTENCES
        }  # fmt: skip
        assert [a.json()["translatedText"] for a in answers] == [expected[t] for t in SENTENCES]


def test_a_list_of_sentences_is_one_request_with_a_list_answer(app, url):
    translator = app.state.explorer.translator
    texts = [*SENTENCES, ""]
    answer = translate(url, {"q": texts, "source": "en", "target": "de"})
    assert answer.status_code == 200
    assert answer.json() == {"translatedText": [*translator.translate(SENTENCES), ""]}


def test_the_libretranslate_shapes(app, url):
    """The request and answer of LibreTranslate's documented /translate: a string q gives a
    string, a list a list; alternatives the next best (a list, or a list per sentence);
    source "auto" adds detectedLanguage; a form body works as JSON does."""
    one = translate(url, {"q": "seven", "source": "en", "target": "de", "format": "text"})
    assert one.headers["content-type"] == "application/json"
    assert set(one.json()) == {"translatedText"} and isinstance(one.json()["translatedText"], str)
    served = app.state.service.translator
    found = served.hypotheses(["seven", "forty-two"], decoding=served.decoding.widened(3))
    best = [[(h.score, h.text) for h in row] for row in found]
    many = translate(url, {"q": ["seven", "forty-two"], "source": "auto", "target": "de",
                           "alternatives": 2, "api_key": "ignored"})  # fmt: skip
    assert many.status_code == 200
    assert many.json() == {
        "translatedText": [best[0][0][1], best[1][0][1]],
        "alternatives": [[t for _, t in best[0][1:]], [t for _, t in best[1][1:]]],
        "detectedLanguage": [{"language": "en"}, {"language": "en"}],
    }
    single = translate(url, {"q": "seven", "source": "en", "target": "de", "alternatives": 2})
    assert single.json()["alternatives"] == [t for _, t in best[0][1:]]
    form = httpx.post(
        url + "translate", data={"q": "seven", "source": "en", "target": "de"}, timeout=WAIT
    )
    assert form.status_code == 200 and form.json() == one.json()
    assert httpx.get(url + "languages", timeout=WAIT).json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"source": "en", "target": "de"}, "q: missing"),
        ({"q": "", "source": "en", "target": "de"}, "q: empty"),
        ({"q": [], "source": "en", "target": "de"}, "q: empty"),
        ({"q": 5, "source": "en", "target": "de"}, "q: expected a string, got int"),
        ({"q": ["a", 5], "source": "en", "target": "de"}, "q[1]: expected a string"),
        ({"q": "a", "target": "de"}, "source: missing"),
        ({"q": "a", "source": "en"}, "target: missing"),
        ({"q": "a", "source": "en", "target": "fr"}, "en->fr is not a pair this server"),
        ({"q": "a", "source": "de", "target": "en"}, "it translates en->de"),
        ({"q": "a", "source": "en", "target": "de", "format": "html"}, 'format: "html" is not'),
        ({"q": "a", "source": "en", "target": "de", "format": "pdf"}, 'format: expected "text"'),
        ({"q": "a", "source": "en", "target": "de", "alternatives": -1}, "alternatives: expected"),
        ({"q": "a", "source": "en", "target": "de", "alternatives": "x"}, "alternatives: expected"),
        ({"q": "a", "source": "en", "target": "de", "alternatives": True}, "alternatives: expect"),
        ({"q": "a", "source": "en", "target": "de", "beam_size": 0}, "beam_size: expected"),
        ({"q": "a", "source": "x" * 40, "target": "de"}, "source: expected a language code of"),
    ],
)
def test_errors_are_400_with_one_line_naming_the_field(url, body, message):
    answer = translate(url, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert message in error and "\n" not in error, error


def test_every_numeric_field_is_capped(url):
    base = {"source": "en", "target": "de"}
    caps = [
        ({"q": ["one"] * (MAX_SENTENCES + 1)}, f"at most {MAX_SENTENCES} in one request"),
        ({"q": "a" * (MAX_CHARACTERS + 1)}, f"at most {MAX_CHARACTERS:,} in one request"),
        ({"q": ["a" * 5000] * 3}, f"at most {MAX_CHARACTERS:,}"),
        ({"q": "a", "alternatives": MAX_ALTERNATIVES + 1}, f"from 0 to {MAX_ALTERNATIVES}"),
        ({"q": "a", "beam_size": MAX_BEAM + 1}, f"from 1 to {MAX_BEAM}"),
    ]
    for fields, message in caps:
        answer = translate(url, {**base, **fields})
        assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    at_caps = {"q": ["one"] * MAX_SENTENCES, "alternatives": MAX_ALTERNATIVES}
    answer = translate(url, {**base, **at_caps, "beam_size": MAX_BEAM})
    assert answer.status_code == 200
    assert all(len(a) <= MAX_ALTERNATIVES for a in answer.json()["alternatives"])


def test_body_errors_of_the_translate_route(url):
    post = lambda content, kind: httpx.post(  # noqa: E731
        url + "translate", content=content, headers={"content-type": kind}, timeout=WAIT
    )
    assert post(b"[1, 2]", "application/json").json()["error"] == (
        "body: expected a JSON object, got array"
    )
    assert post(b"{", "application/json").status_code == 400
    refused = post(b"q=a", "multipart/form-data; boundary=x")
    assert refused.status_code == 415 and "x-www-form-urlencoded" in refused.json()["error"]
    twice = post(b"q=a&q=b&source=en&target=de", "application/x-www-form-urlencoded")
    assert twice.status_code == 400 and twice.json()["error"].startswith("q: given 2 times")
    assert post(b"q=%FF&source=en", "application/x-www-form-urlencoded").status_code == 400


FORM = "application/x-www-form-urlencoded"
JSON = '{"q": "seven", "source": "en", "target": "de", '


@pytest.mark.parametrize(
    ("content", "kind", "message"),
    [
        (JSON + '"alternatives": "²"}', "application/json", "alternatives: expected"),
        (JSON + '"beam_size": "٣"}', "application/json", "beam_size: expected"),
        (JSON + f'"beam_size": "{"9" * 5000}"}}', "application/json", "beam_size: exp"),
        ("q=seven&source=en&target=de&alternatives=%C2%B2", FORM, "alternatives: expected"),
        ("q=seven&source=en&target=de&beam_size=" + "9" * 5000, FORM, "beam_size: expected"),
        ('{"q": "seven", "source": "\\ud800", "target": "de"}', "application/json", "source: "),
        ('{"q": "seven", "source": "en", "target": "d\\udfffe"}', "application/json", "target: "),
        ("q=%FF&source=en&target=de", FORM, "q: "),
        ("q=seven&source=%C3&target=de", FORM, "source: "),
        ("q=seven&source=en&target=de&api%FF=x", FORM, "api?: "),
    ],
)
def test_unicode_digits_big_numbers_surrogates_and_bad_escapes_are_400(url, content, kind, message):
    """Issue 59: each of these was a 500 (or, for q=%FF, translated as U+FFFD)."""
    answer = httpx.post(
        url + "translate", content=content.encode(), headers={"content-type": kind}, timeout=WAIT
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error.startswith(message) and "\n" not in error, error


def test_metrics_parse_and_count(app, url):
    before = parse_metrics(httpx.get(url + "metrics", timeout=WAIT).text)
    key = ("attnlab_requests_total", (("route", "/translate"), ("status", "200")))
    for text in SENTENCES[:3]:
        assert translate(url, {"q": text, "source": "en", "target": "de"}).status_code == 200
    assert translate(url, {"q": "a", "source": "en", "target": "xx"}).status_code == 400
    httpx.get(url + "no/such/route", timeout=WAIT)
    page = httpx.get(url + "metrics", timeout=WAIT)
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    after = parse_metrics(page.text)
    assert after[key] - before.get(key, 0) == 3
    bad = ("attnlab_requests_total", (("route", "/translate"), ("status", "400")))
    assert after[bad] - before.get(bad, 0) == 1
    assert after[("attnlab_requests_total", (("route", "other"), ("status", "404")))] >= 1
    batches = after[("attnlab_batch_sentences_count", ())]
    assert batches - before.get(("attnlab_batch_sentences_count", ()), 0) == 3
    assert after[("attnlab_queue_depth", ())] == 0 and after[("attnlab_ready", ())] == 1
    latency = ("attnlab_request_seconds_count", (("route", "/translate"),))
    assert after[latency] - before.get(latency, 0) == 4


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus' text format (0.0.4), checked as it is read: every sample's metric has its
    HELP and TYPE first, names and labels are well formed, a histogram's buckets grow with
    ``le`` and end in ``+Inf``, equal to its ``_count``. Samples as ``{(name, labels): value}``."""
    name_re = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
    sample = re.compile(rf"^({name_re})(?:\{{(.*)\}})? (\S+)$")
    label = re.compile(rf'({name_re})="((?:[^"\\]|\\.)*)"(?:,|$)')
    types: dict[str, str] = {}
    helped: set[str] = set()
    samples: dict[tuple[str, tuple], float] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            assert name in helped and name not in types, line
            types[name] = kind
            continue
        match = sample.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels_text, value = match.groups()
        labels = tuple(label.findall(labels_text or ""))
        assert ",".join(f'{k}="{v}"' for k, v in labels) == (labels_text or ""), line
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or types.get(family) == "histogram", f"no TYPE before {line!r}"
        samples[(name, labels)] = float(value)
    for name, kind in types.items():
        if kind != "histogram":
            continue
        series: dict[tuple, list[tuple[float, float]]] = {}
        for (sample_name, labels), value in samples.items():
            if sample_name == name + "_bucket":
                rest = tuple(kv for kv in labels if kv[0] != "le")
                le = dict(labels)["le"]
                series.setdefault(rest, []).append((float(le), value))
        for rest, buckets in series.items():
            assert buckets[-1][0] == float("inf"), name
            assert [b for b, _ in buckets] == sorted(b for b, _ in buckets), name
            assert [v for _, v in buckets] == sorted(v for _, v in buckets), name
            assert buckets[-1][1] == samples[(name + "_count", rest)], name
    return samples


def test_health_is_503_until_the_warm_up_is_done(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu", warm_up=False, api_only=True)
    client = TestClient(app, base_url="http://localhost")
    try:
        answer = client.get("/health")
        assert answer.status_code == 503
        assert answer.json() == {"live": True, "ready": False, "draining": False}
        assert parse_metrics(client.get("/metrics").text)[("attnlab_ready", ())] == 0
        app.state.service.warm_up()
        answer = client.get("/health")
        assert answer.status_code == 200 and answer.json()["ready"] is True
        app.state.draining.set()  # what Ctrl-C and SIGTERM do first
        assert client.get("/health").json() == {"live": True, "ready": False, "draining": True}
        refused = client.post("/translate", json={"q": "a", "source": "en", "target": "de"})
        assert refused.status_code == 503 and "shutting down" in refused.json()["error"]
    finally:
        app.state.service.close(wait=WAIT)
        app.state.queue.close()


def test_api_only_serves_the_routes_without_the_page(numbers_model_dir):
    app = create_app(numbers_model_dir, device="cpu", warm_up=False, api_only=True)
    client = TestClient(app, base_url="http://localhost")
    try:
        for path in ("/", "/static/app.js"):
            answer = client.get(path)
            assert answer.status_code == 404
            assert "GET /static/<file>" not in answer.json()["error"]
        assert app.state.explorer is None  # no explorer is built: its routes are 404s
        assert client.get("/api/model").status_code == 404
        assert client.get("/languages").status_code == 200
        answer = client.post("/translate", json={"q": "seven", "source": "en", "target": "de"})
        assert answer.status_code == 200
    finally:
        app.state.service.close(wait=WAIT)
        app.state.queue.close()


# -- the command: SIGTERM drains ---------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_answers_the_request_in_flight_refuses_new_ones_and_exits_0(numbers_model_dir):
    """A request whose body is half sent when SIGTERM comes is in flight: the server waits
    for the rest, answers it 200, refuses new requests (503, or the connection: the listening
    socket is closed), and exits with status 0."""
    process = start_serve(numbers_model_dir, "--api-only", "--device", "cpu")
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    try:
        first = lines.get(timeout=WAIT)
        assert "the translation API is at http://127.0.0.1:" in first, first
        url = first[first.index("http://") :].split()[0]
        host, port = url.removeprefix("http://").rstrip("/").split(":")

        def ready() -> bool:
            try:
                return httpx.get(url + "health", timeout=WAIT).status_code == 200
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read()
                return False

        wait_until(ready, "/health 200")
        body = json.dumps({"q": "seven", "source": "en", "target": "de"}).encode()
        head = (
            f"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection((host, int(port)), timeout=WAIT) as flight:
            flight.sendall(head + body[:5])  # in flight: the server waits for the rest
            wait_until(lambda: _in_flight(url) >= 1, "the request in flight")
            process.send_signal(signal.SIGTERM)
            wait_until(lambda: _refused(url), "a new request refused after SIGTERM")
            flight.sendall(body[5:])
            answer = _read_answer(flight)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {
            "translatedText": _translate_alone(numbers_model_dir, "seven")
        }
        assert process.wait(timeout=WAIT) == 0, process.stderr.read()
        assert "attnlab serve: stopped" in lines.get(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)


def _in_flight(url: str) -> float:
    """Requests the server holds whose answer has not gone out (its /metrics, this one
    excluded): those counted as arrived minus those answered."""
    samples = parse_metrics(httpx.get(url + "metrics", timeout=WAIT).text)
    return samples[("attnlab_requests_in_flight", ())] - 1


def _refused(url: str) -> bool:
    try:
        answer = httpx.post(
            url + "translate", json={"q": "a", "source": "en", "target": "de"}, timeout=WAIT
        )
    except httpx.TransportError:  # the listening socket is closed
        return True
    return answer.status_code == 503


def _read_answer(sock: socket.socket) -> bytes:
    """One HTTP answer with a Content-Length body, read whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before an answer: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed mid-answer"
        rest += chunk
    return head + b"\r\n\r\n" + rest


def _translate_alone(model_dir, text: str) -> str:
    from attnlab.inference.translator import Translator

    return Translator.load(model_dir, device="cpu").translate([text])[0]

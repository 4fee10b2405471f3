"""Fuzzing the explorer's API with schemathesis, from the server's own OpenAPI schema.

Every route gets requests generated from its schema (valid ones, and for the routes with
parameters or bodies, invalid ones: wrong types, missing and unknown fields, out-of-range
values), sent in-process to the ASGI app (no sockets: fast), over 1,000 in all. Every answer
must be documented and conform to the schema (status code, content type, body), and none may
be a 5xx. The model is a small untrained one with the numbers tokenizer, so that decoding costs
little: what is under test is the HTTP layer, not translations. Then /translate's own malformed
requests, generated here (JSON and forms, Unicode digits, surrogates, bad escapes, bad paths):
never a 500.
"""

from __future__ import annotations

import collections
import json
import random
import shutil
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from attnlab.decode.options import DecodingOptions
from attnlab.models.transformer import Transformer, TransformerConfig, load_pretrained
from attnlab.serve import create_app

#: (path, method, examples): every operation of the schema; the model route's decoding is the
#: slowest, so it gets its share of the 1,000 as the cheap ones do.
ROUTES = [
    ("/api/model", "GET", 20),
    ("/api/translate", "POST", 300),
    ("/api/attention", "POST", 300),
    ("/api/positional", "GET", 300),
    ("/api/masks", "POST", 300),
    ("/translate", "POST", 200),
    ("/languages", "GET", 10),
    ("/health", "GET", 10),
]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def app(tmp_path_factory, numbers_model_dir):
    vocab = load_pretrained(numbers_model_dir).config.vocab_size
    config = TransformerConfig(
        vocab_size=vocab,
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_len=16,
    )
    model_dir = tmp_path_factory.mktemp("fuzz-model")
    Transformer(config).save_pretrained(model_dir)
    for tokenizer in numbers_model_dir.glob("*tokenizer*.json"):
        shutil.copy(tokenizer, model_dir)
    app = create_app(
        model_dir, device="cpu", decoding=DecodingOptions.for_model(model_dir, beam_size=2)
    )
    assert app.state.service.ready.wait(120), "the warm-up did not end within 120 s"
    return app


@pytest.fixture(scope="module")
def schema(app):
    return schemathesis.openapi.from_asgi("/api/openapi.json", app, headers={"host": "localhost"})


def test_the_schema_covers_every_route(schema):
    operations = {(op.ok().path, op.ok().method.upper()) for op in schema.get_all_operations()}
    assert operations == {(path, method) for path, method, _ in ROUTES}


def _fuzz(strategy, examples: int) -> collections.Counter[int]:
    """Send ``examples`` requests drawn from ``strategy``, checking each answer: the count of
    each status."""
    statuses: collections.Counter[int] = collections.Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=strategy)
    def fuzz(case) -> None:
        response = case.call_and_validate(base_url="http://localhost", checks=CHECKS)
        statuses[response.status_code] += 1

    fuzz()
    return statuses


@pytest.mark.slow
def test_a_thousand_generated_requests_get_documented_answers_and_no_5xx(schema, app):
    answered: dict[str, collections.Counter[int]] = {}
    for path, method, examples in ROUTES:
        operation = schema[path][method]
        strategy = operation.as_strategy(GenerationMode.POSITIVE)
        if operation.path_parameters or operation.query or operation.body:
            strategy = st.one_of(strategy, operation.as_strategy(GenerationMode.NEGATIVE))
        answered[f"{method} {path}"] = _fuzz(strategy, examples)
    total = sum(sum(s.values()) for s in answered.values())
    assert total >= 1000, answered
    assert all(answered.values()), answered  # every route was asked
    assert not any(code >= 500 for s in answered.values() for code in s), answered
    for route in ("POST /api/translate", "POST /api/attention", "POST /api/masks"):
        assert answered[route][200] and answered[route][422], (route, answered[route])
    assert answered["POST /translate"][200] and answered["POST /translate"][400]
    assert app.state.queue.pending == 0 and app.state.service.batcher.sentences_waiting == 0


# -- /translate's malformed requests, generated here (issue 59) ---------------------------------

#: Field values that are wrong somewhere: types, huge and Unicode numbers, surrogates, blanks.
ODD = [None, True, 0, -1, 2, 1.5, 1e308, 10**30, "", " ", "2", " 3 ", "3\x00", "1e3", "²",
       "٣", "9" * 5000, "\ud800", "a\udfffb", "x" * 40, "auto", "en", "de", "html", [], {},
       ["seven", 5], ["\ud800"], ["seven"] * 65]  # fmt: skip
#: Percent-escapes, good and bad, for form values and names.
ESCAPES = ["%FF", "%", "%G1", "%C3", "%ED%A0%80", "%F4%90%80%80", "%00", "%C2%B2", "+%2B", "%E2%82"]
FORM = "application/x-www-form-urlencoded"
JSON = {"content-type": "application/json"}
GOOD = {"q": "seven", "source": "src", "target": "tgt"}  # the pair of a model with no job.json
#: What the app answers /translate with (docs/serve.md): never a 5xx but the busy 503.
DOCUMENTED = {200, 400, 404, 405, 413, 415, 422, 503}


def _form(fields: dict) -> bytes:
    """``fields`` as a form; strings kept as they are (a surrogate as its UTF-8-like bytes)."""
    pairs = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in fields.items()]
    return "&".join(f"{k}={quote(v, errors='surrogatepass')}" for k, v in pairs).encode()


def _malformed_translate(rng: random.Random) -> Iterator[tuple[str, str, dict]]:
    """``(method, path, httpx options)`` of a few hundred bad /translate requests: each field
    given each odd value or left out, as JSON and as a form; random mixes of them; bad
    escapes, bodies, content types, lengths, methods and paths."""
    for name in [*GOOD, "format", "alternatives", "beam_size", "api_key"]:
        for value in [*ODD, ...]:
            body = {k: v for k, v in {**GOOD, name: value}.items() if v is not ...}
            yield "POST", "/translate", {"content": json.dumps(body).encode(), "headers": JSON}
            yield "POST", "/translate", {"content": _form(body), "headers": {"content-type": FORM}}
    for _ in range(60):
        body = {k: rng.choice([v, *rng.sample(ODD, 2)]) for k, v in GOOD.items()}
        body[rng.choice(["alternatives", "beam_size", "format"])] = rng.choice(ODD)
        yield "POST", "/translate", {"content": json.dumps(body).encode(), "headers": JSON}
    for escape in ESCAPES:
        for form in ("q={}&source=src&target=tgt", "q=a&source={}&target=tgt", "q=a{}=1&x{}=2"):
            content = form.replace("{}", escape).encode()
            yield "POST", "/translate", {"content": content, "headers": {"content-type": FORM}}
    bodies = [b"", b"[]", b"null", b'"q"', b"{", b"1e999", b'{"q": NaN}', b"\xff", b"q=a",
              b'{"q": "a", "q": 1}', b"[" * 5000 + b"]" * 5000, b'{"q": "' + b"a" * 70_000 + b'"}',
              b'{"alternatives": ' + b"9" * 5000 + b"}", b"q=a&" * 100 + b"source=en"]  # fmt: skip
    kinds = ["application/json", FORM, "text/plain", "", "application/json; charset=latin-1"]
    for content in bodies:
        for kind in kinds:
            yield "POST", "/translate", {"content": content, "headers": {"content-type": kind}}
    for length in ["9" * 5000, "²", "-1", " 5", "1e3", "99999999999", "0x10"]:
        headers = {**JSON, "content-length": length.encode("latin-1")}  # as HTTP reads it
        yield "POST", "/translate", {"content": json.dumps(GOOD).encode(), "headers": headers}
    for method in ["GET", "PUT", "DELETE", "PATCH"]:
        yield method, "/translate", {}
    paths = ["/translate/", "/TRANSLATE", "/translate%FF", "/%FF", "//translate", "/trans",
             "/translate/../translate", "/translate?q=%FF&source=en", "/translate%00"]  # fmt: skip
    for path in paths:
        yield "POST", path, {"content": json.dumps(GOOD).encode(), "headers": JSON}


def test_hundreds_of_malformed_translate_requests_get_no_500(app):
    """Issue 59: 17 of 339 such requests were 500s (Unicode digits, huge numbers, surrogates,
    a form's bad escapes). Every answer here is a documented status, an error a one-line
    ``{"error": ...}``."""
    assert tuple(app.state.service.languages) == (GOOD["source"], GOOD["target"])
    seen: collections.Counter[int] = collections.Counter()
    # "with": the lifespan's start (a drain ends the schemathesis run's)
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        for method, path, options in _malformed_translate(random.Random(59)):
            answer = client.request(method, path, **options)
            assert answer.status_code in DOCUMENTED, (method, path, options, answer.text)
            if answer.status_code != 200:
                error = answer.json()["error"]
                assert error and "\n" not in error, (options, error)
            seen[answer.status_code] += 1
    assert sum(seen.values()) >= 300 and {200, 400, 404, 405, 413, 415} <= set(seen), seen

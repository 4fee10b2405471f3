"""Fuzzing the explorer's API with schemathesis, from the server's own OpenAPI schema.

Every route gets requests generated from its schema (valid ones, and for the routes with
parameters or bodies, invalid ones: wrong types, missing and unknown fields, out-of-range
values), sent in-process to the ASGI app (no sockets: fast), over 1,000 in all. Every answer
must be documented and conform to the schema (status code, content type, body), and none may
be a 5xx. The model is a small untrained one with the numbers tokenizer, so that decoding costs
little: what is under test is the HTTP layer, not translations.
"""

from __future__ import annotations

import collections
import shutil

import pytest
import schemathesis
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

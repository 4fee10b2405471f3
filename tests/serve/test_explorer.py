"""The attention explorer's API (docs/serve.md): every route's answer against the library's own
computation, every class of client error, 1,000 malformed requests, concurrent requests
through a real uvicorn server, and the ``attnlab serve`` command."""

from __future__ import annotations

import json
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from _helpers import default_sigint
from attnlab.cli import main
from attnlab.data.tokenizer import load_tokenizers
from attnlab.decode.options import DecodingOptions
from attnlab.decode.search import beam_search
from attnlab.inference.translator import Translator
from attnlab.models.transformer import (
    Transformer,
    TransformerConfig,
    TransformerLM,
    load_pretrained,
)
from attnlab.nn.masks import causal_mask, combine_masks, key_mask, padding_mask_from_ids
from attnlab.nn.positional import ALiBi, RotaryEmbedding
from attnlab.serve import MAX_BODY_BYTES, create_app
from attnlab.serve import process as serve_process
from attnlab.serve.app import STATIC_DIR
from attnlab.serve.limits import Limits
from attnlab.serve.process import make_server, url_of

ROUNDING = 5e-6  # answers are rounded to 5 decimals
SENTENCES = [
    "three hundred and twelve",
    "forty-two",
    "seven",
    "nine hundred and ninety-nine",
    "sixty-one",
    "one hundred and twenty-eight",
    "eighteen",
    "five hundred",
]


@pytest.fixture(scope="module")
def app(numbers_model_dir):
    # beam 4 (the paper's), not the numbers recipe's greedy search, which the model carries
    # (test_the_server_decodes_as_the_models_recipe_chose)
    beam = DecodingOptions.for_model(numbers_model_dir, beam_size=4)
    return create_app(numbers_model_dir, decoding=beam, device="cpu")


def local_client(app) -> TestClient:
    """A TestClient that addresses the app as http://localhost (the Host guard refuses
    TestClient's own "testserver")."""
    return TestClient(app, base_url="http://localhost")


@pytest.fixture(scope="module")
def client(app):
    with local_client(app) as client:
        yield client


@pytest.fixture(scope="module")
def model(app) -> Transformer:
    return app.state.explorer.model


@pytest.fixture(scope="module")
def tokenizers(numbers_model_dir):
    return load_tokenizers(numbers_model_dir)


def post(client: TestClient, path: str, body: object) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response: httpx.Response, status: int, message: str | None = None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body == {"error": body["error"], "status": status}
    assert isinstance(body["error"], str) and body["error"]
    if message is not None:
        assert message in body["error"]


def close(answer: list, expected: torch.Tensor, atol: float = 1e-5 + ROUNDING) -> None:
    got = torch.tensor(answer, dtype=torch.float64)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected.double().cpu(), atol=atol, rtol=0)


WEIGHT_ROUNDING = 5e-5  # attention weights are rounded to 4 decimals


def weights(answer: dict, kind: str) -> torch.Tensor:
    """An attention answer's maps of ``kind`` as ``(layers, heads, queries, keys)``."""
    maps = answer[kind]
    shape = (len(maps["layers"]), len(maps["heads"]), maps["queries"], maps["keys"])
    assert len(maps["weights"]) == shape[0] * shape[1] * shape[2] * shape[3]
    return torch.tensor(maps["weights"], dtype=torch.float64).reshape(shape)


def close_maps(answer: dict, kind: str, expected: torch.Tensor, atol: float = 1e-5) -> None:
    got = weights(answer, kind)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected.double().cpu(), atol=atol + WEIGHT_ROUNDING, rtol=0)


# -- success answers ---------------------------------------------------------------------------


def test_model_info(client, model, numbers_model_dir):
    info = client.get("/api/model").json()
    c = model.config
    assert info == {
        "model_type": "transformer",
        "name": Path(numbers_model_dir).name,
        "num_parameters": model.num_parameters(),
        "d_model": c.d_model,
        "num_heads": 4,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "max_len": 64,
        "positional": c.positional,
        "norm_first": c.norm_first,
        "beam_size": 4,
        "vocab_size": c.vocab_size,
        "tgt_vocab_size": c.target_vocab_size,
        "positional_max_length": 64,
    }


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_equals_translator(client, model, tokenizers, beam):
    src, tgt = tokenizers
    translator = Translator(model, src, tgt, decoding=DecodingOptions(beam_size=beam))
    for text in SENTENCES[:4]:
        answer = post(client, "/api/translate", {"text": text, "beam_size": beam})
        assert answer["translation"] == translator.translate([text])[0]
        assert answer["source_tokens"] == src.labels(src.encode(text))
        assert answer["source_length"] == len(src.encode(text))
        assert answer["truncated"] is False and answer["max_len"] == 64
        assert answer["output_tokens"][-1] == "<eos>"
        assert tgt.decode(tgt.backend.encode(answer["translation"]).ids) == answer["translation"]
    default = post(client, "/api/translate", {"text": SENTENCES[0]})  # the server's beam, 4
    assert default["translation"] == Translator(model, src, tgt).translate([SENTENCES[0]])[0]


def test_attention_of_the_models_own_output(client, model, tokenizers):
    src, tgt = tokenizers
    text = SENTENCES[0]
    answer = post(client, "/api/attention", {"text": text})
    translated = post(client, "/api/translate", {"text": text})
    assert {k: answer[k] for k in translated} == translated
    assert answer["teacher_forced"] is False
    ids = src.encode(text)
    output = beam_search(model, [ids], beam_size=4).tolist(keep_eos=True)[0]
    assert answer["output_tokens"] == tgt.labels(output)
    inputs = [model.config.bos_id, *output[:-1]]
    assert answer["target_tokens"] == ["<bos>", *answer["output_tokens"][:-1]]
    maps = model.attention(torch.tensor([ids]), torch.tensor([inputs]))
    s, t = len(ids), len(inputs)
    for kind, (queries, keys) in {"encoder": (s, s), "decoder": (t, t), "cross": (t, s)}.items():
        assert answer[kind]["layers"] == [0, 1] and answer[kind]["heads"] == [0, 1, 2, 3]
        got = weights(answer, kind)
        assert got.shape == (2, 4, queries, keys)  # [layer][head][query][key]
        ones = torch.ones(2, 4, queries, dtype=torch.float64)
        torch.testing.assert_close(got.sum(-1), ones, atol=keys * WEIGHT_ROUNDING, rtol=0)
        close_maps(answer, kind, torch.stack([w[0] for w in getattr(maps, kind)]))
    assert (weights(answer, "decoder").triu(diagonal=1) == 0).all()  # no look-ahead
    assert answer["capped"] is False and answer["max_elements"] == 1 << 18
    assert answer["elements"] == 8 * (s * s + t * t + t * s)


def test_attention_teacher_forced(client, model, tokenizers):
    src, tgt = tokenizers
    text, target = "three hundred and twelve", "dreihundertzwölf"
    answer = post(client, "/api/attention", {"text": text, "target": target, "beam_size": 2})
    assert answer["teacher_forced"] is True
    words = tgt.encode(target)
    assert answer["output_tokens"] == [*tgt.labels(words), "<eos>"]
    assert answer["target_tokens"] == ["<bos>", *tgt.labels(words)]
    assert (
        answer["translation"]
        == Translator(model, src, tgt, decoding=DecodingOptions(beam_size=2)).translate([text])[0]
    )
    maps = model.attention(torch.tensor([src.encode(text)]), torch.tensor([[1, *words]]))
    close_maps(answer, "cross", torch.stack([w[0] for w in maps.cross]))
    close_maps(answer, "decoder", torch.stack([w[0] for w in maps.decoder]))
    # a blank target is no target
    own = post(client, "/api/attention", {"text": text, "target": "  ", "beam_size": 2})
    assert own["teacher_forced"] is False
    assert own["target_tokens"] == ["<bos>", *own["output_tokens"][:-1]]
    too_long = client.post("/api/attention", json={"text": text, "target": "drei " * 80})
    assert_error(too_long, 422, "target: ")


def test_truncation_to_max_len(client, tokenizers):
    src, _ = tokenizers
    text = " ".join(["seven hundred and seventy-seven"] * 12)
    assert len(src.encode(text)) > 64
    answer = post(client, "/api/attention", {"text": text, "beam_size": 1})
    assert answer["truncated"] is True
    assert answer["source_length"] == len(src.encode(text))
    assert answer["source_tokens"] == src.labels(src.encode(text)[:64])
    assert len(answer["output_tokens"]) <= 63  # <bos> + output fit 64 positions
    assert weights(answer, "encoder").shape == (2, 4, 64, 64)
    masks = post(client, "/api/masks", {"texts": [text, "two"]})
    assert masks["truncated"] == [True, False] and len(masks["tokens"][0]) == 64


def test_positional_table(client, model):
    answer = client.get("/api/positional").json()
    assert (answer["kind"], answer["length"], answer["d_model"]) == ("sinusoidal", 64, 64)
    table = model.src_embed.position.table(64)
    close(answer["matrix"], table, atol=ROUNDING + 1e-7)
    similarity = torch.tensor(answer["similarity"], dtype=torch.float64)
    unit = table.double() / table.double().norm(dim=1, keepdim=True)
    close(answer["similarity"], unit @ unit.T, atol=ROUNDING + 1e-7)
    torch.testing.assert_close(similarity.diagonal(), torch.ones(64, dtype=torch.float64))
    short = client.get("/api/positional", params={"length": 5}).json()
    assert short["length"] == 5 and torch.tensor(short["matrix"]).shape == (5, 64)
    assert "sec. 3.5" in short["note"]
    for bad, message in [("0", "from 1 to 64, got 0"), ("65", "got 65"), ("x", "got 'x'")]:
        assert_error(client.get("/api/positional", params={"length": bad}), 422, message)


def _model_dir(tmp_path: Path, numbers_model_dir: Path, cls, **config) -> Path:
    """A small untrained model of class ``cls`` with the numbers model's tokenizer."""
    vocab = load_pretrained(numbers_model_dir).config.vocab_size
    options = dict(d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1)
    options.update(max_len=16, **config)
    out = tmp_path / f"{cls.__name__}-{config.get('positional', '')}"
    cls(TransformerConfig(vocab_size=vocab, **options)).save_pretrained(out)
    for tokenizer in Path(numbers_model_dir).glob("*tokenizer*.json"):
        shutil.copy(tokenizer, out)
    return out


@pytest.mark.parametrize("kind", ["learned", "rotary", "alibi", "none"])
def test_positional_kinds(tmp_path, numbers_model_dir, kind):
    app = create_app(_model_dir(tmp_path, numbers_model_dir, Transformer, positional=kind))
    model = app.state.explorer.model
    with local_client(app) as client:
        answer = client.get("/api/positional").json()
        assert_error(client.get("/api/positional?length=17"), 422, "from 1 to 16, got 17")
        assert post(client, "/api/translate", {"text": "seven"})["max_len"] == 16
    assert (answer["kind"], answer["length"], answer["d_model"]) == (kind, 16, 32)
    if kind == "learned":
        close(answer["matrix"], model.src_embed.position.weight[:16].detach(), atol=ROUNDING)
    elif kind == "rotary":
        angles = RotaryEmbedding(8).angles(16)  # head_dim 32 / 4
        close(answer["matrix"], angles, atol=ROUNDING)
        similarity = torch.tensor(answer["similarity"], dtype=torch.float64)
        distance = torch.arange(16.0)[:, None] - torch.arange(16.0)[None, :]
        expected = torch.cos(distance[..., None] * (angles[1] - angles[0])).mean(-1)
        torch.testing.assert_close(similarity, expected.double(), atol=1e-5, rtol=0)
    elif kind == "alibi":
        close(answer["matrix"], ALiBi(4).bias(16, 16)[0, 0], atol=ROUNDING)
        assert answer["similarity"] is None and "0.0625" in answer["note"]  # head 1 of 4: 2^-4
    else:
        assert answer["matrix"] is None and answer["similarity"] is None
        assert "order-blind" in answer["note"]


def test_masks_equal_the_library(client, tokenizers):
    src, _ = tokenizers
    texts = ["two", "three hundred and twelve", "sixty-one"]
    answer = post(client, "/api/masks", {"texts": texts})
    encoded = [src.encode(t) for t in texts]
    width = max(map(len, encoded))
    ids = torch.zeros(3, width, dtype=torch.long)
    for b, row in enumerate(encoded):
        ids[b, : len(row)] = torch.tensor(row)
    padding = padding_mask_from_ids(ids, 0)
    assert answer["padding"] == padding.tolist()
    assert answer["look_ahead"] == causal_mask(width).tolist()
    combined = combine_masks(causal_mask(width), key_mask(padding))
    assert answer["combined"] == combined[:, 0].tolist()
    assert answer["tokens"] == [src.labels(row) for row in ids.tolist()]
    assert answer["tokens"][0][-1] == "<pad>" and answer["truncated"] == [False] * 3


def test_a_model_dir_without_a_translation_model(tmp_path, numbers_model_dir):
    lm = _model_dir(tmp_path, numbers_model_dir, TransformerLM)
    with pytest.raises(ValueError, match=str(lm)):
        create_app(lm)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        create_app(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"^beam_size: expected 1 to 16, got 17$"):
        create_app(numbers_model_dir, decoding=DecodingOptions(beam_size=17))  # before loading


def test_serve_refuses_a_beam_over_16_before_loading_the_model(numbers_model_dir, capsys):
    argv = ["serve", "--model", str(numbers_model_dir), "--port", "0", "--beam-size", "17"]
    assert main(argv) == 2
    assert capsys.readouterr().err == "attnlab serve: error: beam_size: expected 1 to 16, got 17\n"


# -- the page and the schema -------------------------------------------------------------------


def test_static_files_and_no_traversal(tmp_path, numbers_model_dir):
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>explorer</title>\n")
    (static / "app.js").write_text("console.log('hi');\n")
    (static / ".hidden").write_text("secret")
    (static / "sub").mkdir()
    (static / "sub" / "x.js").write_text("nested")
    (tmp_path / "secret.txt").write_text("outside")
    (static / "link.js").symlink_to(tmp_path / "secret.txt")
    with local_client(create_app(numbers_model_dir, static_dir=static)) as client:
        page = client.get("/")
        assert page.status_code == 200 and "<title>explorer</title>" in page.text
        assert page.headers["content-type"].startswith("text/html")
        script = client.get("/static/app.js")
        assert script.text == "console.log('hi');\n"
        assert script.headers["content-type"].startswith("text/javascript")
        for path in [
            "/static/.hidden",
            "/static/sub/x.js",
            "/static/../secret.txt",
            "/static/%2e%2e/secret.txt",
            "/static/..%2fsecret.txt",
            "/static/link.js",
            "/static/missing.css",
            "/static/",
            "/index.html",
        ]:
            assert_error(client.get(path), 404)
        assert_error(client.post("/static/app.js"), 405)
    (static / "index.html").unlink()
    with local_client(create_app(numbers_model_dir, static_dir=static)) as client:
        assert_error(client.get("/"), 404, "index.html")


def test_the_packaged_page(client):
    if not (STATIC_DIR / "index.html").is_file():
        pytest.skip("the page (serve/static/index.html) is not written yet")
    page = client.get("/")
    assert page.status_code == 200
    assert page.text == (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    for name in ("app.js", "style.css"):
        if (STATIC_DIR / name).is_file():
            assert client.get(f"/static/{name}").status_code == 200


def test_schema_and_no_cdn_docs(client):
    schema = client.get("/api/openapi.json").json()
    assert set(schema["paths"]) == {
        "/api/model",
        "/api/translate",
        "/api/attention",
        "/api/positional",
        "/api/masks",
        "/translate",
        "/languages",
        "/health",
    }  # /metrics is Prometheus' text, not part of the JSON schema
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert_error(client.get(path), 404)


# -- client errors -----------------------------------------------------------------------------

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("method", "path", "options", "status", "message"),
    [
        ("POST", "/api/translate", {"content": b'{"text": "two",}'}, 400, "body: invalid JSON at "),
        ("POST", "/api/translate", {"content": b""}, 400, "body: empty"),
        ("POST", "/api/translate", {"content": b'{"text": "\xff"}'}, 400, "not UTF-8"),
        ("POST", "/api/translate", {"content": b"[" * 20000}, 400, "nested too deeply"),
        ("GET", "/api/nothing", {}, 404, "not found: GET /api/nothing"),
        ("GET", "/elsewhere", {}, 404, "not found"),
        ("GET", "/api/model/", {}, 404, "not found: GET /api/model/"),
        ("POST", "/api/translate/", {"json": {"text": "two"}}, 404, "not found"),
        ("GET", "/api/translate", {}, 405, "method not allowed: GET /api/translate; use POST"),
        ("DELETE", "/api/model", {}, 405, "use GET"),
        ("POST", "/api/translate", {"json": {"text": "x" * 70_000}}, 413, "over 64 KiB"),
        ("POST", "/api/translate", {"data": {"text": "two"}}, 415, "expected application/json"),
        ("POST", "/api/masks", {"content": b"{}", "ct": "text/plain"}, 415, "got 'text/plain'"),
        ("POST", "/api/translate", {"json": {"text": 5}}, 422, "text: expected a string, got int"),
        ("POST", "/api/translate", {"json": {"text": "two", "beam_size": "4"}}, 422, "beam_size"),
        ("POST", "/api/translate", {"json": {"text": "two", "beam_size": 0}}, 422, "at least 1"),
        ("POST", "/api/translate", {"json": {"text": "two", "beam_size": 17}}, 422, "at most 16"),
        ("POST", "/api/translate", {"json": {"text": "two", "beam_size": 2.0}}, 422, "beam_size"),
        ("POST", "/api/translate", {"json": {"text": "two", "beam_size": True}}, 422, "boolean"),
        ("POST", "/api/translate", {"json": {}}, 422, "text: missing"),
        ("POST", "/api/translate", {"json": {"text": "two", "x": 1}}, 422, "x: unknown field"),
        ("POST", "/api/translate", {"json": [1, 2]}, 422, "body: expected a JSON object"),
        ("POST", "/api/translate", {"content": b"null"}, 422, "expected a JSON object, got null"),
        ("POST", "/api/translate", {"json": {"text": " \t\n"}}, 422, "text: empty; type a"),
        ("POST", "/api/attention", {"json": {"text": "two", "target": 3}}, 422, "target: "),
        ("POST", "/api/translate", {"content": b'{"text": "\\ud800"}'}, 422, "surrogate"),
        ("POST", "/api/masks", {"json": {"texts": []}}, 422, "texts: expected at least 1 item"),
        ("POST", "/api/masks", {"json": {"texts": ["a"] * 9}}, 422, "at most 8 items"),
        ("POST", "/api/masks", {"json": {"texts": ["a", 2]}}, 422, "texts[1]: expected a string"),
        ("POST", "/api/masks", {"json": {"texts": ["a", ""]}}, 422, "texts[1]: empty"),
        ("POST", "/api/masks", {"json": {"texts": "a"}}, 422, "texts: expected an array"),
    ],
)
def test_client_errors(client, method, path, options, status, message):
    options = dict(options)
    headers = {"content-type": options.pop("ct")} if "ct" in options else None
    if "content" in options and headers is None:
        headers = JSON
    response = client.request(method, path, headers=headers, **options)
    assert_error(response, status, message)
    if status == 405:
        assert response.headers["allow"]


def test_body_size_by_content_length_and_by_count(client):
    limit = MAX_BODY_BYTES
    padded = json.dumps({"text": "two"}).encode() + b" " * (limit - 15)
    assert len(padded) == limit
    assert client.post("/api/translate", content=padded, headers=JSON).status_code == 200
    assert_error(client.post("/api/translate", content=padded + b" ", headers=JSON), 413)
    lying = {**JSON, "content-length": "10"}  # counted as it arrives, whatever it claims
    chunks = iter([b"{" + b" " * 40_000, b" " * 40_000 + b"}"])
    assert_error(client.post("/api/translate", content=chunks, headers=lying), 413)


def _malformed(rng: random.Random) -> tuple[str, str, dict, set[int]]:
    """One malformed request: ``(method, path, httpx options, acceptable statuses)``."""
    posts = ["/api/translate", "/api/attention", "/api/masks"]
    path = rng.choice(posts)
    junk = rng.choice([5, -1, 2.5, True, None, [], {}, ["a"], {"a": 1}, "x" * rng.randint(0, 9)])
    kind = rng.randrange(14)
    if kind == 0:  # invalid JSON bytes
        valid = json.dumps({"text": "two", "beam_size": 2})
        body = valid[: rng.randint(0, len(valid) - 1)] + rng.choice(
            [",", "'", "\\", "]", "}}"]
        )  # never valid
        return "POST", path, {"content": body.encode(), "headers": JSON}, {400, 422}
    if kind == 1:  # random bytes
        body = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
        return "POST", path, {"content": body, "headers": JSON}, {400, 422}
    if kind == 2:  # wrong types
        key = "texts" if path == "/api/masks" else rng.choice(["text", "beam_size", "target"])
        if key == "target" and path != "/api/attention":
            return "POST", path, {"json": {"text": "two", key: "drei"}}, {422}  # unknown there
        wrong = {
            "text": [5, -1, 2.5, True, None, [], {}, ["a"], {"a": 1}],
            "target": [5, 2.5, False, [], {}, ["drei"], {"a": None}],
            "beam_size": ["4", 2.5, 4.0, True, [], {}, [4], {"a": 1}, "x"],
            "texts": [5, "two", 2.5, True, None, {}, [5], [["two"]], [None], {"a": ["two"]}],
        }[key]
        fields = {"texts": ["two"]} if key == "texts" else {"text": "two"}
        return "POST", path, {"json": {**fields, key: rng.choice(wrong)}}, {422}
    if kind == 3:  # missing fields
        body = rng.choice([{}, {"beam_size": 2}, {"target": "drei"}, {"text": None}])
        return "POST", path, {"json": body}, {422}
    if kind == 4:  # unknown fields
        base = {"texts": ["two"]} if path == "/api/masks" else {"text": "two"}
        name = "".join(rng.choice("abcxyz_") for _ in range(rng.randint(1, 8)))
        return "POST", path, {"json": {**base, f"{name}!": junk}}, {422}
    if kind == 5:  # huge bodies, ~100 KB
        text = "nine " * rng.randint(14_000, 20_000)
        return "POST", path, {"json": {"text": text, "texts": [text]}}, {413}
    if kind == 6:  # wrong methods
        method = rng.choice(["GET", "PUT", "DELETE", "PATCH"])
        if rng.random() < 0.3:
            return (
                rng.choice(["POST", "PUT"]),
                rng.choice(["/api/model", "/api/positional"]),
                {},
                {405},
            )
        return method, path, {"json": {"text": "two"}}, {405}
    if kind == 7:  # unknown routes
        name = "".join(rng.choice("abc_%-~") for _ in range(rng.randint(1, 12)))
        where = rng.choice(["/api/", "/", "/static/x/", "/api/model/", "/api/masks/"]) + name
        where = rng.choice([where, where + "/"])
        return rng.choice(["GET", "POST"]), where, {"json": {"text": "two"}}, {404}
    if kind == 8:  # wrong content types
        media = rng.choice(["text/plain", "application/x-www-form-urlencoded", "", "json"])
        media = rng.choice([media, "multipart/form-data; boundary=x", "application/jsonx"])
        headers = {"content-type": media}
        return "POST", path, {"content": b'{"text": "two"}', "headers": headers}, {415}
    if kind == 9:  # nested junk
        depth = rng.choice([3, 50, 5000])
        nested = "[" * depth + "1" + "]" * depth
        body = f'{{"text": {nested}, "texts": {nested}}}'.encode()
        return "POST", path, {"content": body, "headers": JSON}, {400, 422}
    if kind == 10:  # negative and huge numbers
        number = rng.choice([-1, 0, 17, -(10**30), 10**30, 1e308, -1e308, 2**63])
        if path == "/api/masks" or rng.random() < 0.3:
            value = rng.choice(["-5", "0", "65", "99999", str(10**30), "1e3", "nan", "4.5"])
            return "GET", "/api/positional", {"params": {"length": value}}, {422}
        return "POST", path, {"json": {"text": "two", "beam_size": number}}, {422}
    if kind == 11:  # empty and whitespace-only strings
        blank = rng.choice(["", " ", "\t\n", "\u3000", "\r\n  \u00a0"])
        body = {"texts": ["two", blank]} if path == "/api/masks" else {"text": blank}
        return "POST", path, {"json": body}, {422}
    if kind == 12:  # not UTF-8
        text = rng.choice(["zwölf".encode("latin-1"), b"\xc3\x28", b"\xed\xa0\x80", b"\xff"])
        body = b'{"text": "' + text + b'", "texts": ["' + text + b'"]}'
        return "POST", path, {"content": body, "headers": JSON}, {400}
    surrogate = rng.choice(["\\ud800", "\\udfff", "a\\udc00b"])  # valid JSON, not Unicode
    body = f'{{"text": "{surrogate}", "texts": ["{surrogate}"]}}'.encode()
    return "POST", path, {"content": body, "headers": JSON}, {422}


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_a_thousand_malformed_requests(client):
    before = post(client, "/api/translate", {"text": "forty-two"})
    rng = random.Random(20240607)
    seen: dict[int, int] = {}
    for i in range(1000):
        method, path, options, statuses = _malformed(rng)
        response = client.request(method, path, **options)
        assert response.status_code in statuses, (i, method, path, options, response.text)
        assert_error(response, response.status_code)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
    assert set(seen) == {400, 404, 405, 413, 415, 422}
    assert post(client, "/api/translate", {"text": "forty-two"}) == before


# -- concurrency through a real server ---------------------------------------------------------


@pytest.fixture(scope="module")
def live_url(app):
    server, sock = make_server(app, port=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the uvicorn server did not start within 120 s"
    yield url_of(sock)
    server.should_exit = True
    thread.join(timeout=120)
    sock.close()


def test_concurrent_requests_give_sequential_answers(client, live_url):
    expected = {text: post(client, "/api/attention", {"text": text}) for text in SENTENCES}

    def ask(text: str) -> list[dict]:
        with httpx.Client(base_url=live_url, timeout=60) as http:
            answers = []
            for _ in range(3):
                response = http.post("/api/attention", json={"text": text})
                assert response.status_code == 200, response.text
                answers.append(response.json())
            return answers

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = dict(zip(SENTENCES, pool.map(ask, SENTENCES), strict=True))
    for text, answers in results.items():
        for answer in answers:
            for key, value in expected[text].items():
                if key in ("encoder", "decoder", "cross"):
                    close_maps(answer, key, weights(expected[text], key), atol=2e-4)
                else:
                    assert answer[key] == value, (text, key)


def test_a_streamed_oversized_body_on_a_real_server(live_url):
    def chunks():
        for _ in range(13):
            yield b" " * 8192  # 104 KiB, sent chunked, with no Content-Length

    with httpx.Client(base_url=live_url, timeout=30) as http:
        response = http.post("/api/translate", content=chunks(), headers=JSON)
        assert_error(response, 413, "over 64 KiB")
        assert http.get("/api/model").status_code == 200


# -- the command line --------------------------------------------------------------------------


def _next_line(lines: queue.Queue, process: subprocess.Popen, what: str, seconds: float = 120):
    """The next line ``attnlab serve`` prints; a clear failure if none comes in ``seconds``."""
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        process.kill()
        errors = process.stderr.read()
        pytest.fail(f"attnlab serve printed no {what} within {seconds:g} s: {errors}")


@pytest.mark.slow
def test_cli_serve_starts_a_server_and_stops(numbers_model_dir):
    command = [sys.executable, "-m", "attnlab", "serve", "--model", str(numbers_model_dir)]
    process = subprocess.Popen(
        [*command, "--port", "0", "--beam-size", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint(),  # the SIGINT below stops it even if the suite ignores it
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    try:
        first = _next_line(lines, process, "URL")
        assert "http://127.0.0.1:" in first
        url = first[first.index("http://") :].split()[0]
        assert not url.endswith(":0/")
        deadline = time.monotonic() + 120
        while True:
            try:
                info = httpx.get(url + "api/model", timeout=30)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read()
                assert time.monotonic() < deadline, "attnlab serve did not answer in 120 s"
                time.sleep(0.1)
        assert info.status_code == 200 and info.json()["beam_size"] == 2
        if (STATIC_DIR / "index.html").is_file():
            assert httpx.get(url, timeout=30).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: a graceful stop
        try:
            code = process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("attnlab serve did not stop within 120 s of SIGINT")
    assert code == 0, process.stderr.read()
    assert "stopped" in _next_line(lines, process, "'stopped' line")


def test_cli_serve_bad_arguments(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "missing")]) == 2
    assert "attnlab serve: error: --model: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["serve"])
    assert exit_.value.code == 2
    assert "--model" in capsys.readouterr().err


def test_run_prints_the_real_url_and_warns_beyond_loopback(monkeypatch, capsys, tmp_path):
    """run() with the model loading and uvicorn replaced: what it prints, and the port."""
    served = []

    class Server:
        def run(self, sockets):
            served.append(sockets[0].getsockname())

    closed = types.SimpleNamespace(close=lambda wait=None: None)
    app = types.SimpleNamespace(
        state=types.SimpleNamespace(queue=closed, service=closed, limits=Limits())
    )
    monkeypatch.setattr(serve_process, "create_app", lambda model_dir, **options: app)
    monkeypatch.setattr(serve_process, "_server", lambda app, log_level: Server())
    serve_process.run(tmp_path, port=0)
    out, err = capsys.readouterr()
    port = served[0][1]
    assert port != 0 and f"http://127.0.0.1:{port}/" in out and "warning" not in err
    serve_process.run(tmp_path, host="0.0.0.0", port=0)
    out, err = capsys.readouterr()
    assert "warning" in err and "no authentication" in err and "http://0.0.0.0:" in out
    with pytest.raises(ValueError, match="port"):
        serve_process.run(tmp_path, port=70000)


def test_the_server_decodes_as_the_models_recipe_chose(numbers_model_dir):
    """Without a beam, the explorer takes the [eval] of the model's job.json (the numbers
    recipe chose greedy search, alpha 0.6), as translate does; a given beam wins."""
    from attnlab.serve.explorer import Explorer

    with local_client(create_app(numbers_model_dir, device="cpu")) as carried:
        assert carried.get("/api/model").json()["beam_size"] == 1
        answer = post(carried, "/api/translate", {"text": SENTENCES[0]})
    greedy = Translator.load(numbers_model_dir, device="cpu", decoding=DecodingOptions(beam_size=1))
    assert answer["translation"] == greedy.translate([SENTENCES[0]])[0]
    given = DecodingOptions(beam_size=3, alpha=1.0)
    loaded = Translator.load(numbers_model_dir, decoding=given, device="cpu")
    explorer = Explorer(loaded, numbers_model_dir)
    assert explorer.decoding == given and explorer.translator.decoding == given

"""Constraints, prefixes and token scores where users meet them: the Translator, ``attnlab
translate --constraints/--prefix/--scores/--json`` and the explorer's JSON API, on the session's
numbers model. (The search itself is tested on random models in test_constraints.py.)

Checked: every phrase appears in every constrained translation's text; scores equal the
teacher-forced log-probabilities (1e-5; 1e-4 after the CLI's 4 decimals); a line whose request
cannot be met is refused alone, named, and the other lines translate; the CLI's line counts and
flag combinations fail in one line naming the flag.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient

from attnlab.cli import main
from attnlab.decode.options import DecodingOptions
from attnlab.inference.translator import Hypothesis, Refused, Translator
from attnlab.serve import create_app

TEXTS = ["three hundred and twelve", "forty-two", "seven", "nine hundred and one"]


@pytest.fixture(scope="module")
def translator(numbers_model_dir) -> Translator:
    return Translator.load(numbers_model_dir, decoding=DecodingOptions(beam_size=4), device="cpu")


def teacher_forced(t: Translator, text: str, h: Hypothesis) -> torch.Tensor:
    model, source, out = t.model, t.src_tokenizer.encode(text), h.ids
    with torch.no_grad():
        logits = model(torch.tensor([source]), torch.tensor([[model.config.bos_id, *out[:-1]]]))
    log_probs = F.log_softmax(logits[0].float(), dim=-1)
    return log_probs.gather(1, torch.tensor(out)[:, None])[:, 0]


def test_every_phrase_is_in_its_translation(translator):
    plain = translator.translate(TEXTS)
    # Phrases the model does not produce unconstrained: the digits of another number.
    constraints = [["neun"], ["sieben", "drei"], [], ["zwölf"]]
    found = translator.translate(TEXTS, constraints=constraints)
    for text, phrases, out, before in zip(TEXTS, constraints, found, plain, strict=True):
        for phrase in phrases:
            assert phrase in out, (text, phrase, out)
            assert phrase not in before  # the constraint changed the translation
        if not phrases:
            assert out == before  # an unconstrained line is today's translation
    assert translator(TEXTS[1], constraints=["acht"]).count("acht") >= 1


def test_scores_are_the_models_teacher_forced_log_probabilities(translator):
    for n, constraints in ((1, None), (3, [["neun"], [], ["drei"], []])):
        asked = translator.decoding.updated(n_best=n)
        rows = translator.hypotheses(TEXTS, decoding=asked, constraints=constraints)
        for text, row in zip(TEXTS, rows, strict=True):
            assert 1 <= len(row) <= n
            for h in row:
                expected = teacher_forced(translator, text, h)
                got = torch.tensor(h.token_log_probs)
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
                assert h.log_prob == pytest.approx(float(expected.sum()), abs=1e-4)
                assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens)) / 6) ** 0.6)
            scores = [h.score for h in row]
            assert scores == sorted(scores, reverse=True)
    greedy = Translator(translator.model, translator.src_tokenizer, translator.tgt_tokenizer,
                        decoding=DecodingOptions(beam_size=1))  # fmt: skip
    h = greedy.hypotheses(TEXTS[:1])[0][0]
    torch.testing.assert_close(
        torch.tensor(h.token_log_probs), teacher_forced(greedy, TEXTS[0], h), atol=1e-5, rtol=0
    )


def test_a_prefix_starts_the_translation_and_the_model_continues(translator):
    for prefix in ("neun", "dreihundert"):
        out = translator.translate(TEXTS[:2], prefixes=prefix)
        assert all(line.startswith(prefix) for line in out), out
    assert translator(TEXTS[0], prefix="sieben").startswith("sieben")
    # per line, None for no prefix
    out = translator.translate(TEXTS[:2], prefixes=["neun", None])
    assert out[0].startswith("neun") and out[1] == translator.translate(TEXTS[1:2])[0]


def test_a_huge_prefix_is_refused_before_it_is_tokenized(translator, monkeypatch):
    tokenized: list[int] = []
    real = translator.target
    monkeypatch.setattr(
        translator, "target", lambda text: tokenized.append(len(text)) or real(text)
    )
    reports: list[Refused] = []
    huge = "neun" * 1_000_000  # 4 MB: far over what any translation's length limit holds
    out = translator.translate(TEXTS[:2], prefixes=[huge, "neun"], on_refused=reports.append)
    assert out[0] == "" and out[1].startswith("neun")
    assert [r.index for r in reports] == [0] and reports[0].phrase is None
    assert "the prefix has 4,000,000 characters, more than" in reports[0].reason
    assert tokenized == [4]  # only the short prefix reached the tokenizer


def test_an_impossible_line_is_refused_alone_and_named(translator):
    reports: list[Refused] = []
    constraints = [["neun"], ["", "drei"], ["a", "b", "c", "d", "e"], ["zwei " * 40]]
    out = translator.translate(TEXTS, constraints=constraints, on_refused=reports.append)
    assert "neun" in out[0] and out[1:] == ["", "", ""]
    assert [(r.index, r.phrase) for r in reports] == [(1, ""), (2, None), (3, None)]
    assert reports[0].reason == "empty phrase"
    assert "5 phrases, but a beam of 4" in reports[1].reason
    assert "more than the translation's limit" in reports[2].reason
    with pytest.raises(ValueError, match=r"texts\[1\]: phrase '': empty phrase"):
        translator.translate(TEXTS, constraints=constraints)
    with pytest.raises(ValueError, match="constraints: 1 lists for 4 texts"):
        translator.translate(TEXTS, constraints=[["neun"]])
    sampler = Translator(translator.model, translator.src_tokenizer, translator.tgt_tokenizer,
                         decoding=DecodingOptions(sample=True))  # fmt: skip
    with pytest.raises(ValueError, match="not with sample=True"):
        sampler.translate(TEXTS[:1], constraints=[["neun"]])


# -- the CLI -----------------------------------------------------------------------------------


def _translate(numbers_model_dir, capsys, *flags: str, texts=TEXTS) -> tuple[int, str, str]:
    argv = ["translate", "--model", str(numbers_model_dir), "--device", "cpu"]
    argv += ["--beam-size", "4", "--alpha", "0.6"]  # not the numbers recipe's greedy search
    status = main([*argv, *flags, *texts])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_constraints_prefix_and_scores(numbers_model_dir, translator, tmp_path, capsys):
    phrases = tmp_path / "terms.tsv"
    phrases.write_text("neun\nsieben\tdrei\n\nzwölf\n", encoding="utf-8")
    status, out, err = _translate(numbers_model_dir, capsys, "--constraints", str(phrases))
    assert status == 0, err
    lines = out.splitlines()
    expected = translator.translate(
        TEXTS, constraints=[["neun"], ["sieben", "drei"], [], ["zwölf"]]
    )
    assert lines == expected

    status, out, _ = _translate(numbers_model_dir, capsys, "--scores", "--prefix", "neun")
    rows = translator.hypotheses(TEXTS, prefixes="neun")
    for line, row in zip(out.splitlines(), rows, strict=True):
        text, log_prob, score, values = line.split("\t")
        h = row[0]
        assert text == h.text and text.startswith("neun")
        assert float(log_prob) == pytest.approx(h.log_prob, abs=1e-4)
        assert float(score) == pytest.approx(h.score, abs=1e-4)
        assert [float(v) for v in values.split()] == pytest.approx(h.token_log_probs, abs=1e-4)

    status, out, _ = _translate(numbers_model_dir, capsys, "--json", "--n-best", "2")
    objects = [json.loads(line) for line in out.splitlines()]
    best = translator.hypotheses(TEXTS, decoding=translator.decoding.updated(n_best=2))
    for k, (obj, row) in enumerate(zip(objects, best, strict=True)):
        assert obj["line"] == k + 1 and obj["source"] == TEXTS[k]
        assert obj["translation"] == row[0].text
        assert obj["tokens"] == row[0].tokens
        assert obj["token_log_probs"] == pytest.approx(row[0].token_log_probs, abs=1e-6)
        assert [h["text"] for h in obj["n_best"]] == [h.text for h in row]


def test_cli_refuses_one_line_and_translates_the_others(numbers_model_dir, tmp_path, capsys):
    phrases = tmp_path / "terms.tsv"
    phrases.write_text("neun\n\tdrei\n\n\n", encoding="utf-8")
    status, out, err = _translate(numbers_model_dir, capsys, "--constraints", str(phrases))
    assert status == 2
    lines = out.split("\n")
    assert "neun" in lines[0] and lines[1] == "" and lines[2] and lines[3]
    assert err.strip() == (
        "attnlab translate: error: TEXT 2: phrase '': empty phrase; its output line is left empty"
    )
    status, out, _ = _translate(numbers_model_dir, capsys, "--constraints", str(phrases), "--json")
    assert json.loads(out.splitlines()[1]) == {
        "line": 2, "source": TEXTS[1], "translation": "", "refused": True
    }  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "lines", "message"),
    [
        ([], "neun\n", "--constraints: {path} has 1 lines, but TEXT has 4"),
        (
            ["--sample"],
            "neun\n" * 4,
            "--constraints: lexically constrained decoding is a beam search",
        ),
        ([], None, "--constraints: {path}: no such file"),
    ],
)
def test_cli_constraint_errors_are_one_line(numbers_model_dir, tmp_path, capsys, flags, lines,
                                            message):  # fmt: skip
    path = tmp_path / "terms.tsv"
    if lines is not None:
        path.write_text(lines, encoding="utf-8")
    status, out, err = _translate(numbers_model_dir, capsys, "--constraints", str(path), *flags)
    assert status == 2 and out == ""
    assert err.startswith("attnlab translate: error: " + message.format(path=path)), err
    assert len(err.strip().splitlines()) == 1


def test_cli_constraints_follow_standard_input(numbers_model_dir, tmp_path, capsys, monkeypatch):
    import io

    path = tmp_path / "terms.tsv"
    path.write_text("neun\n", encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("seven\nforty-two\n"))
    status, out, err = _translate(numbers_model_dir, capsys, "--constraints", str(path), texts=[])
    assert status == 2 and "ends after 1 lines, but the input goes on" in err
    assert out == ""  # found at the chunk's start (--batch-lines), before its translation


# -- the explorer's API ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(numbers_model_dir):
    app = create_app(
        numbers_model_dir,
        decoding=DecodingOptions.for_model(numbers_model_dir, beam_size=4),
        device="cpu",
    )
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def test_api_constraints_prefix_and_scores(client, translator):
    body = {"text": TEXTS[0], "constraints": ["neun"], "prefix": "drei"}
    answer = client.post("/api/translate", json=body).json()
    assert answer["translation"].startswith("drei") and "neun" in answer["translation"]
    assert answer["constraints"] == ["neun"]
    h = translator.hypotheses([TEXTS[0]], constraints=[["neun"]], prefixes="drei")[0][0]
    assert answer["translation"] == h.text and answer["output_tokens"] == h.tokens
    assert answer["token_log_probs"] == pytest.approx(h.token_log_probs, abs=1e-5)
    assert answer["log_prob"] == pytest.approx(h.log_prob, abs=1e-4)
    assert answer["score"] == pytest.approx(h.score, abs=1e-4)
    attention = client.post("/api/attention", json=body).json()
    assert attention["translation"] == answer["translation"]
    assert attention["token_log_probs"] == answer["token_log_probs"]
    # a teacher-forced target is scored as it is
    forced = client.post("/api/attention", json={"text": TEXTS[0], "target": "neun"}).json()
    assert len(forced["token_log_probs"]) == len(forced["output_tokens"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": "seven", "constraints": ["  "]}, "constraints[0]: empty"),
        ({"text": "seven", "constraints": ["a", "b"], "beam_size": 1}, "constraints: 2 phrases"),
        ({"text": "seven", "prefix": "neun " * 60}, "prefix: the prefix needs up to"),
        ({"text": "seven", "constraints": "neun"}, "constraints"),
    ],
)
def test_api_refuses_what_cannot_be_met(client, body, message):
    for route in ("/api/translate", "/api/attention"):
        response = client.post(route, json=body)
        assert response.status_code == 422, (route, response.text)
        assert message in response.json()["error"]


def test_api_a_phrase_given_twice_is_met_once(client):
    """Found by the fuzzer: a phrase given twice made the search end with nothing (a 500, then
    a 422); one occurrence meets both copies."""
    body = {"text": "Sö", "constraints": ["Sö", "Sö"], "prefix": "learned", "beam_size": 7}
    for route in ("/api/translate", "/api/attention"):
        response = client.post(route, json=body)
        assert response.status_code == 200, (route, response.text)
        translation = response.json()["translation"]
        assert translation.startswith("learned") and "Sö" in translation, translation


# -- streams: greedy translations that join between steps ------------------------------------


def test_a_stream_gives_each_text_the_hypotheses_it_gets_alone(numbers_model_dir):
    """Translator.stream (the service's greedy decoding): texts added at different steps, an
    empty one and one over max_len among them, each get what ``hypotheses`` gives that text
    alone: the same text, ids, tokens and EOS flag, scores within 1e-5."""
    t = Translator.load(numbers_model_dir, decoding=DecodingOptions(beam_size=1), device="cpu")
    long_text = " ".join(["seven"] * (t.max_len + 5))  # cut to max_len tokens, as translate does
    batches = [TEXTS[:2], ["", TEXTS[2]], [long_text, TEXTS[3]]]
    stream = t.stream()
    assert stream is not None
    found, step = {}, 0
    cut: list = []
    while batches or stream.rows:
        if batches and step % 3 == 0:
            texts = batches.pop(0)
            keys = [(step, i) for i in range(len(texts))]
            found.update(stream.add(texts, keys, on_too_long=cut.append))
            for key, text in zip(keys, texts, strict=True):
                found.setdefault(key, text)  # not answered yet: remember its text
        found.update(stream.step())
        step += 1
    assert len(cut) == 1
    texts = {(0, 0): TEXTS[0], (0, 1): TEXTS[1], (3, 0): "", (3, 1): TEXTS[2]}
    texts |= {(6, 0): long_text, (6, 1): TEXTS[3]}
    for key, text in texts.items():
        (alone,) = t.hypotheses([text], on_too_long=lambda report: None)[0] or [None]
        (got,) = found[key] or [None]
        assert (got.text, got.ids, got.tokens, got.finished) == (
            alone.text, alone.ids, alone.tokens, alone.finished
        ), text  # fmt: skip
        assert got.log_prob == pytest.approx(alone.log_prob, abs=1e-5)
        assert got.score == pytest.approx(alone.score, abs=1e-5)
        assert got.token_log_probs == pytest.approx(alone.token_log_probs, abs=1e-5)


def test_only_greedy_search_of_one_model_on_torch_streams(numbers_model_dir):
    t = Translator.load(numbers_model_dir, decoding=DecodingOptions(beam_size=1), device="cpu")
    assert t.stream() is not None
    assert t.stream(DecodingOptions(beam_size=4)) is None
    assert t.stream(DecodingOptions(beam_size=1, sample=True, seed=1)) is None
    both = Translator.load([numbers_model_dir] * 2, decoding=DecodingOptions(beam_size=1))
    assert both.stream() is None  # an ensemble decodes in whole batches

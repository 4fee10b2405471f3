"""Ensemble decoding (attnlab.decode.ensemble): the searches over several models at once.

What is checked: greedy search and beam search over two different models choose what a
reference ensemble written from scratch chooses (every step recomputed by teacher forcing
without a cache, the two models' probabilities averaged in float64), and their reported
log-probabilities are the ensemble's; the fast step and the reference step agree on an
ensemble; an ensemble of one model decodes as the reference with that model alone (every
search, n-best lists, prefixes, constraints, sampling); a model twice translates as the model
alone; language models ensemble too; models that cannot decode together are refused naming the
first that differs. Over two different model directories (the numbers model and a noisy copy):
the Translator, ``attnlab translate`` and ``attnlab evaluate`` give the reference ensemble's
translations and scores, which are neither model's alone; tokenizers that differ are refused.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from _helpers import right_padded, tiny, token_ids
from attnlab import Transformer, TransformerLM, beam_search, greedy_search, sample
from attnlab.decode.ensemble import Ensemble, EnsembleSession, open_session
from attnlab.decode.options import DecodingOptions
from attnlab.decode.search import decode, length_penalty

PAD, BOS, EOS = 0, 1, 2
#: Tiny models decode fastest on one thread, and a busy machine slows them least so.
pytestmark = pytest.mark.usefixtures("one_thread")


def model(seed: int, kind=Transformer, eos_scale: float = 2.5, **overrides):
    """A tiny untrained model whose EOS row is scaled up, so that outputs end at various
    lengths."""
    torch.manual_seed(seed)
    m = kind(tiny(tie_output=False, **overrides)).eval()
    with torch.no_grad():
        m.lm_head.weight[EOS] *= eos_scale
    return m


def sources():
    src = token_ids(3, 7, seed=5)
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    return src


def ensemble_log_probs(models, row: list[int], prefix: list[int]) -> torch.Tensor:
    """The reference: the ensemble's float64 next-token log-probabilities after ``prefix``,
    each model run from scratch on the whole prefix (no cache), probabilities averaged."""
    src = torch.tensor([row])
    tgt = torch.tensor([[BOS, *prefix]])
    with torch.no_grad():
        each = [F.log_softmax(m(src, tgt)[0, -1].double(), dim=-1) for m in models]
    return torch.logsumexp(torch.stack(each), dim=0) - math.log(len(models))


def reference_greedy(
    models, row: list[int], limit: int, prefix: Sequence[int] = ()
) -> tuple[list[int], float]:
    """The reference ensemble's greedy output for the source ``row`` (at most ``limit`` tokens,
    starting with ``prefix``), and the sum of its chosen tokens' log-probabilities."""
    out: list[int] = list(prefix)
    total = 0.0
    while len(out) < limit:
        log_probs = ensemble_log_probs(models, row, out)
        log_probs[[PAD, BOS]] = -math.inf
        token = int(log_probs.argmax())
        total += float(log_probs[token])
        out.append(token)
        if token == EOS:
            break
    return out, total


def real(row) -> list[int]:
    return [t for t in row.tolist() if t != PAD]


def assert_scored_by_reference(models, src, out, n: int = 1) -> None:
    """Every token of every output of ``out`` (``n`` rows per source of ``src``) carries the
    log-probability the reference ensemble of ``models`` gives it after the tokens before it."""
    for j, (ids, scores) in enumerate(
        zip(out.tolist(keep_eos=True), out.token_scores(), strict=True)
    ):
        row = real(src[j // n])
        assert len(scores) == len(ids)
        for t, token in enumerate(ids):
            want = ensemble_log_probs(models, row, ids[:t])[token]
            assert scores[t] == pytest.approx(float(want), abs=1e-4), (j, t)


@pytest.mark.parametrize("fast", [True, False])
def test_greedy_ensemble_matches_a_reference_written_from_scratch(fast):
    models = [model(1), model(2, eos_scale=2.0)]
    src = sources()
    out = greedy_search(models, src, max_new_tokens=12, fast=fast)
    for i, row in enumerate(src):
        want, total = reference_greedy(models, real(row), 12)
        assert out.tolist(keep_eos=True)[i] == want
        assert float(out.log_probs[i]) == pytest.approx(total, abs=1e-4)
    # It is not simply one of the members' output.
    alone = [greedy_search(m, src, max_new_tokens=12).tolist() for m in models]
    assert out.tolist() not in alone


def test_beam_ensemble_scores_are_the_ensembles_own():
    """Each returned hypothesis's per-token log-probabilities are the reference ensemble's,
    and the best hypothesis scores at least as well as the greedy one (beam 8 covers it)."""
    models = [model(3), model(4, eos_scale=2.0)]
    src = sources()
    out = beam_search(models, src, beam_size=4, alpha=0.6, max_new_tokens=10, n_best=2)
    for j, (ids, scores) in enumerate(
        zip(out.tolist(keep_eos=True), out.token_scores(), strict=True)
    ):
        row = real(src[j // 2])
        if not ids:
            continue
        for t, token in enumerate(ids):
            want = ensemble_log_probs(models, row, ids[:t])[token]
            assert scores[t] == pytest.approx(float(want), abs=1e-4)
        lp = float(length_penalty(len(ids), 0.6))
        assert float(out.scores[j]) == pytest.approx(sum(scores) / lp, abs=1e-4)


def test_fast_and_reference_steps_agree_on_an_ensemble():
    models = [model(5), model(6)]
    src = sources()
    a = beam_search(models, src, beam_size=3, max_new_tokens=9, fast=True)
    b = beam_search(models, src, beam_size=3, max_new_tokens=9, fast=False)
    assert a.tolist() == b.tolist()
    torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)


def test_constraints_prefixes_and_sampling_work_on_an_ensemble():
    """Over two different models: every constrained output holds its phrase, a prefixed one
    starts with its prefix, and a seeded sample draws the same twice, each token scored by the
    reference ensemble."""
    models = [model(11), model(12, eos_scale=2.0)]
    src = sources()
    phrases = [[[30, 31]], [[40]], []]
    out = beam_search(models, src, beam_size=4, max_new_tokens=12, constraints=phrases)
    for ids, want in zip(out.tolist(), phrases, strict=True):
        for phrase in want:
            n = len(phrase)
            assert any(ids[i : i + n] == phrase for i in range(len(ids))), (ids, phrase)
    prefixes = [[50, 51], [], [52]]
    out = greedy_search(models, src, max_new_tokens=8, prefixes=prefixes)
    for ids, prefix in zip(out.tolist(keep_eos=True), prefixes, strict=True):
        assert ids[: len(prefix)] == prefix
    draws = [
        sample(models, src, generator=torch.Generator().manual_seed(3), max_new_tokens=8)
        for _ in range(2)
    ]
    assert draws[0].tolist() == draws[1].tolist()
    for i, (ids, scores) in enumerate(
        zip(draws[0].tolist(keep_eos=True), draws[0].token_scores(), strict=True)
    ):
        row = real(src[i])
        for t, token in enumerate(ids):
            want = ensemble_log_probs(models, row, ids[:t])[token]
            assert scores[t] == pytest.approx(float(want), abs=1e-4)


def test_an_ensemble_of_one_decodes_as_its_model_computed_from_scratch():
    """An ensemble of one model against the reference with that model alone (its own
    probabilities, every step recomputed without a cache): greedy search's outputs and log P,
    every token score of a beam's n-best lists, of a prefixed and of a constrained search, and
    of a seeded sample."""
    m = model(7)
    one = Ensemble([m])
    src = sources()
    out = greedy_search(one, src, max_new_tokens=12)
    for i, row in enumerate(src):
        want, total = reference_greedy([m], real(row), 12)
        assert out.tolist(keep_eos=True)[i] == want
        assert float(out.log_probs[i]) == pytest.approx(total, abs=1e-4)
    out = beam_search(one, src, beam_size=4, alpha=0.6, n_best=3, max_new_tokens=12)
    assert_scored_by_reference([m], src, out, n=3)
    for j, scores in enumerate(out.token_scores()):
        lp = float(length_penalty(len(scores), 0.6)) if scores else 1.0
        assert float(out.scores[j]) == pytest.approx(sum(scores) / lp, abs=1e-4)
    prefixes = [[10], [], [11, 12]]
    out = greedy_search(one, src, max_new_tokens=8, prefixes=prefixes)
    for i, (row, prefix) in enumerate(zip(src, prefixes, strict=True)):
        assert out.tolist(keep_eos=True)[i] == reference_greedy([m], real(row), 8, prefix)[0]
    phrases = [[[20, 21]], [], []]
    out = beam_search(one, src, beam_size=3, max_new_tokens=10, constraints=phrases)
    held = out.tolist()[0]
    assert any(held[i : i + 2] == [20, 21] for i in range(len(held))), held
    assert_scored_by_reference([m], src, out)
    draw = sample(one, src, generator=torch.Generator().manual_seed(0), max_new_tokens=10)
    assert_scored_by_reference([m], src, draw)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_model_twice_decodes_as_the_model_alone(beam):
    m = model(8)
    src = token_ids(6, 9, seed=11)
    options = DecodingOptions(beam_size=beam, alpha=0.6)
    alone = decode(m, src, options, max_new_tokens=15)
    twice = decode([m, m], src, options, max_new_tokens=15)
    assert isinstance(open_session(Ensemble([m, m]), src), EnsembleSession)
    assert twice.tolist() == alone.tolist()
    torch.testing.assert_close(twice.log_probs, alone.log_probs, atol=1e-6, rtol=0)


def test_language_models_ensemble_too():
    lms = [model(9, TransformerLM), model(10, TransformerLM)]
    prompts = [[5, 6, 7], [8, 9]]
    out = greedy_search(lms, prompts, max_new_tokens=6)
    for i, prompt in enumerate(prompts):
        ids: list[int] = []
        for _ in range(int(out.lengths[i])):
            with torch.no_grad():
                each = [
                    F.log_softmax(lm(torch.tensor([prompt + ids]))[0, -1].double(), -1)
                    for lm in lms
                ]
            log_probs = torch.logsumexp(torch.stack(each), 0)
            log_probs[[PAD, BOS]] = -math.inf
            ids.append(int(log_probs.argmax()))
        assert out.tolist(keep_eos=True)[i] == ids


def test_models_that_cannot_decode_together_are_refused_naming_the_first():
    a = model(1)
    with pytest.raises(ValueError, match=r"models\[2\]: a target vocabulary of 500 tokens"):
        Ensemble([a, model(2), model(3, vocab_size=500)])
    with pytest.raises(ValueError, match=r"models\[1\]: eos_id 3, against 2"):
        Ensemble([a, model(2, eos_id=3)])
    with pytest.raises(ValueError, match=r"models\[1\]: a TransformerLM, against a Transformer"):
        Ensemble([a, model(2, TransformerLM)])
    with pytest.raises(TypeError, match="models: expected a non-empty list"):
        Ensemble([])
    with pytest.raises(TypeError, match=r"models\[1\]: expected an attnlab Transformer"):
        Ensemble([a, torch.nn.Linear(2, 2)])


#: Numbers on which the numbers model and its noisy copy translate differently (greedy), and
#: their ensemble differs from both on some.
TEXTS = [
    "twelve",
    "three hundred and four",
    "forty-two",
    "seven",
    "five hundred and sixty-one",
    "eighty",
    "two hundred and nineteen",
    "nine hundred and ninety-nine",
]


@pytest.fixture(scope="module")
def other_model_dir(numbers_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second model sharing the numbers model's tokenizers: its directory copied, every
    weight moved by seeded noise of half its tensor's spread, so that it translates otherwise."""
    from attnlab import load_pretrained

    out = tmp_path_factory.mktemp("other-numbers-model") / "model"
    shutil.copytree(numbers_model_dir, out)
    noisy = load_pretrained(out)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in noisy.parameters():
            if weight.numel() > 1:
                weight.add_(torch.randn(weight.shape, generator=generator) * 0.5 * weight.std())
    noisy.save_pretrained(out)
    return out


def loaded(dirs) -> tuple[list, object, object]:
    """The models of the directories ``dirs``, and the first one's source and target
    tokenizers, read without the Translator."""
    from attnlab import load_pretrained
    from attnlab.data.tokenizer import load_tokenizers

    return [load_pretrained(d) for d in dirs], *load_tokenizers(dirs[0])


def by_hand(dirs, texts, prefix: str = "") -> tuple[list[str], list[float]]:
    """The greedy translations of ``texts`` by the ensemble of the model directories ``dirs``,
    each starting with ``prefix``, and their log P: the reference, written without the
    searches (all texts in one right-padded batch, every model run from scratch on the whole
    output so far at every step, probabilities averaged in float64)."""
    models, src_tokenizer, tgt_tokenizer = loaded(dirs)
    src = right_padded([src_tokenizer.encode(text) for text in texts])
    outs = [tgt_tokenizer.encode(prefix) if prefix else [] for _ in texts]
    totals = [0.0] * len(texts)
    while any(not out or out[-1] != EOS for out in outs):
        assert len(outs[0]) < 30, outs  # far inside the output limit: EOS must come first
        tgt = torch.tensor([[BOS, *out] for out in outs])
        with torch.no_grad():
            each = [F.log_softmax(m(src, tgt)[:, -1].double(), dim=-1) for m in models]
        log_probs = torch.logsumexp(torch.stack(each), dim=0) - math.log(len(models))
        log_probs[:, [PAD, BOS]] = -math.inf
        for i, out in enumerate(outs):
            token = EOS if out and out[-1] == EOS else int(log_probs[i].argmax())
            if not out or out[-1] != EOS:
                totals[i] += float(log_probs[i, token])
            out.append(token)  # a finished output is padded with EOS, read no further
    ends = [out.index(EOS) for out in outs]
    return [tgt_tokenizer.decode(out[:end]) for out, end in zip(outs, ends, strict=True)], totals


def token_log_probs_by_hand(dirs, text: str, ids: list[int]) -> list[float]:
    """Each of the target ``ids``' log-probability under the reference ensemble of ``dirs``
    after the ids before it (one teacher-forced run of each model), the source ``text``
    encoded by the first directory's tokenizer."""
    models, src_tokenizer, _ = loaded(dirs)
    src, tgt = torch.tensor([src_tokenizer.encode(text)]), torch.tensor([[BOS, *ids[:-1]]])
    with torch.no_grad():
        each = [F.log_softmax(m(src, tgt)[0].double(), dim=-1) for m in models]
    log_probs = torch.logsumexp(torch.stack(each), dim=0) - math.log(len(models))
    return log_probs.gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()


def test_the_translator_loads_an_ensemble_of_model_directories(
    numbers_model_dir, other_model_dir, tmp_path
):
    """Two different models: the Translator's greedy translations and their log P are the
    reference ensemble's, which are neither model's alone; every token of its beam search's
    best translations is scored by the reference; a list of one directory translates as that
    model."""
    from attnlab.inference.translator import Translator, load_translator

    a, b = numbers_model_dir, other_model_dir
    greedy = DecodingOptions(beam_size=1)
    ensemble = load_translator([a, b], decoding=greedy)
    assert isinstance(ensemble.model, Ensemble) and len(ensemble.model) == 2
    want, totals = by_hand([a, b], TEXTS)
    found = [row[0] for row in ensemble.hypotheses(TEXTS)]
    assert [h.text for h in found] == want
    assert [h.log_prob for h in found] == pytest.approx(totals, abs=1e-4)
    alone = [load_translator(d, decoding=greedy).translate(TEXTS) for d in (a, b)]
    assert alone == [by_hand([a], TEXTS)[0], by_hand([b], TEXTS)[0]]
    assert any(w not in (x, y) for w, x, y in zip(want, *alone, strict=True)), (want, alone)
    assert load_translator([a], decoding=greedy).translate(TEXTS) == alone[0]
    beam = load_translator([a, b], decoding=DecodingOptions(beam_size=4))
    for text, row in zip(TEXTS[:3], beam.hypotheses(TEXTS[:3]), strict=True):
        h = row[0]
        want_scores = token_log_probs_by_hand([a, b], text, h.ids)
        assert h.token_log_probs == pytest.approx(want_scores, abs=1e-4), (text, h.ids)

    # Another tokenizer, trained on other text: refused, naming the directory that differs.
    from attnlab.data.tokenizer import Tokenizer

    other = tmp_path / "other"
    shutil.copytree(numbers_model_dir, other)
    words = ["one two three four five six seven eight nine ten"] * 20
    Tokenizer.train(words, vocab_size=290).save(other / "tokenizer.json")
    with pytest.raises(ValueError, match=r"model_dir\[1\]: .*other: a different source tokenizer"):
        Translator.load([numbers_model_dir, other])
    with pytest.raises(TypeError, match="model_dir: expected a model directory or a non-empty"):
        Translator.load([])


def test_translate_and_evaluate_take_several_models(
    numbers_model_dir, other_model_dir, tmp_path, capsys
):
    """``--model A --model B`` (two different models): translate prints the reference
    ensemble's greedy translations and log P, not either model's; with a prefix too; its n-best
    lists' token scores are the reference's; evaluate scores the ensemble's translations, on
    files and on the job's split."""
    from attnlab.cli import main
    from attnlab.jobs import evaluate_model

    a, b = str(numbers_model_dir), str(other_model_dir)
    both = ["--model", a, "--model", b]

    def run(*argv: str) -> str:
        assert main(list(argv)) == 0
        return capsys.readouterr().out

    want, totals = by_hand([a, b], TEXTS)
    greedy = run("translate", *both, "--beam-size", "1", "--json", *TEXTS)
    lines = [json.loads(line) for line in greedy.splitlines()]
    assert [line["translation"] for line in lines] == want
    assert [line["log_prob"] for line in lines] == pytest.approx(totals, abs=1e-4)
    for d in (a, b):
        alone = run("translate", "--model", d, "--beam-size", "1", *TEXTS).splitlines()
        assert alone == by_hand([d], TEXTS)[0] and alone != want, d
    prefixed = run("translate", *both, "--beam-size", "1", "--prefix", "drei", *TEXTS[:4])
    assert prefixed.splitlines() == by_hand([a, b], TEXTS[:4], prefix="drei")[0]
    flags = ["--beam-size", "3", "--n-best", "2", "--json"]
    listed = run("translate", *both, *flags, *TEXTS[:2]).splitlines()
    for text, line in zip(TEXTS[:2], listed, strict=True):
        assert len(json.loads(line)["n_best"]) == 2
        for h in json.loads(line)["n_best"]:
            scores = token_log_probs_by_hand([a, b], text, h["ids"])
            assert h["token_log_probs"] == pytest.approx(scores, abs=1e-4), (text, h)

    # evaluate on files whose references are the reference ensemble's translations: all exact.
    (tmp_path / "src.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(want) + "\n", encoding="utf-8")
    files = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]
    scored = json.loads(run("evaluate", *both, *files, "--beam-size", "1", "--json"))
    assert scored["exact_match"] == 1.0 and scored["sentences"] == len(TEXTS)
    for d in (a, b):
        alone = json.loads(run("evaluate", "--model", d, *files, "--beam-size", "1", "--json"))
        assert alone["exact_match"] < 1.0, d
    # On the job's own split: the ensemble's translations, its scores as the CLI prints them.
    result = evaluate_model([a, b], limit=8, device="cpu")
    assert result["beam_size"] == 1  # greedy: the [eval] decoding numbers_model_dir carries
    sources = [e["source"] for e in result["examples"]]
    assert [e["hypothesis"] for e in result["examples"]] == by_hand([a, b], sources)[0]
    printed = json.loads(run("evaluate", *both, "--limit", "8", "--json"))
    assert printed["chrf"] == pytest.approx(result["chrf"]) and printed["sentences"] == 8


def test_serve_answers_as_the_ensemble_of_its_models_and_int8_as_translate_does(
    numbers_model_dir, other_model_dir
):
    """`attnlab serve --model A --model B --api-only` (create_app with both directories):
    /translate answers with the reference ensemble's greedy translations, not either model's,
    one sentence a request and all in one request. With `--quantize int8`, each sentence asked
    alone is what `attnlab translate --quantize int8` gives it (int8 activations share a scale
    over a batch, so only a batch of one is comparable)."""
    from fastapi.testclient import TestClient

    from attnlab.inference.translator import load_translator
    from attnlab.serve import create_app

    a, b = numbers_model_dir, other_model_dir
    want, _ = by_hand([a, b], TEXTS)
    body = {"source": "en", "target": "de"}
    for dirs, quantize in (([a, b], None), (a, "int8")):
        app = create_app(dirs, device="cpu", api_only=True, quantize=quantize)
        assert app.state.service.translator.quantize == quantize
        if quantize:
            translator = load_translator(a, quantize="int8")
            want = [translator.translate([text])[0] for text in TEXTS]
        client = TestClient(app, base_url="http://localhost")
        try:
            for text, expected in zip(TEXTS, want, strict=True):
                answer = client.post("/translate", json={**body, "q": text})
                assert answer.status_code == 200, answer.text
                assert answer.json() == {"translatedText": expected}, text
            if not quantize:
                listed = client.post("/translate", json={**body, "q": TEXTS})
                assert listed.json() == {"translatedText": want}
        finally:
            app.state.service.close(wait=120)
            app.state.queue.close()

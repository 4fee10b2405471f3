"""Ensemble decoding (attnlab.decode.ensemble): the searches over several models at once.

What is checked: greedy search and beam search over two different models choose what a
reference ensemble written from scratch chooses (every step recomputed by teacher forcing
without a cache, the two models' probabilities averaged in float64), and their reported
log-probabilities are the ensemble's; the fast step and the reference step agree on an
ensemble; an ensemble of one model decodes exactly as the model (every search, n-best lists,
prefixes, constraints, sampling); an ensemble of one model twice translates as the model alone;
language models ensemble too; models that cannot decode together are refused naming the first
that differs; the Translator loads an ensemble from model directories and refuses one whose
tokenizers differ.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from _helpers import tiny, token_ids
from attnlab import Transformer, TransformerLM, beam_search, greedy_search, sample
from attnlab.decode.ensemble import Ensemble, EnsembleSession, open_session
from attnlab.decode.options import DecodingOptions
from attnlab.decode.search import decode, length_penalty

PAD, BOS, EOS = 0, 1, 2


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


def reference_greedy(models, row: list[int], limit: int) -> tuple[list[int], float]:
    out: list[int] = []
    total = 0.0
    for _ in range(limit):
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


def test_an_ensemble_of_one_is_the_model_exactly():
    m = model(7)
    one = Ensemble([m])
    src = sources()
    assert isinstance(open_session(one, src), type(open_session(m, src)))
    pairs = [
        (greedy_search(m, src, max_new_tokens=12), greedy_search(one, src, max_new_tokens=12)),
        (
            beam_search(m, src, beam_size=4, n_best=3, max_new_tokens=12),
            beam_search(one, src, beam_size=4, n_best=3, max_new_tokens=12),
        ),
        (
            greedy_search(m, src, max_new_tokens=8, prefixes=[[10], [], [11, 12]]),
            greedy_search(one, src, max_new_tokens=8, prefixes=[[10], [], [11, 12]]),
        ),
        (
            beam_search(m, src, beam_size=3, max_new_tokens=10, constraints=[[[20, 21]], [], []]),
            beam_search(one, src, beam_size=3, max_new_tokens=10, constraints=[[[20, 21]], [], []]),
        ),
        (
            sample(m, src, generator=torch.Generator().manual_seed(0), max_new_tokens=10),
            sample(one, src, generator=torch.Generator().manual_seed(0), max_new_tokens=10),
        ),
    ]
    for alone, together in pairs:
        assert together.tolist() == alone.tolist()
        assert torch.equal(together.log_probs, alone.log_probs)
        assert torch.equal(together.scores, alone.scores)


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


def test_the_translator_loads_an_ensemble_of_model_directories(numbers_model_dir, tmp_path):
    from attnlab.inference.translator import Translator, load_translator

    texts = ["twelve", "three hundred and four", "forty-two"]
    alone = load_translator(numbers_model_dir, decoding=DecodingOptions(beam_size=4))
    twice = load_translator(
        [numbers_model_dir, numbers_model_dir], decoding=DecodingOptions(beam_size=4)
    )
    once = load_translator([numbers_model_dir], decoding=DecodingOptions(beam_size=4))
    assert isinstance(twice.model, Ensemble) and len(twice.model) == 2
    assert twice.translate(texts) == alone.translate(texts) == once.translate(texts)
    n_alone, n_twice = alone.n_best(texts, 3), twice.n_best(texts, 3)
    assert [[t for _, t in row] for row in n_twice] == [[t for _, t in row] for row in n_alone]

    # Another tokenizer, trained on other text: refused, naming the directory that differs.
    import shutil

    from attnlab.data.tokenizer import Tokenizer

    other = tmp_path / "other"
    shutil.copytree(numbers_model_dir, other)
    words = ["one two three four five six seven eight nine ten"] * 20
    Tokenizer.train(words, vocab_size=290).save(other / "tokenizer.json")
    with pytest.raises(ValueError, match=r"model_dir\[1\]: .*other: a different source tokenizer"):
        Translator.load([numbers_model_dir, other])
    with pytest.raises(TypeError, match="model_dir: expected a model directory or a non-empty"):
        Translator.load([])


def test_translate_and_evaluate_take_several_models(numbers_model_dir, capsys):
    """``--model A --model A``: the same lines as ``--model A``, with n-best lists, scores, a
    prefix and constraints; evaluate scores the ensemble."""
    from attnlab.cli import main

    d = str(numbers_model_dir)
    texts = ["twelve", "three hundred and four"]
    for flags in (
        ["--scores"],
        ["--beam-size", "3", "--n-best", "2", "--scores"],
        ["--prefix", "drei"],
    ):
        outputs = []
        for models in (["--model", d], ["--model", d, "--model", d]):
            assert main(["translate", *models, *flags, *texts]) == 0
            outputs.append(capsys.readouterr().out)
        assert outputs[0] == outputs[1], flags
        assert outputs[0].strip()
    assert main(["evaluate", "--model", d, "--model", d, "--limit", "8", "--json"]) == 0
    import json

    both = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--model", d, "--limit", "8", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert both["chrf"] == pytest.approx(alone["chrf"]) and both["sentences"] == 8

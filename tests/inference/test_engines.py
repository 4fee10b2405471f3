"""The CTranslate2 engine behind the Translator (:mod:`attnlab.inference.engines`): the same
answers as the torch engine where both decode alike (greedy search token for token, with each
row's own length limit, a prefix, a limit hit; beam search ranked by the same length penalty),
the model converted once into the cache, and what CTranslate2 cannot do refused in one line
before any work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from _helpers import tiny
from attnlab import Transformer
from attnlab.data.tokenizer import Tokenizer
from attnlab.decode.options import DecodingOptions
from attnlab.inference import engines
from attnlab.inference.translator import Translator

TEXTS = ["seven", "three hundred and forty-two", "nine hundred and ninety-nine", "twelve", "zero"]
GREEDY = DecodingOptions(beam_size=1)
LOG_PROB_TOLERANCE = 1e-4  # float32, two engines' kernels


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _same(ours, theirs) -> None:
    """Hypotheses of the two engines: the same tokens, ends and log-probabilities."""
    for a, b in zip(ours, theirs, strict=True):
        assert [h.ids for h in a] == [h.ids for h in b]
        assert [h.text for h in a] == [h.text for h in b]
        assert [h.finished for h in a] == [h.finished for h in b]
        for x, y in zip(a, b, strict=True):
            gap = max(
                (abs(p - q) for p, q in zip(x.token_log_probs, y.token_log_probs, strict=True)),
                default=0,
            )
            assert gap < LOG_PROB_TOLERANCE and len(x.token_log_probs) == len(y.token_log_probs)
            assert abs(x.log_prob - y.log_prob) < 1e-3


# -- refused before any work -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"models": 2}, "an ensemble"),
        ({"constraints": True}, "constraints"),
        ({"quantize": "float16"}, "quantize"),
    ],
)
def test_what_ctranslate2_cannot_do_is_refused_in_one_line(given, named):
    with pytest.raises(ValueError, match=rf"^engine ctranslate2: {named}") as error:
        engines.check_engine("ctranslate2", **given)
    assert "\n" not in str(error.value)
    assert engines.check_engine("torch", **given) == "torch"  # the torch engine does them


def test_an_engine_is_checked_before_anything_is_loaded(tmp_path):
    missing = [tmp_path / "a", tmp_path / "b"]  # never read: the ensemble is refused first
    with pytest.raises(ValueError, match=r"^engine ctranslate2: an ensemble"):
        Translator.load(missing, engine="ctranslate2")
    with pytest.raises(ValueError, match=r"^engine: expected one of torch, ctranslate2"):
        Translator.load(missing[0], engine="onnx")


def test_a_missing_package_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails
    with pytest.raises(ImportError) as error:
        engines.check_engine("ctranslate2")
    assert str(error.value) == (
        "engine ctranslate2: the ctranslate2 package is not installed; "
        "pip install 'attnlab[ctranslate2]'"
    )


# -- a random model: its outputs run to their length limits -------------------------------------


@pytest.fixture(scope="module")
def random_model() -> tuple[Transformer, Tokenizer]:
    pytest.importorskip("ctranslate2")
    tokenizer = Tokenizer.train([f"{t} {u}" for t in TEXTS for u in TEXTS], vocab_size=300)
    torch.manual_seed(0)
    model = Transformer(tiny(vocab_size=tokenizer.vocab_size)).eval()
    return model, tokenizer


def test_greedy_rows_each_to_their_own_limit(random_model):
    """A batch of sources of different lengths, each output limited to its own source + 50:
    CTranslate2 decodes the batch to the longest limit and cuts each row to its own."""
    model, tokenizer = random_model
    texts = ["zero", "seven twelve zero", " ".join(TEXTS)]
    torch_engine = Translator(model, tokenizer, tokenizer, decoding=GREEDY)
    ct2 = Translator(model, tokenizer, tokenizer, decoding=GREEDY, engine="ctranslate2")
    ours, theirs = torch_engine.hypotheses(texts), ct2.hypotheses(texts)
    _same(ours, theirs)
    limits = [len(tokenizer.encode(t)) + 50 for t in texts]
    assert len(set(limits)) == 3 and max(limits) <= model.config.max_len
    cut = [
        len(h[0].ids) == limit and not h[0].finished
        for h, limit in zip(theirs, limits, strict=True)
    ]
    assert sum(cut) >= 2  # a random model rarely ends: most rows stop at their own limit


class _Counting:
    """A ``ctranslate2.Translator`` that records the names of the methods called on it."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str):
        self.calls.append(name)
        return getattr(self.inner, name)


def _texts_alone(
    ct2: Translator, texts: list[str], monkeypatch, decodings: tuple[DecodingOptions, ...]
) -> tuple[list, list, list]:
    """``ct2``'s hypotheses scored and with ``scored=False`` (what ``translate`` and the
    service ask) with each of ``decodings``, and the CTranslate2 methods the second used."""
    scored, alone, calls = [], [], []
    for decoding in decodings:
        scored += ct2.hypotheses(texts, decoding=decoding)
        assert ct2.ct2 is not None
        counting = _Counting(ct2.ct2.translator)
        monkeypatch.setattr(ct2.ct2, "translator", counting)
        alone += ct2.hypotheses(texts, decoding=decoding, scored=False)
        monkeypatch.undo()
        calls += counting.calls
    for ours, theirs in zip(scored, alone, strict=True):
        assert [h.ids for h in ours] == [h.ids for h in theirs]
    return scored, alone, calls


def test_texts_alone_of_outputs_cut_to_their_limit_are_scored(random_model, monkeypatch):
    """A random model's greedy outputs run to their limits, and CTranslate2's own score is of
    the longer output it decoded before the cut: such a batch is scored (``score_batch``)."""
    model, tokenizer = random_model
    ct2 = Translator(model, tokenizer, tokenizer, decoding=GREEDY, engine="ctranslate2")
    texts = ["zero", "seven twelve zero"]
    scored, alone, calls = _texts_alone(ct2, texts, monkeypatch, (GREEDY,))
    assert "score_batch" in calls
    assert [[h.log_prob for h in row] for row in scored] == [
        [h.log_prob for h in row] for row in alone
    ]


@pytest.mark.slow
def test_texts_alone_skip_the_second_pass(both, monkeypatch):
    """Outputs that end: no ``score_batch``, each row's log P and score CTranslate2's own (it
    leaves the blocked pad and BOS out of its softmax: at least the model's, and close)."""
    _, ct2 = both
    beam = DecodingOptions(beam_size=3, alpha=0.6, n_best=2)
    scored, alone, calls = _texts_alone(ct2, TEXTS, monkeypatch, (GREEDY, beam))
    assert calls and set(calls) == {"translate_batch"}  # no second pass
    for ours, theirs in zip(scored, alone, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert b.token_log_probs == [] and a.token_log_probs
            assert a.log_prob - 1e-4 <= b.log_prob <= 0 and b.log_prob - a.log_prob < 0.05
    assert ct2.translate(TEXTS) == [h[0].text for h in ct2.hypotheses(TEXTS)]


def test_the_conversion_is_made_once_and_whole(random_model, cache, monkeypatch):
    import attnlab.formats.ctranslate2 as exporter

    model, tokenizer = random_model
    made: list[Path] = []
    export = exporter.to_ctranslate2
    monkeypatch.setattr(
        exporter, "to_ctranslate2", lambda *a, **k: made.append(a[2]) or export(*a, **k)
    )

    def broken(*args, **kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as patch:  # a conversion cut short leaves nothing to take
        patch.setattr(exporter, "_readme", broken)
        with pytest.raises(RuntimeError, match="killed"):
            engines.CTranslate2Engine(model, tokenizer, tokenizer)
    assert not list((cache / "shards" / "ctranslate2").iterdir())
    first = engines.CTranslate2Engine(model, tokenizer, tokenizer)
    before = (first.path / "model.bin").stat()
    second = engines.CTranslate2Engine(model, tokenizer, tokenizer)
    after = (second.path / "model.bin").stat()
    assert second.path == first.path and len(made) == 2  # the broken one, then one
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    int8 = engines.CTranslate2Engine(model, tokenizer, tokenizer, quantize="int8")
    assert int8.path != first.path and int8.compute_type == "int8"  # keyed by the weight type
    changed = Transformer(model.config).eval()  # other weights: another entry
    assert engines.CTranslate2Engine(changed, tokenizer, tokenizer).path != first.path


# -- the trained numbers model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def both(numbers_model_dir, tmp_path_factory) -> tuple[Translator, Translator]:
    pytest.importorskip("ctranslate2")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNLAB_CACHE", str(tmp_path_factory.mktemp("cache")))
        ct2 = Translator.load(numbers_model_dir, device="cpu", engine="ctranslate2")
    return Translator.load(numbers_model_dir, device="cpu"), ct2


@pytest.mark.slow
def test_greedy_is_the_torch_engines_token_for_token(both):
    torch_engine, ct2 = both
    _same(torch_engine.hypotheses(TEXTS, decoding=GREEDY), ct2.hypotheses(TEXTS, decoding=GREEDY))
    capped = GREEDY.updated(max_new_tokens=4)  # every row hits the limit
    found = ct2.hypotheses(TEXTS, decoding=capped)
    _same(torch_engine.hypotheses(TEXTS, decoding=capped), found)
    assert all(len(h[0].ids) == 4 and not h[0].finished for h in found)
    prefixed = {"decoding": GREEDY, "prefixes": "sieben"}
    found = ct2.hypotheses(TEXTS, **prefixed)
    _same(torch_engine.hypotheses(TEXTS, **prefixed), found)
    assert all(h[0].text.startswith("sieben") for h in found)


@pytest.mark.slow
def test_a_prefix_counts_in_log_p_and_the_ranking(both):
    """With a prefix, CTranslate2's own scores leave the forced tokens out; the engine adds
    them back, so the beam's ranking by attnlab's length penalty and ``log P`` are the torch
    engine's: to float rounding from the second pass, and to CTranslate2's own decoding
    (whose distribution leaves out the tokens never generated) without it."""
    torch_engine, ct2 = both
    prefixed = {"decoding": DecodingOptions(beam_size=4, alpha=1.0), "prefixes": "drei"}
    ours = torch_engine.hypotheses(TEXTS, **prefixed)
    for scored, tolerance in ((True, 1e-3), (False, 0.05)):
        theirs = ct2.hypotheses(TEXTS, **prefixed, scored=scored)
        for a, b in zip(ours, theirs, strict=True):
            assert [h.ids for h in a] == [h.ids for h in b]
            assert a[0].log_prob == pytest.approx(b[0].log_prob, abs=tolerance)
            assert a[0].score == pytest.approx(b[0].score, abs=tolerance)


@pytest.mark.slow
def test_beam_search_ranks_as_the_torch_engine(both):
    """Both engines rank a beam by attnlab's ``log P / ((5 + |Y|) / 6) ** alpha``: the same
    n-best lists, best first (but for near-ties), with and without a length penalty, and the
    ctranslate2 engine's scores are that, not CTranslate2's ``log P / |Y| ** lp``."""
    torch_engine, ct2 = both
    for alpha in (0.0, 0.6, 1.0):
        options = DecodingOptions(beam_size=4, alpha=alpha, n_best=3)
        ours = torch_engine.hypotheses(TEXTS, decoding=options)
        theirs = ct2.hypotheses(TEXTS, decoding=options)
        for a, b in zip(ours, theirs, strict=True):
            assert [h.score for h in b] == sorted((h.score for h in b), reverse=True)
            for x, y in zip(a, b, strict=True):
                assert x.ids == y.ids or abs(x.score - y.score) < 1e-3, (alpha, x.text, y.text)
                lp = ((5 + len(y.ids)) / 6) ** alpha
                assert y.score == pytest.approx(y.log_prob / lp, abs=1e-5)
                assert y.log_prob == pytest.approx(x.log_prob, abs=1e-3) or x.ids != y.ids


@pytest.mark.slow
def test_the_engine_collects_finished_hypotheses_for_attnlabs_ranking(both, monkeypatch):
    """Over 210 short sources of the numbers model at alpha 1, the engine picks the torch
    engine's best output for all but at most 1% of them; CTranslate2 ranking by its own
    penalty (``|Y| ** 1``) picks another for more, and so does the engine once it stops
    collecting at the beam's width (``PATIENCE`` 1)."""
    torch_engine, ct2 = both
    words = "zero one two three seven twelve forty-two hundred thousand and a nine sixty million"
    texts = words.split() + [f"{a} {b}" for a in words.split() for b in words.split()]
    ranked = DecodingOptions(beam_size=4, alpha=1.0)
    ours = torch_engine.translate(texts, decoding=ranked)

    def agree(outputs: list[str]) -> int:
        return sum(a == b for a, b in zip(outputs, ours, strict=True))

    source = [[ct2.ct2.src_tokens[i] for i in ct2.src_tokenizer.encode(t)] for t in texts]
    native = ct2.ct2.translator.translate_batch(
        source, beam_size=4, length_penalty=1.0, min_decoding_length=0, max_input_length=0,
        suppress_sequences=ct2.ct2.banned,
    )  # fmt: skip
    theirs = [
        ct2.tgt_tokenizer.decode([ct2.ct2.tgt_ids[t] for t in r.hypotheses[0]]) for r in native
    ]
    engine = agree(ct2.translate(texts, decoding=ranked))
    monkeypatch.setattr(engines, "PATIENCE", 1.0)
    at_the_width = agree(ct2.translate(texts, decoding=ranked))
    assert engine >= 0.99 * len(texts)
    assert agree(theirs) < engine and at_the_width < engine


@pytest.mark.slow
def test_sampling_with_a_seed(both):
    _, ct2 = both
    drawn = DecodingOptions(sample=True, temperature=2.0, seed=5)
    first = ct2.translate(TEXTS * 2, decoding=drawn)
    assert ct2.translate(TEXTS * 2, decoding=drawn) == first  # a call's own seed: its stream
    assert ct2.translate(TEXTS, decoding=DecodingOptions(sample=True, top_k=1)) == ct2.translate(
        TEXTS, decoding=GREEDY
    )
    with pytest.raises(ValueError, match=r"^engine ctranslate2: constraints"):
        ct2.translate(TEXTS[:1], constraints=[["sieben"]])


# -- attnlab translate --engine -----------------------------------------------------------------


def test_the_flag_offers_the_engines():
    from attnlab.cli._args import ENGINE_CHOICES

    assert ENGINE_CHOICES == engines.ENGINES


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--constraints", "PHRASES"], "--constraints"), (["--model", "MODEL"], "an ensemble")],
)
def test_the_cli_refuses_before_loading(tmp_path, capsys, flags, named):
    from attnlab.cli import main

    (tmp_path / "model").mkdir()  # no model in it: never read
    (tmp_path / "phrases.txt").write_text("sieben\n", encoding="utf-8")
    given = {"PHRASES": str(tmp_path / "phrases.txt"), "MODEL": str(tmp_path / "model")}
    argv = ["translate", "--model", str(tmp_path / "model"), "--engine", "ctranslate2", "seven"]
    assert main(argv + [given.get(f, f) for f in flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--engine ctranslate2: {named}" in err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--engine", "ctranslate2"], "--engine ctranslate2: the explorer page"),
        (["--model", "MODEL"], "2 --model (an ensemble): the explorer page"),
        (["--engine", "ctranslate2", "--model", "MODEL", "--api-only"], "--engine ctranslate2"),
    ],
)
def test_serve_refuses_what_the_page_or_the_engine_cannot_show_before_loading(
    tmp_path, capsys, flags, named
):
    """The page needs one torch model (--api-only lifts that, and an ensemble on ctranslate2
    is then the engine's refusal): exit status 2, one line, before any model is read."""
    from attnlab.cli import main

    (tmp_path / "model").mkdir()  # no model in it: never read
    argv = ["serve", "--model", str(tmp_path / "model"), "--port", "0"]
    assert main(argv + [str(tmp_path / "model") if f == "MODEL" else f for f in flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err


@pytest.mark.slow
def test_translate_with_ctranslate2_is_translate_with_torch(numbers_model_dir, capsys):
    from attnlab.cli import main

    outputs = []
    for engine in ("torch", "ctranslate2"):
        argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "1", *TEXTS]
        assert main([*argv, "--engine", engine]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[1] == outputs[0] and len(outputs[0].splitlines()) == len(TEXTS)

"""DecodingOptions (attnlab.decode.options): the defaults decided once, every field checked,
what a model directory's job.json carries and how given values win; the one reader of
config.json (job.json's: tests/test_rundir.py); the tokenizer protocol both kinds implement."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from _helpers import tiny
from attnlab import Transformer
from attnlab._rundir import JOB_FILE
from attnlab.decode.options import ALPHA, BEAM_SIZE, DecodingOptions
from attnlab.decode.search import beam_search
from attnlab.inference.modeldir import kind_of
from attnlab.inference.translator import Translator
from attnlab.models.saved import read_config_file


def test_the_defaults_are_the_papers_and_every_decoder_shares_them() -> None:
    options = DecodingOptions()
    assert (options.beam_size, options.alpha) == (BEAM_SIZE, ALPHA) == (4, 0.6)
    assert (options.max_new_tokens, options.sample, options.temperature) == (None, False, 1.0)
    assert (options.top_k, options.top_p, options.seed) == (None, None, None)
    defaults = beam_search.__kwdefaults__
    assert defaults is not None
    assert (defaults["beam_size"], defaults["alpha"]) == (BEAM_SIZE, ALPHA)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("beam_size", 0, "beam_size: expected a positive int, got 0"),
        ("beam_size", True, "beam_size: expected a positive int, got True"),
        ("alpha", -0.1, "alpha: expected a finite number >= 0, got -0.1"),
        ("alpha", float("inf"), "alpha: expected a finite number >= 0, got inf"),
        ("max_new_tokens", 0, "max_new_tokens: expected a positive int, got 0"),
        ("sample", 1, "sample: expected a bool, got 1"),
        ("temperature", 0, "temperature: expected a positive number, got 0"),
        ("top_k", 0, "top_k: expected a positive int or None, got 0"),
        ("top_p", 1.5, "top_p: expected a number in (0, 1] or None, got 1.5"),
        ("seed", "1", "seed: expected an int or None, got '1'"),
    ],
)
def test_each_field_is_checked_by_name(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        DecodingOptions(**{field: value})
    with pytest.raises(ValueError, match=f"^{field}: "):
        DecodingOptions().updated(**{field: value})


def test_updated_keeps_a_field_given_none_and_refuses_unknown_names() -> None:
    base = DecodingOptions(beam_size=2, top_k=5)
    assert base.updated(beam_size=None, top_k=None) == base
    assert base.updated(alpha=1, sample=True) == DecodingOptions(2, 1.0, top_k=5, sample=True)
    with pytest.raises(TypeError, match="beam"):
        base.updated(beam=3)


def test_the_output_limit_is_the_source_plus_50_or_max_new_tokens_within_max_len() -> None:
    assert DecodingOptions().output_limit(7, 100) == 57
    assert DecodingOptions().output_limit(70, 100) == 100
    assert DecodingOptions(max_new_tokens=3).output_limit(70, 100) == 3
    assert DecodingOptions(max_new_tokens=300).output_limit(7, 100) == 100


def _job_dir(tmp_path: Path, job: object) -> Path:
    (tmp_path / JOB_FILE).write_text(json.dumps(job), encoding="utf-8")
    return tmp_path


def test_a_model_carries_its_recipes_eval_and_given_values_win(tmp_path: Path) -> None:
    model = _job_dir(tmp_path, {"eval": {"beam_size": 5, "alpha": 1.4, "bleu_sentences": 9}})
    carried, origin = DecodingOptions.carried_by(model)
    assert carried == DecodingOptions(beam_size=5, alpha=1.4)
    assert origin == f"the model's recipe ({model / JOB_FILE} [eval])"
    assert DecodingOptions.for_model(model, beam_size=2) == DecodingOptions(2, 1.4)
    assert DecodingOptions.for_model(model, alpha=None) == carried


@pytest.mark.parametrize(
    "job",
    [None, [], {"eval": "beam"}, {"eval": {}}, {"eval": {"beam_size": True, "alpha": "1"}}],
)
def test_a_model_without_a_usable_eval_decodes_with_the_defaults(tmp_path: Path, job) -> None:
    model = tmp_path if job is None else _job_dir(tmp_path, job)
    assert DecodingOptions.carried_by(model) == (
        DecodingOptions(),
        "the paper's defaults (the model carries no [eval])",
    )
    assert DecodingOptions.from_eval({"alpha": 0}) == DecodingOptions(alpha=0.0)


def _tiny_translator_parts():
    from attnlab.data.tokenizer import Tokenizer

    tok = Tokenizer.train(["one two three", "four five six"] * 20, vocab_size=300)
    return Transformer(tiny(vocab_size=tok.vocab_size)), tok


def test_the_translator_holds_its_options_whole() -> None:
    model, tok = _tiny_translator_parts()
    options = DecodingOptions(beam_size=2, alpha=0.5, max_new_tokens=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the current spelling warns about nothing
        translator = Translator(model, tok, tok, decoding=options)
        assert translator.decoding is options
        assert Translator(model, tok, tok).decoding == DecodingOptions()
    with pytest.raises(TypeError, match=r"^decoding: expected a DecodingOptions"):
        Translator(model, tok, tok, decoding={"beam_size": 2})  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="has no attribute 'beam'"):
        translator.beam  # noqa: B018


def test_the_fields_are_no_keywords_or_attributes_of_the_translator() -> None:
    """Decoding is chosen by ``decoding=DecodingOptions(...)`` and read off
    ``translator.decoding`` alone: a field's name as a keyword is a TypeError, as an attribute
    an AttributeError."""
    model, tok = _tiny_translator_parts()
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'beam_size'"):
        Translator(model, tok, tok, beam_size=2)  # type: ignore[call-arg]
    translator = Translator(model, tok, tok, decoding=DecodingOptions(beam_size=2))
    with pytest.raises(AttributeError, match="has no attribute 'beam_size'"):
        translator.beam_size  # noqa: B018


def test_config_json_has_one_reader_that_kind_of_reads_too(tmp_path: Path) -> None:
    assert kind_of(tmp_path) == "unknown"
    with pytest.raises(FileNotFoundError, match=r"config\.json: missing"):
        read_config_file(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "vit", "d_model": 8}', "utf-8")
    assert read_config_file(tmp_path) == {"model_type": "vit", "d_model": 8}
    assert kind_of(tmp_path) == "vit"
    (tmp_path / "config.json").write_text("[]", "utf-8")
    assert kind_of(tmp_path) == "unknown"


def test_both_kinds_of_tokenizer_state_their_framing_through_the_protocol() -> None:
    from attnlab.data.sentencepiece import SentencePieceTokenizer
    from attnlab.data.tokenizer import Tokenizer
    from attnlab.data.tokens import TokenizerProtocol, without_framing_eos

    members = [n for n in dir(TokenizerProtocol) if not n.startswith("_")]
    for kind in (Tokenizer, SentencePieceTokenizer):
        assert [n for n in members if not hasattr(kind, n)] == [], kind
    bpe = Tokenizer.train(["one two three"] * 10, vocab_size=280)
    assert isinstance(bpe, TokenizerProtocol) and bpe.add_eos is False
    ids = bpe.encode("one two")
    assert without_framing_eos(bpe, [*ids, bpe.eos_id]) == [*ids, bpe.eos_id]  # not its frame

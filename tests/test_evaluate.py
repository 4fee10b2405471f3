"""Scoring (sacreBLEU, chrF, exact match) and the job file (TOML) of `attnlab train`."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.evaluate import Scores, perplexity, score
from attnlab.jobs import Job

ROOT = Path(__file__).resolve().parents[1]


# -- scores ---------------------------------------------------------------------------------------


def test_score_matches_sacrebleu_and_counts_exact_matches():
    from sacrebleu.metrics import BLEU, CHRF

    hyps = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest"]
    refs = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Gras.", "Eine Frau liest ein Buch."]
    result = score(hyps, refs)
    assert isinstance(result, Scores)
    assert result.bleu == pytest.approx(BLEU().corpus_score(hyps, [refs]).score)
    assert result.chrf == pytest.approx(CHRF().corpus_score(hyps, [refs]).score)
    assert result.exact_match == pytest.approx(1 / 3)
    assert result.sentences == 3
    assert result.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "chrF" not in result.bleu_signature and result.chrf_signature.startswith("nrefs:1")


def test_perfect_and_empty_hypotheses():
    refs = ["a b c d e", "f g h i j"]
    assert score(refs, refs).bleu == pytest.approx(100.0)
    assert score(refs, refs).exact_match == 1.0
    assert score(["", ""], refs).bleu == 0.0


@pytest.mark.parametrize(
    ("hyps", "refs", "error", "pattern"),
    [
        ([], [], ValueError, r"^hypotheses: empty"),
        (["a"], ["a", "b"], ValueError, r"^hypotheses: 1 lines, but references has 2"),
        (["a", 3], ["a", "b"], TypeError, r"^hypotheses\[1\]: expected a str, got int"),
    ],
)
def test_score_refuses_bad_input(hyps, refs, error, pattern):
    with pytest.raises(error, match=pattern):
        score(hyps, refs)


def test_perplexity():
    assert perplexity(0.0) == 1.0
    assert perplexity(2.0) == pytest.approx(7.389056, rel=1e-6)
    assert perplexity(1e6) == float("inf")


# -- the job file ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["numbers.toml", "multi30k-en-de.toml"])
def test_committed_configs_parse_and_build_a_model_config(name):
    job = Job.from_toml(ROOT / "configs" / name)
    config = job.model_config(job.tokenizer.vocab_size, job.tokenizer.vocab_size)
    config.validate()
    assert config.vocab_size == job.tokenizer.vocab_size
    assert config.share_embeddings == job.tokenizer.joint
    assert Job.from_dict(job.to_dict()) == job


def test_job_errors_name_the_table_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[task]\nname = "numbers"\nlanguage = "en"\n')
    with pytest.raises(ValueError, match=r"bad\.toml: unknown \[task\] fields \['language'\]"):
        Job.from_toml(bad)
    bad.write_text('[tasks]\nname = "numbers"\n')
    with pytest.raises(ValueError, match=r"unknown tables \['tasks'\]"):
        Job.from_toml(bad)
    bad.write_text('[task]\nname = "wmt14"\n')
    with pytest.raises(ValueError, match=r"\[task\] name: expected one of"):
        Job.from_toml(bad)
    bad.write_text("[task\n")
    with pytest.raises(ValueError, match=r"bad\.toml: not valid TOML"):
        Job.from_toml(bad)
    with pytest.raises(FileNotFoundError, match=r"missing\.toml: config file not found"):
        Job.from_toml(tmp_path / "missing.toml")


def test_cli_settings_override_the_file(monkeypatch):
    """--config, then flags, then --set: the job `attnlab train` would run."""
    from attnlab.cli import _build_job, build_parser

    argv = [
        "train", "--config", str(ROOT / "configs" / "numbers.toml"), "--max-steps", "7",
        "--set", "model.d_model=64", "--set", "train.accumulate=2", "--set", "task.high=99",
    ]  # fmt: skip
    job = _build_job(build_parser().parse_args(argv))
    assert job.train["max_steps"] == 7 and job.train["accumulate"] == 2
    assert job.model["d_model"] == 64 and job.task.high == 99
    assert job.task.name == "numbers" and job.tokenizer.vocab_size == 400


def test_cli_set_needs_table_key_value(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--set", "d_model=64"])
    assert "expected TABLE.KEY=VALUE" in capsys.readouterr().err
    assert main(["train", "--set", "models.d_model=64", "--max-steps", "1"]) == 2
    assert "unknown table 'models'" in capsys.readouterr().err


def test_evaluate_needs_a_trained_model_directory(tmp_path, capsys):
    assert main(["evaluate", "--model", str(tmp_path)]) == 2
    assert "job.json: missing" in capsys.readouterr().err

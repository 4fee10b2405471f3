"""Scoring (sacreBLEU, chrF, exact match; which of them is the headline), what `attnlab
evaluate` and `attnlab train` print and write about it, the job file (TOML) of `attnlab train`,
and starting a run over (--overwrite) or refusing to in terms of the command's flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.inference.scores import Headline, Scores, headline, perplexity, score
from attnlab.jobs import Job

ROOT = Path(__file__).resolve().parents[2]


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


def test_short_references_make_exact_match_and_chrf_the_headline():
    """Single number words: corpus BLEU has no 4-grams to count and reads 0 for translations
    that are nearly all right, so it is not the headline."""
    refs = ["zwölf", "dreihundertzwölf", "einundzwanzig", "null", "sieben"]
    hyps = ["zwölf", "dreihundertzwölf", "einundzwanzig", "null", "acht"]
    result = score(hyps, refs)
    assert result.bleu == 0.0 and result.exact_match == pytest.approx(0.8)
    assert result.headline == ("exact_match", "chrf")
    assert result.short_references == 1.0
    assert result.note.startswith("100.0% of the references are shorter than 4 tokens")
    data = result.to_dict()
    assert data["headline"] == ["exact_match", "chrf"] and data["note"] == result.note
    json.dumps(data)


def test_sentences_keep_bleu_and_chrf_as_the_headline():
    refs = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Gras.", "Eine Frau liest ein Buch."]
    result = score(refs, refs)
    assert result.headline == ("bleu", "chrf") and result.note is None
    assert result.short_references == 0.0


@pytest.mark.parametrize(
    ("refs", "metrics", "short"),
    [
        (["a b c"], ("exact_match", "chrf"), 1.0),  # 3 tokens: no 4-gram
        (["a b c d"], ("bleu", "chrf"), 0.0),  # 4 tokens: one 4-gram
        (["Zwölf."], ("exact_match", "chrf"), 1.0),  # 13a splits the full stop: 2 tokens
        (["a b c d e", "a", "a b c d"], ("bleu", "chrf"), 1 / 3),
        (["a b c d e", "a", "b"], ("exact_match", "chrf"), 2 / 3),  # mostly short
        (["a b c d e", "a"], ("bleu", "chrf"), 0.5),  # half is not "mostly"
    ],
)
def test_headline_counts_references_shorter_than_4_tokens(refs, metrics, short):
    lead = headline(refs)
    assert isinstance(lead, Headline)
    assert lead.metrics == metrics and lead.short_references == pytest.approx(short)
    assert (lead.note is None) == (metrics == ("bleu", "chrf"))


def test_headline_refuses_no_references():
    with pytest.raises(ValueError, match=r"^references: empty"):
        headline([])


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
    from attnlab.cli import build_job, build_parser

    argv = [
        "train", "--config", str(ROOT / "configs" / "numbers.toml"), "--max-steps", "7",
        "--set", "model.d_model=64", "--set", "train.accumulate=2", "--set", "task.high=99",
    ]  # fmt: skip
    job = build_job(build_parser().parse_args(argv))
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


# -- what the commands print and write ------------------------------------------------------------


def test_evaluate_json_names_the_headline_on_numbers(numbers_model_dir, capsys):
    argv = ["evaluate", "--model", str(numbers_model_dir), "--json", "--limit", "12"]
    assert main([*argv, "--beam-size", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["headline"] == ["exact_match", "chrf"] and report["short_references"] == 1.0
    assert "shorter than 4 tokens" in report["note"]
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no")
    assert report["sentences"] == 12 and 0.0 <= report["exact_match"] <= 1.0


def test_evaluate_text_and_the_training_summary_lead_with_the_headline(numbers_model_dir, capsys):
    from attnlab.cli.evaluate import print_scores
    from attnlab.jobs import read_job

    argv = ["evaluate", "--model", str(numbers_model_dir), "--limit", "5", "--show", "1"]
    assert main([*argv, "--beam-size", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("test (5 sentences, greedy): exact match ")
    assert "; BLEU " in printed[0]
    assert printed[1].startswith("  note: 100.0% of the references are shorter than 4 tokens")
    assert printed[2].startswith("  BLEU signature: nrefs:1|case:mixed|eff:no|tok:13a")
    # results.json of the session's run holds the same, and `attnlab train` printed it so.
    results = json.loads((numbers_model_dir.parent / "results.json").read_text("utf-8"))
    assert results["headline"] == ["exact_match", "chrf"] and results["note"]
    print_scores(results, read_job(numbers_model_dir).task, beam_size=4)
    summary = capsys.readouterr().out.splitlines()
    n = results["sentences"]
    size = results["beam_size"]  # the results name their decoder; the argument is a fallback
    decoder = "greedy" if size == 1 else f"beam search ({size}, alpha {results['alpha']:g})"
    assert summary[0].startswith(f"test ({n} sentences, {decoder}): exact match ")
    assert summary[1].startswith("  note: ")


def test_scores_of_sentences_print_bleu_first():
    from attnlab.tasks.translation import _scores as _translation_scores

    refs = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Gras."]
    line = _translation_scores({**score(refs, refs).to_dict()})
    assert line == "BLEU 100.00, chrF 100.00; exact match 100.0%"
    legacy = {"bleu": 1.0, "chrf": 2.0, "exact_match": 0.5}  # results.json of an older run
    assert _translation_scores(legacy) == "BLEU 1.00, chrF 2.00; exact match 50.0%"


@pytest.mark.parametrize(
    ("training", "printed"),
    [
        ({"stop_reason": "max_steps", "steps": 3000}, ""),
        (
            {"stop_reason": "max_minutes", "steps": 812},
            "note: training stopped at the time cap (--max-minutes 15.0) after 812 steps, "
            "before its max_steps = 3000; on a faster or less busy machine",
        ),
    ],
)
def test_the_time_cap_says_so_when_it_ends_training(training, printed, capsys):
    from attnlab.cli.train import _print_time_cap

    _print_time_cap(training, {"max_steps": 3000, "max_minutes": 15.0})
    out = capsys.readouterr().out
    assert out.startswith(printed) and bool(out) == bool(printed)


def _fake_run(out: Path) -> None:
    """A run directory as an interrupted `attnlab train` leaves it: one complete checkpoint."""
    from attnlab.train.checkpoint import CHECKPOINT_FILES

    step = out / "checkpoints" / "step-00000002"
    step.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        (step / name).write_text("{}")
    (out / "job.json").write_text("{}")


TINY = [
    "--config", "configs/numbers.toml", "--no-progress", "--max-steps", "2", "--warmup", "1",
    "--eval-every", "2", "--checkpoint-every", "2", "--set", "task.high=99",
    "--set", "task.valid_size=10", "--set", "task.test_size=10", "--set", "model.d_model=32",
    "--set", "model.d_ff=64", "--set", "model.num_encoder_layers=1",
    "--set", "model.num_decoder_layers=1", "--set", "train.average_last=1",
    "--set", "eval.bleu_sentences=5", "--set", "eval.beam_size=1",
    "--set", "tokenizer.vocab_size=300",
]  # fmt: skip


def test_a_second_run_into_the_same_out_names_the_flags(tmp_path, capsys):
    out = tmp_path / "run"
    _fake_run(out)
    assert main(["train", *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "already holds a run (checkpoint step-00000002); pass --resume to continue it, " in err
    assert "--overwrite to start it over" in err and "resume=True" not in err
    assert main(["train", *TINY, "--out", str(out), "--resume", "--overwrite"]) == 2
    assert "--resume, --overwrite: choose one" in capsys.readouterr().err


def test_overwrite_starts_an_earlier_run_over(tmp_path, capsys):
    out = tmp_path / "run"
    _fake_run(out)
    (out / "notes.txt").write_text("part of the earlier run's directory")
    assert main(["train", *TINY, "--out", str(out), "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert f"--overwrite: removed the earlier run in {out}/" in printed
    assert not (out / "notes.txt").exists()
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-00000002"]
    results = json.loads((out / "results.json").read_text("utf-8"))
    assert results["training"]["steps"] == 2 and results["training"]["stop_reason"] == "max_steps"


def test_overwrite_starts_over_a_run_killed_before_its_first_checkpoint(tmp_path, capsys):
    """What a run killed early leaves (its job and its log, no checkpoint) is a run: --overwrite
    removes it; one of the two alone is not enough to remove a directory."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "job.json").write_text("{}")
    assert main(["train", *TINY, "--out", str(out), "--overwrite"]) == 2
    assert "no checkpoints or results.json or job.json and train.log" in capsys.readouterr().err
    (out / "train.log").write_text("step 25/6600 (0%) loss 9.202\n")
    assert main(["train", *TINY, "--out", str(out), "--overwrite"]) == 0
    assert f"--overwrite: removed the earlier run in {out}/" in capsys.readouterr().out
    assert (out / "results.json").is_file() and "9.202" not in (out / "train.log").read_text()


def test_overwrite_leaves_a_directory_that_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("not a run")
    assert main(["train", *TINY, "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "--overwrite: " in err and "does not look like an attnlab run" in err
    assert (out / "thesis.tex").read_text() == "not a run"


def test_the_same_seed_trains_the_same_model(tmp_path):
    """`make demo` is bounded by steps so that its result does not depend on the machine's
    speed: two runs with the same seed must give the same weights, bit for bit."""
    from safetensors.torch import load_file

    weights = []
    for name in ("first", "second"):
        out = tmp_path / name
        assert main(["train", *TINY, "--max-steps", "4", "--out", str(out)]) == 0
        weights.append(load_file(out / "model" / "model.safetensors"))
    first, second = weights
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_tokenized_bleu_is_bleu_of_lowercased_moses_tokens():
    """The literature's variant (issue 28): lowercase, Moses-tokenise, BLEU over those tokens
    with no further tokenisation and no smoothing; checked against that pipeline written out."""
    from sacrebleu.metrics import BLEU

    from attnlab.inference.scores import tokenized_bleu

    hyps = ["Ein Hund läuft, und springt.", "Zwei Männer sitzen auf einer Bank."]
    refs = ["Ein hund läuft, und springt!", "Zwei Männer sitzen auf der Bank."]
    got, signature = tokenized_bleu(hyps, refs, "de")
    by_hand_h = ["ein hund läuft , und springt .", "zwei männer sitzen auf einer bank ."]
    by_hand_r = ["ein hund läuft , und springt !", "zwei männer sitzen auf der bank ."]
    bleu = BLEU(tokenize="none", smooth_method="none")
    assert got == pytest.approx(bleu.corpus_score(by_hand_h, [by_hand_r]).score)
    assert "lowercase|moses:de|escape:no" in signature and "tok:none" in signature
    # Casing and punctuation spacing: 100 here, not for the cased, detokenised headline.
    same = tokenized_bleu(["Zwei Männer sitzen auf der BANK."], [refs[1]], "de")[0]
    assert same == pytest.approx(100.0)
    assert score(["Zwei Männer sitzen auf der BANK."], [refs[1]]).bleu < 100
    both = score(hyps, refs, tokenized_lang="de")
    assert both.bleu_tokenized == pytest.approx(got)
    assert both.bleu_tokenized_signature == signature
    assert score(hyps, refs).bleu_tokenized is None

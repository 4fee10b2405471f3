"""tools/choose_decoding.py, which chose the Multi30K recipe's decoding on validation data:
every (model, beam, alpha) row is the library's own evaluation of that setting, the table is
ordered by mean BLEU, and a directory that is not a run is refused in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from attnlab.decode.options import DecodingOptions
from attnlab.jobs import evaluate_model

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("choose_decoding", ROOT / "tools/choose_decoding.py")
assert _spec is not None and _spec.loader is not None
choose_decoding = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(choose_decoding)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rows_are_the_librarys_evaluations_and_the_best_comes_first(
    numbers_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, out = numbers_model_dir.parent, tmp_path / "decoding.json"
    argv = [str(run), "--beams", "1", "2", "--alphas", "0", "1.5", "--models", "model"]
    assert choose_decoding.main([*argv, "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["split"] == "valid" and len(report["rows"]) == 4
    for row in report["rows"]:
        expected = evaluate_model(
            numbers_model_dir,
            split="valid",
            decoding=DecodingOptions(beam_size=row["beam_size"], alpha=row["alpha"]),
        )
        assert (row["bleu"], row["chrf"]) == (expected["bleu"], expected["chrf"]), row
    means = [s["mean_bleu"] for s in report["settings"]]
    assert means == sorted(means, reverse=True) and report["settings"][0]["runs"] == 1
    assert "valid: mean BLEU over 1 run(s), best first" in capsys.readouterr().out


@pytest.mark.slow  # converts the model for CTranslate2 and decodes the split four times
def test_the_ctranslate2_engine_scores_each_alpha_on_that_engine(
    numbers_model_dir: Path, tmp_path: Path
) -> None:
    """With --engine ctranslate2 each row is evaluate_model on that engine with that alpha."""
    run, out = numbers_model_dir.parent, tmp_path / "decoding.json"
    argv = [str(run), "--beams", "2", "--alphas", "0", "1.5", "--models", "model"]
    assert choose_decoding.main([*argv, "--engine", "ctranslate2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text(encoding="utf-8"))["rows"]
    assert [(r["engine"], r["alpha"]) for r in rows] == [("ctranslate2", 0.0), ("ctranslate2", 1.5)]
    for row in rows:
        decoding = DecodingOptions(beam_size=2, alpha=row["alpha"])
        expected = evaluate_model(
            numbers_model_dir, split="valid", decoding=decoding, engine="ctranslate2"
        )
        assert (row["bleu"], row["chrf"]) == (expected["bleu"], expected["chrf"]), row


def test_a_directory_that_is_not_a_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        choose_decoding.main([str(tmp_path)])
    assert exit_.value.code == 2
    assert f"runs: {tmp_path} holds no model/job.json" in capsys.readouterr().err


def test_models_are_names_inside_a_run(
    numbers_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = numbers_model_dir.parent
    for bad in ("../model", "a/b", ".."):
        with pytest.raises(SystemExit) as exit_:
            choose_decoding.main([str(run), "--models", bad])
        assert exit_.value.code == 2
        assert f"--models: expected names of directories inside a run, got {bad!r}" in (
            capsys.readouterr().err
        )

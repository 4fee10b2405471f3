"""tools/engine_parity.py, which chose the Multi30K recipe's ct2_length_penalty on validation and
measured both engines' BLEU (benchmarks/results/engine_multi30k.json): the choice is the best
validation row, every score is the library's own evaluation on that engine, --record writes the
choice where `attnlab translate --engine ctranslate2` reads it, and a greedy recipe is refused."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from attnlab.decode.options import DecodingOptions
from attnlab.jobs import evaluate_model

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("engine_parity", ROOT / "tools/engine_parity.py")
assert _spec is not None and _spec.loader is not None
engine_parity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine_parity)

pytestmark = pytest.mark.usefixtures("one_thread")


def _beam_run(numbers_model_dir: Path, tmp_path: Path, beam: int) -> Path:
    """A run holding a copy of the numbers model whose [eval] decodes with ``beam``."""
    run = tmp_path / "run"
    shutil.copytree(numbers_model_dir, run / "model")
    path = run / "model" / "job.json"
    job = json.loads(path.read_text(encoding="utf-8"))
    job["eval"].update(beam_size=beam, alpha=0.6)
    path.write_text(json.dumps(job), encoding="utf-8")
    return run


@pytest.mark.slow  # converts the model for CTranslate2 and decodes two splits six times
def test_the_choice_is_validations_best_and_every_score_is_the_librarys(
    numbers_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ctranslate2")
    run, out = _beam_run(numbers_model_dir, tmp_path, 2), tmp_path / "parity.json"
    assert engine_parity.main([str(run), "--lps", "0", "1.5", "--record", "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    sweep = report["sweep"]
    assert [row["ct2_length_penalty"] for row in sweep] == [0.0, 1.5]
    best = max(row["bleu"] for row in sweep)
    assert report["ct2_length_penalty"] == next(
        row["ct2_length_penalty"] for row in sweep if row["bleu"] == best
    )
    lp = report["ct2_length_penalty"]
    torch_decoding = DecodingOptions(beam_size=2, alpha=0.6)
    for split in ("valid", "test"):
        ct2 = evaluate_model(
            run / "model",
            split=split,
            decoding=torch_decoding.updated(ct2_length_penalty=lp),
            engine="ctranslate2",
        )
        torch = evaluate_model(run / "model", split=split, decoding=torch_decoding)
        assert report["scores"][split]["ctranslate2"]["bleu"] == ct2["bleu"]
        assert report["scores"][split]["torch"]["chrf"] == torch["chrf"]
        assert report["differences"][split] == pytest.approx(ct2["bleu"] - torch["bleu"])
    assert report["met"] == all(abs(d) <= 0.2 for d in report["differences"].values())
    job = json.loads((run / "model" / "job.json").read_text(encoding="utf-8"))
    assert job["eval"]["ct2_length_penalty"] == lp and report["recorded"] is True


def test_a_greedy_recipe_and_a_directory_that_is_not_a_run_are_refused(
    numbers_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, message in (
        ([str(tmp_path)], f"run: {tmp_path} holds no model/job.json"),
        ([str(numbers_model_dir.parent)], "decodes greedily ([eval] beam_size 1)"),
        ([str(numbers_model_dir.parent), "--lps", "-1"], "--lps: expected numbers >= 0"),
    ):
        with pytest.raises(SystemExit) as exit_:
            engine_parity.main(argv)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err


#: Where the pages quote the Multi30K parity, and the results file they quote.
PARITY = ROOT / "benchmarks/results/engine_multi30k.json"
PARITY_QUOTES = {
    "docs/guide.md": r"`ct2_length_penalty = (?P<lp>[\d.]+)` on validation, the best of "
    r"(?P<low>[\d.]+) to (?P<high>[\d.]+) \(validation BLEU [\d.]+ to (?P<best>[\d.]+);.*?"
    r"scores (?P<valid_ct2>[\d.]+) BLEU on validation against the torch engine's "
    r"(?P<valid_torch>[\d.]+), and (?P<test_ct2>[\d.]+)\son test against (?P<test_torch>[\d.]+)",
    "docs/guide.zh.md": r"选定\s*`ct2_length_penalty = (?P<lp>[\d.]+)`，是 (?P<low>[\d.]+) 到 "
    r"(?P<high>[\d.]+) 中最好的（验证集 BLEU [\d.]+ 到 (?P<best>[\d.]+)；.*?验证集上得 "
    r"(?P<valid_ct2>[\d.]+) BLEU，torch\s*引擎得 (?P<valid_torch>[\d.]+)；在测试集上分别是 "
    r"(?P<test_ct2>[\d.]+) 和 (?P<test_torch>[\d.]+)",
}


def test_the_guide_and_the_recipe_hold_the_parity_on_file() -> None:
    import re

    import tomllib

    found = json.loads(PARITY.read_text(encoding="utf-8"))
    sweep, scores = found["sweep"], found["scores"]
    expected = {
        "lp": f"{found['ct2_length_penalty']:g}",
        "low": f"{sweep[0]['ct2_length_penalty']:g}",
        "high": f"{sweep[-1]['ct2_length_penalty']:g}",
        "best": f"{max(row['bleu'] for row in sweep):.2f}",
        **{f"{s}_{e[:5] if e == 'torch' else 'ct2'}": f"{scores[s][e]['bleu']:.2f}"
           for s in ("valid", "test") for e in ("torch", "ctranslate2")},
    }  # fmt: skip
    assert found["ct2_length_penalty"] == engine_parity.choose_lp(
        [{"alpha": r["ct2_length_penalty"], "bleu": r["bleu"]} for r in sweep]
    )
    for page, pattern in PARITY_QUOTES.items():
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())  # lines joined
        match = re.search(pattern, text)
        assert match is not None, page
        assert match.groupdict() == expected, page
    recipe = tomllib.loads((ROOT / "configs/multi30k-en-de.toml").read_text(encoding="utf-8"))
    assert recipe["eval"]["ct2_length_penalty"] == found["ct2_length_penalty"]
    assert recipe["eval"]["beam_size"] == found["beam_size"]
    assert recipe["eval"]["alpha"] == found["alpha"]

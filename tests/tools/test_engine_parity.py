"""tools/engine_parity.py, which chose on validation how long CTranslate2's beam collects finished
hypotheses for attnlab's length penalty (the library's PATIENCE) and measured both engines' BLEU
on the Multi30K recipe's model (benchmarks/results/engine_multi30k.json): the choice is the
smallest patience with the most outputs equal to the torch engine's, every score is the library's
own evaluation on that engine, and a greedy recipe is refused."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from attnlab.decode.options import DecodingOptions
from attnlab.inference import engines
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


@pytest.mark.slow  # converts the model for CTranslate2 and decodes two splits five times
def test_the_choice_is_validations_and_every_score_is_the_librarys(
    numbers_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ctranslate2")
    monkeypatch.setattr(engines, "PATIENCE", engines.PATIENCE)  # the tool sets it; put it back
    run, out = _beam_run(numbers_model_dir, tmp_path, 2), tmp_path / "parity.json"
    assert engine_parity.main([str(run), "--patiences", "1", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    sweep = report["sweep"]
    assert [row["patience"] for row in sweep] == [1.0, 2.0]
    assert report["patience"] == engine_parity.choose_patience(sweep)
    decoding = DecodingOptions(beam_size=2, alpha=0.6)
    for split in ("valid", "test"):
        engines.PATIENCE = report["patience"]
        ct2 = evaluate_model(
            run / "model", split=split, decoding=decoding, engine="ctranslate2", examples=10**9
        )
        torch = evaluate_model(run / "model", split=split, decoding=decoding, examples=10**9)
        assert report["scores"][split]["ctranslate2"]["bleu"] == ct2["bleu"]
        assert report["scores"][split]["torch"]["chrf"] == torch["chrf"]
        assert report["differences"][split] == pytest.approx(ct2["bleu"] - torch["bleu"])
        same = [a == b for a, b in zip(ct2["examples"], torch["examples"], strict=True)]
        assert report["scores"][split]["same"] == sum(same)
    assert report["met"] == all(abs(d) <= 0.2 for d in report["differences"].values())


def test_the_smallest_patience_with_the_most_agreement_is_chosen() -> None:
    rows = [
        {"patience": 1.0, "same": 9},
        {"patience": 3.0, "same": 10},
        {"patience": 2.0, "same": 10},
    ]
    assert engine_parity.choose_patience(rows) == 2.0


def test_a_greedy_recipe_and_a_directory_that_is_not_a_run_are_refused(
    numbers_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, message in (
        ([str(tmp_path)], f"run: {tmp_path} holds no model/job.json"),
        ([str(numbers_model_dir.parent)], "decodes greedily ([eval] beam_size 1)"),
        (
            [str(numbers_model_dir.parent), "--patiences", "0.5"],
            "--patiences: expected numbers >= 1",
        ),
    ):
        with pytest.raises(SystemExit) as exit_:
            engine_parity.main(argv)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err


#: Where the pages quote the Multi30K parity, and the results file they quote.
PARITY = ROOT / "benchmarks/results/engine_multi30k.json"
PARITY_QUOTES = {
    "docs/guide.md": r"picks another output than the torch engine for (?P<narrow>[\d,]+) of the "
    r"(?P<valid_n>[\d,]+) validation sentences, twice the width for (?P<wide>[\d,]+)\. With it the "
    r"ctranslate2 engine scores (?P<valid_ct2>[\d.]+) BLEU on validation against the torch "
    r"engine's (?P<valid_torch>[\d.]+), and (?P<test_ct2>[\d.]+) on test against "
    r"(?P<test_torch>[\d.]+) \((?P<test_same>[\d,]+) of (?P<test_n>[\d,]+) test outputs the same\)",
    "docs/guide.zh.md": r"(?P<valid_n>[\d,]+) 个验证句子中有 (?P<narrow>[\d,]+) 个的输出与 torch "
    r"引擎不同，收集两倍宽度时\s?为 (?P<wide>[\d,]+)。用它时，ctranslate2 引擎在验证集上得 "
    r"(?P<valid_ct2>[\d.]+) BLEU，torch 引擎得 (?P<valid_torch>[\d.]+)；在测试集上分别是 "
    r"(?P<test_ct2>[\d.]+) 和 (?P<test_torch>[\d.]+)（(?P<test_n>[\d,]+) 个测试输出中 "
    r"(?P<test_same>[\d,]+) 个相同）",
}


def test_the_guide_and_the_library_hold_the_parity_on_file() -> None:
    import re

    import tomllib

    found = json.loads(PARITY.read_text(encoding="utf-8"))
    sweep, scores = {row["patience"]: row for row in found["sweep"]}, found["scores"]
    valid_n, test_n = scores["valid"]["torch"]["sentences"], scores["test"]["torch"]["sentences"]
    expected = {
        "valid_n": f"{valid_n:,}",
        "narrow": f"{valid_n - sweep[1.0]['same']:,}",
        "wide": f"{valid_n - sweep[2.0]['same']:,}",
        "test_same": f"{scores['test']['same']:,}",
        "test_n": f"{test_n:,}",
        **{f"{s}_{e[:5] if e == 'torch' else 'ct2'}": f"{scores[s][e]['bleu']:.2f}"
           for s in ("valid", "test") for e in ("torch", "ctranslate2")},
    }  # fmt: skip
    assert found["patience"] == engine_parity.choose_patience(found["sweep"]) == engines.PATIENCE
    for page, pattern in PARITY_QUOTES.items():
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())  # lines joined
        match = re.search(pattern, text)
        assert match is not None, page
        assert match.groupdict() == expected, page
    recipe = tomllib.loads((ROOT / "configs/multi30k-en-de.toml").read_text(encoding="utf-8"))
    assert recipe["eval"]["beam_size"] == found["beam_size"]
    assert recipe["eval"]["alpha"] == found["alpha"]

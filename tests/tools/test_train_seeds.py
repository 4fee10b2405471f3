"""tools/train_seeds.py, which trains a recipe over several seeds side by side and tabulates
them: each row is the run's own results.json, the summary is their mean and spread, a rerun
retrains nothing that finished, and a failed seed names its log."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("train_seeds", ROOT / "tools/train_seeds.py")
assert _spec is not None and _spec.loader is not None
train_seeds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_seeds)

CONFIG = ROOT / "configs" / "numbers.toml"
# The numbers recipe cut to a few seconds a seed.
SHORT = ["--max-steps", "6", "--eval-every", "6", "--checkpoint-every", "6", "--warmup", "2"]
SHORT += ["--set", "task.valid_size=20", "--set", "task.test_size=20"]
SHORT += ["--set", "train.average_last=1", "--set", "eval.bleu_sentences=5"]


def test_the_next_command_resumes_or_starts_over(tmp_path: Path) -> None:
    run = tmp_path / "seed3"
    fresh = train_seeds.command(CONFIG, 3, run, ["--max-steps", "9"])
    assert fresh[-2:] == ["--max-steps", "9"] and fresh[fresh.index("--seed") + 1] == "3"
    assert "--resume" not in fresh and "--overwrite" not in fresh
    run.mkdir()  # killed before its first checkpoint
    assert "--overwrite" in train_seeds.command(CONFIG, 3, run, [])
    (run / "checkpoints" / "step-00000006").mkdir(parents=True)
    assert "--resume" in train_seeds.command(CONFIG, 3, run, [])


@pytest.mark.slow
def test_two_seeds_side_by_side_then_a_rerun_trains_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "seeds"
    argv = ["--config", str(CONFIG), "--out", str(out), "--seeds", "0", "1", "--jobs", "2"]
    assert train_seeds.main([*argv, "--", *SHORT]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "seeds.json").read_text(encoding="utf-8"))
    results = [json.loads((out / f"seed{s}" / "results.json").read_text("utf-8")) for s in (0, 1)]
    assert [r["training"]["steps"] for r in results] == [6, 6]
    for row, result in zip(report["rows"], results, strict=True):
        assert (row["chrf"], row["exact_match"]) == (result["chrf"], result["exact_match"])
    chrf = [r["chrf"] for r in results]
    assert report["summary"]["chrf"]["mean"] == pytest.approx(statistics.fmean(chrf))
    assert report["summary"]["chrf"]["sd"] == pytest.approx(statistics.stdev(chrf))
    assert report["extra"] == SHORT
    assert "| 0 | " in printed and "| 1 | " in printed and "| mean ± sd (range) | " in printed
    # Both logs hold their run's output.
    assert "stop at step 6: max_steps" in (out / "seed1.log").read_text(encoding="utf-8")

    stamps = [(out / f"seed{s}" / "results.json").stat().st_mtime_ns for s in (0, 1)]
    assert train_seeds.main([*argv, "--", *SHORT]) == 0
    printed = capsys.readouterr().out
    assert printed.count("already trained") == 2 and "training (" not in printed
    assert stamps == [(out / f"seed{s}" / "results.json").stat().st_mtime_ns for s in (0, 1)]


@pytest.mark.slow
def test_a_failed_seed_names_its_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bad"
    argv = ["--config", str(CONFIG), "--out", str(out), "--seeds", "5", "--", "--max-steps", "0"]
    assert train_seeds.main(argv) == 1
    captured = capsys.readouterr()
    assert "seed 5: FAILED (exit 2)" in captured.out
    assert f"seed 5: see {out / 'seed5.log'}" in captured.err
    assert "--max-steps" in (out / "seed5.log").read_text(encoding="utf-8")


def test_bad_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra, message in (
        (["--config", str(tmp_path / "no.toml")], "--config: "),
        (["--config", str(CONFIG), "--jobs", "0"], "--jobs/--threads: expected >= 1"),
        (["--config", str(CONFIG), "--seeds", "1", "1"], "--seeds: expected distinct seeds"),
    ):
        with pytest.raises(SystemExit) as exit_:
            train_seeds.main(["--out", str(tmp_path / "out"), *extra])
        assert exit_.value.code == 2 and message in capsys.readouterr().err

"""train.keep_best: ``out/best`` holds the model of the best evaluation by a validation column
(lower for a loss, higher for a score), survives a resume, and refuses what it cannot use."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli import main
from attnlab.models.transformer import Transformer, load_pretrained
from attnlab.train import TrainConfig, Trainer
from attnlab.train.objectives import TranslationObjective

sys.path.insert(0, str(Path(__file__).parents[1]))
import _train_worker as worker
from _helpers import TINY_CLI
from _train_worker import small_model

pytestmark = pytest.mark.usefixtures("one_thread")


TRAIN = worker.reversal_examples(60, seed=0)
VALID = worker.reversal_examples(12, seed=1)
#: The scripted validation score at each evaluation: the best is the 3rd (step 12), a tie at
#: the 5th keeps the earlier model.
SCORES = {4: 1.0, 8: 3.0, 12: 5.0, 16: 4.0, 20: 5.0, 24: 2.0}


def scripted(step: int, _model: torch.nn.Module) -> dict[str, float]:
    return {"val_score": SCORES[step]}


def config(out: Path, **overrides: object) -> TrainConfig:
    options: dict[str, object] = {
        "out": str(out),
        "max_tokens": 64,
        "warmup": 4,
        "max_steps": 24,
        "eval_every": 4,
        "checkpoint_every": 4,
        "keep_checkpoints": 10,
        "average_last": 1,
        "log_every": 4,
        "keep_best": "val_score",
        **overrides,
    }
    return TrainConfig(**options)  # type: ignore[arg-type]


def weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(directory / "model.safetensors")


def same_weights(a: Path, b: Path) -> bool:
    left, right = weights(a), weights(b)
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def test_the_best_score_is_kept_and_a_tie_keeps_the_earlier_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(out),
        on_evaluate=scripted,
        objective=TranslationObjective,
    ).train()
    best = out / "best"
    assert json.loads((best / "best.json").read_text()) == {
        "column": "val_score",
        "value": 5.0,
        "step": 12,
    }
    assert summary["best"] == {
        "column": "val_score",
        "value": 5.0,
        "step": 12,
        "model_dir": str(best),
    }
    assert same_weights(best, out / "checkpoints" / "step-00000012")
    assert not same_weights(best, out / "checkpoints" / "step-00000020")
    assert isinstance(load_pretrained(best), Transformer)
    log = (out / "train.log").read_text()
    saved = [line.split(" best ", 1)[1] for line in log.splitlines() if " best val_" in line]
    assert [line.split(":")[0] for line in saved] == [
        "val_score 1 at step 4",
        "val_score 3 at step 8",
        "val_score 5 at step 12",
    ]


def test_a_loss_column_keeps_the_lowest(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(out, keep_best="val_loss"),
        objective=TranslationObjective,
    ).train()
    rows = [line.split(",") for line in (out / "metrics.csv").read_text().splitlines()]
    column = rows[0].index("val_loss")
    losses = {int(r[0]): float(r[column]) for r in rows[1:] if r[column]}
    lowest = min(losses, key=lambda step: (losses[step], step))
    assert summary["best"]["step"] == lowest == summary["best_step"]
    assert summary["best"]["value"] == pytest.approx(losses[lowest], rel=1e-6)
    assert same_weights(out / "best", out / "checkpoints" / f"step-{lowest:08d}")


def test_a_resumed_run_keeps_choosing_over_the_whole_run(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(whole),
        on_evaluate=scripted,
        objective=TranslationObjective,
    ).train()
    # Stop at step 16 (after the best at 12), then resume to 24: the later tie at 20 and the
    # worse scores do not replace the model that the first part kept.
    split = tmp_path / "split"
    Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(split, max_steps=16),
        on_evaluate=scripted,
        objective=TranslationObjective,
    ).train()
    first = weights(split / "best")
    resumed = Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(split),
        on_evaluate=scripted,
        objective=TranslationObjective,
    )
    summary = resumed.train(resume=True)
    assert summary["resumed_from_step"] == 16 and summary["best"]["step"] == 12
    assert all(torch.equal(first[k], v) for k, v in weights(split / "best").items())
    assert same_weights(split / "best", whole / "best")


def test_what_keep_best_cannot_use_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_best: expected None or a validation column"):
        config(tmp_path / "a", keep_best="bleu")
    trainer = Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(tmp_path / "b", keep_best="val_bleu"),
        objective=TranslationObjective,
    )
    with pytest.raises(ValueError, match="keep_best: 'val_bleu' is not a validation column"):
        trainer.train()
    # A resumed run must choose by the column its best model was chosen by.
    Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(tmp_path / "c", max_steps=8, keep_best=None),
        objective=TranslationObjective,
    ).train()
    (tmp_path / "c" / "best").mkdir()
    (tmp_path / "c" / "best" / "best.json").write_text(
        json.dumps({"column": "val_loss", "value": 1.0, "step": 4})
    )
    other = Trainer(
        small_model(),
        TRAIN,
        VALID,
        config(tmp_path / "c"),
        on_evaluate=scripted,
        objective=TranslationObjective,
    )
    with pytest.raises(ValueError, match="chosen by 'val_loss', this run by 'val_score'"):
        other.train(resume=True)


def test_train_keep_best_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main([*TINY_CLI, "--out", str(out), "--keep-best", "val_loss", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert f"best: {out / 'best'}  (val_loss " in printed
    assert (out / "best" / "tokenizer.json").is_file() or list((out / "best").glob("*tok*"))
    results = json.loads((out / "results.json").read_text())
    assert results["training"]["best"]["step"] == 4
    assert main(["evaluate", "--model", str(out / "best"), "--json"]) == 0


@pytest.mark.parametrize(
    ("column", "flags", "expected"),
    [
        (
            "val_bleu",
            ["--set", "eval.bleu_sentences=0"],
            "it has val_loss (val_bleu, val_exact, val_chrf need",
        ),
        ("val_accuracy", [], "it has val_loss, val_bleu, val_exact"),
    ],
)
def test_a_column_the_job_never_writes_is_refused_before_any_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    column: str,
    flags: list[str],
    expected: str,
) -> None:
    out = tmp_path / "run"
    assert main([*TINY_CLI, "--out", str(out), "--keep-best", column, *flags]) == 2
    error = capsys.readouterr().err
    assert f"[train] keep_best: {column!r} is not a validation column of this job; {expected}" in (
        error
    )
    assert len(error.strip().splitlines()) == 1
    assert not out.exists()  # refused before the corpus, the tokenizers or the directory

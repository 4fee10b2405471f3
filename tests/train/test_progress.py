"""Progress a person can read (attnlab.train.progress): the estimate of the time left against
step, epoch and time bounds (fake clock values, no sleeping), the plain lines written outside a
terminal, --no-progress, and OUT/train.log across a resume. Runs are bounded by steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlab.cli import main
from attnlab.train import TrainConfig, Trainer
from attnlab.train.objectives import TranslationObjective
from attnlab.train.progress import TRAIN_LOG, Progress, format_duration, step_line

sys.path.insert(0, str(Path(__file__).parents[1]))
import _train_worker as worker
from _helpers import TINY_CLI

pytestmark = pytest.mark.usefixtures("one_thread")

# -- the estimate ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "?"), (0, "0:00"), (41.4, "0:41"), (59.6, "1:00"), (204, "3:24"), (3723, "1:02:03")],
)
def test_durations_read_as_clock_time(seconds, shown):
    assert format_duration(seconds) == shown


def test_a_step_bound_run_is_estimated_from_its_speed():
    progress = Progress(step=200, total_steps=1200, elapsed_s=41, budget_s=None, steps_per_s=2.0)
    assert progress.eta_s() == 500.0 and progress.fraction() == pytest.approx(1 / 6)
    assert progress.position() == "step 200/1200 (17%)"
    assert progress.timing() == "elapsed 0:41 eta 8:20"


def test_the_digits_case_a_short_budget_bounds_the_estimate():
    """The issue's digits run: 3000 planned steps at 1.6 steps/s would be 30 minutes, but the
    18-second budget ends the run 12 seconds from now."""
    progress = Progress(step=10, total_steps=3000, elapsed_s=6.0, budget_s=18.0, steps_per_s=1.6)
    assert progress.eta_s() == 12.0
    assert progress.timing() == "elapsed 0:06/0:18 eta 0:12"
    assert progress.position() == "step 10/3000 (33%)"  # of the bound reached first: time


def test_a_run_bound_by_time_alone_shows_its_budget():
    progress = Progress(step=200, total_steps=None, elapsed_s=41, budget_s=60, steps_per_s=None)
    assert progress.position() == "step 200 (68%)"
    assert progress.timing() == "elapsed 0:41/1:00 eta 0:19"
    over = Progress(step=201, total_steps=None, elapsed_s=61, budget_s=60, steps_per_s=4.0)
    assert over.eta_s() == 0.0 and over.fraction() == 1.0


def test_nothing_known_yet_is_a_question_mark():
    progress = Progress(step=0, total_steps=None, elapsed_s=0.0, budget_s=None, steps_per_s=None)
    assert progress.eta_s() is None and progress.position() == "step 0"
    assert progress.timing() == "elapsed 0:00 eta ?"
    unmeasured = Progress(step=0, total_steps=40, elapsed_s=0.0, budget_s=60, steps_per_s=None)
    assert unmeasured.timing() == "elapsed 0:00/1:00 eta ?"  # not yet: no speed measured


@given(
    step=st.integers(0, 10**6),
    total=st.one_of(st.none(), st.integers(1, 10**6)),
    elapsed=st.floats(0, 1e6),
    budget=st.floats(1e-3, 1e6),
    speed=st.one_of(st.none(), st.floats(1e-6, 1e6)),
)
def test_the_estimate_never_exceeds_the_time_left(step, total, elapsed, budget, speed):
    progress = Progress(
        step=step, total_steps=total, elapsed_s=elapsed, budget_s=budget, steps_per_s=speed
    )
    eta = progress.eta_s()
    assert (eta is None) == (total is not None and speed is None)
    assert eta is None or 0.0 <= eta <= max(0.0, budget - elapsed)
    assert 0.0 <= progress.fraction() <= 1.0


def test_a_step_line_has_every_number():
    progress = Progress(step=200, total_steps=1200, elapsed_s=41, budget_s=None, steps_per_s=0.98)
    row = {"step": 200, "loss": 2.3141, "lr": 3.1e-4, "tokens_per_s": 812.4}
    line = step_line(progress, row, "tokens_per_s", "tok/s")
    assert line == "step 200/1200 (17%) loss 2.314 lr 3.1e-04 812 tok/s elapsed 0:41 eta 17:00"


# -- a training --------------------------------------------------------------------------------


def _config(out: Path, max_steps: int) -> TrainConfig:
    return TrainConfig(
        out=str(out),
        max_tokens=64,
        max_steps=max_steps,
        log_every=2,
        eval_every=2,
        checkpoint_every=2,
        keep_checkpoints=1,
        average_last=1,
    )


def _steps(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def test_outside_a_terminal_a_plain_line_every_log_every_steps(tmp_path, capsys):
    train = worker.reversal_examples(24, seed=0)
    Trainer(
        worker.tiny_model(0.0),
        train,
        train[:4],
        _config(tmp_path / "a", 4),
        objective=TranslationObjective,
    ).train()
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = _steps(err)
    assert [line.split(" (")[0] for line in lines] == ["step 2/4", "step 4/4"]
    assert all(" loss " in line and " tok/s " in line and " eta " in line for line in lines)
    assert "evaluation at step 4: val_loss " in err and err.startswith("start: step 0 of 4 ")


def test_without_progress_the_lines_go_to_log_and_train_log_grows_on_resume(tmp_path, capsys):
    train = worker.reversal_examples(24, seed=0)
    out = tmp_path / "run"
    shown: list[str] = []

    def trainer(steps: int, **options) -> Trainer:
        model, config = worker.tiny_model(0.0), _config(out, steps)
        return Trainer(model, train, None, config, objective=TranslationObjective, **options)

    trainer(4, progress=False, log=shown.append).train()
    assert capsys.readouterr().err == ""  # no bar, no lines on stderr
    assert [line.split(" (")[0] for line in _steps("\n".join(shown))] == ["step 2/4", "step 4/4"]
    first = (out / TRAIN_LOG).read_text(encoding="utf-8")
    logged = [line.split(" ", 2)[2] for line in first.splitlines()]  # without the timestamp
    assert logged[0].startswith("start: step 0 of 4 (max_steps 4) on cpu")
    assert _steps("\n".join(logged)) == _steps("\n".join(shown))
    assert "checkpoint saved at step 4" in logged and logged[-1].startswith("stop at step 4: ")

    trainer(6, progress=False).train(resume=True)
    grown = (out / TRAIN_LOG).read_text(encoding="utf-8")
    assert grown.startswith(first)
    added = [line.split(" ", 2)[2] for line in grown[len(first) :].splitlines()]
    assert added[0] == "resume from the checkpoint: step 4 of 6 (max_steps 6) on cpu"
    assert [line.split(" (")[0] for line in _steps("\n".join(added))] == ["step 6/6"]


def test_train_no_progress_prints_the_lines_and_writes_train_log(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY_CLI, "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.out + captured.err and _steps(captured.err) == []
    printed = [line.strip() for line in captured.out.splitlines()]
    assert [line.split(" (")[0] for line in _steps("\n".join(printed))] == ["step 2/4", "step 4/4"]
    log = (out / TRAIN_LOG).read_text(encoding="utf-8")
    for text in ("task numbers", "tokenizers:", "start: step 0 of 4", "step 4/4 (100%)"):
        assert text in log, text
    assert "evaluation at step 4: val_loss " in log and "test: BLEU " in log
    assert f"log: {out / TRAIN_LOG}" in captured.out


def test_train_outside_a_terminal_writes_plain_lines_to_stderr(tmp_path, capsys):
    assert main([*TINY_CLI, "--out", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err
    assert [line.split(" (")[0] for line in _steps(captured.err)] == ["step 2/4", "step 4/4"]


def test_a_run_that_fails_says_where_in_train_log(tmp_path):
    train = worker.reversal_examples(24, seed=0)
    out = tmp_path / "run"
    trainer = Trainer(
        worker.tiny_model(0.0),
        train,
        train[:4],
        _config(out, 4),
        progress=False,
        on_evaluate=lambda step, model: "not a dict",
        objective=TranslationObjective,
    )
    with pytest.raises(TypeError, match="on_evaluate: expected a dict"):
        trainer.train()
    last = (out / TRAIN_LOG).read_text(encoding="utf-8").splitlines()[-1]
    assert last.endswith(" stopped at step 2 by TypeError")

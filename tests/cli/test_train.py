"""What `attnlab train --help` says is what runs (issue 26, section 3): a flag is honoured or
refused, never ignored; the help names the recipe's settings, not defaults no recipe uses; the
recipes reach pip users (`attnlab config --recipe`, `--config NAME`); a start that fails leaves
no run folder behind; the docs' text-task command starts as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from _helpers import subcommands
from attnlab import TransformerConfig
from attnlab.cli import build_parser, main, parse
from attnlab.cli.train import _check_startable, build_job
from attnlab.jobs import TASKS, Job, recipe
from attnlab.jobs.recipes import toml_loads

ROOT = Path(__file__).resolve().parents[2]
RECIPE_TASKS = [name for name, task in TASKS.items() if task.recipe is not None]


def _job(argv: list[str], notes: list[str] | None = None) -> Job:
    return build_job(parse(build_parser(), ["train", *argv]), notes)


# -- --preset is honoured ----------------------------------------------------------------------


@pytest.mark.parametrize(("task", "preset"), [("multi30k", "paper-base"), ("numbers", "small")])
def test_preset_chooses_the_whole_model_over_the_recipe(task, preset):
    notes: list[str] = []
    job = _job(["--task", task, "--preset", preset], notes)
    expected = TransformerConfig.preset(preset)
    config = job.model_config(300, 300)
    for field in ("d_model", "num_heads", "d_ff", "num_encoder_layers", "num_decoder_layers"):
        assert getattr(config, field) == getattr(expected, field), field
    # The recipe's sizes it replaced are named, once, in the note the command prints.
    assert len(notes) == 1 and notes[0].startswith(f"--preset {preset}: the model is the preset's")
    assert f"d_model = {recipe(task)['model']['d_model']}" in notes[0]


def test_without_preset_the_recipe_model_runs():
    config = _job(["--task", "multi30k"]).model_config(300, 300)
    assert config.d_model == recipe("multi30k")["model"]["d_model"]


def test_set_still_changes_one_field_of_the_preset():
    job = _job(["--task", "numbers", "--preset", "small", "--set", "model.d_model=64"])
    config, small = job.model_config(300, 300), TransformerConfig.preset("small")
    assert (config.d_model, config.d_ff, config.num_heads) == (64, small.d_ff, small.num_heads)


def test_preset_over_a_job_file_replaces_its_model_too(tmp_path):
    file = tmp_path / "job.toml"
    file.write_text('[task]\nname = "numbers"\n[model]\npreset = "tiny"\nd_model = 96\n')
    small = TransformerConfig.preset("small").d_model
    assert _job(["--config", str(file), "--preset", "small"]).model_config(9, 9).d_model == small
    assert _job(["--config", str(file)]).model_config(9, 9).d_model == 96


# -- --help says what runs ---------------------------------------------------------------------


def test_train_help_shows_no_default_that_no_recipe_uses():
    train = dict(subcommands(build_parser()))["train"]
    text = train.format_help()
    for action in train._actions:
        if action.default is None and action.help:
            assert not re.search(r"\(\d[\d,.]*\)$", action.help), action.help
    assert "the paper's recipe" not in text
    assert "attnlab config --recipe TASK" in " ".join(text.split())


@pytest.mark.parametrize("task", RECIPE_TASKS)
def test_train_help_lists_what_each_recipe_runs(task):
    text = " ".join(dict(subcommands(build_parser()))["train"].epilog.split())
    line = text.split(f" {task}: ", 1)[1].split("; ", 2)
    tables = recipe(task)
    assert line[0] == f"the {tables['model']['preset']} preset" or line[0].startswith(
        f"the {tables['model']['preset']} preset with "
    )
    for key in ("schedule", "warmup", "max_steps", "max_tokens", "batch_size"):
        if key in tables["train"]:
            assert f"{key} {tables['train'][key]}" in line[1], (task, key)


# -- the recipes reach pip users ---------------------------------------------------------------


@pytest.mark.parametrize("task", RECIPE_TASKS)
def test_config_recipe_prints_the_packaged_recipe(task, capsys, tmp_path):
    assert main(["config", "--recipe", task]) == 0
    printed = capsys.readouterr().out
    assert toml_loads(printed) == recipe(task)
    # Saved, it is a job file that trains what --task runs; and --config takes the name too.
    (tmp_path / "job.toml").write_text(printed)
    from_task = _job(["--task", task]).to_dict()
    assert _job(["--config", str(tmp_path / "job.toml")]).to_dict() == from_task
    assert _job(["--config", task]).to_dict() == from_task


def test_config_recipe_takes_a_recipe_file_by_its_name_too(capsys):
    assert main(["config", "--recipe", "multi30k-en-de"]) == 0
    by_file = capsys.readouterr().out
    assert main(["config", "--recipe", "multi30k"]) == 0
    assert capsys.readouterr().out == by_file
    assert _job(["--config", "multi30k-en-de"]).to_dict() == _job(["--task", "multi30k"]).to_dict()


def test_config_recipe_of_a_task_without_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["config", "--recipe", "text"])
    assert stop.value.code == 2
    assert "--recipe" in capsys.readouterr().err


# -- a start that fails leaves nothing behind --------------------------------------------------


def test_text_without_a_limit_is_one_line_naming_the_flags(tmp_path, capsys):
    book = tmp_path / "book.txt"
    book.write_text("a b c\n" * 20)
    out = tmp_path / "run"
    argv = ["train", "--task", "text", "--text-file", str(book), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--max-steps, --max-epochs, --max-minutes: nothing limits training" in err
    assert not out.exists()


def test_text_without_its_file_names_the_flag(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "text", "--max-steps", "2", "--out", str(out)]) == 2
    assert "--text-file: required for the 'text' task" in capsys.readouterr().err
    missing = ["--text-file", str(tmp_path / "nope.txt")]
    assert main(["train", "--task", "text", "--max-steps", "2", *missing, "--out", str(out)]) == 2
    assert "--text-file: " in capsys.readouterr().err and not out.exists()


def test_a_start_that_fails_inside_training_removes_its_run_folder(tmp_path, capsys):
    """A one-line book fails once the run folder exists (too few lines to hold out one)."""
    book = tmp_path / "book.txt"
    book.write_text("only one line\n")
    out = tmp_path / "run"
    argv = ["train", "--task", "text", "--text-file", str(book), "--max-steps", "2"]
    assert main([*argv, "--out", str(out)]) == 2
    assert "too few" in capsys.readouterr().err
    assert not out.exists()


def test_a_failed_start_keeps_a_folder_it_did_not_create(tmp_path, capsys):
    book = tmp_path / "book.txt"
    book.write_text("only one line\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    argv = ["train", "--task", "text", "--text-file", str(book), "--max-steps", "2"]
    assert main([*argv, "--out", str(out)]) == 2
    assert (out / "notes.txt").read_text() == "mine"


def test_a_bad_setting_with_overwrite_keeps_the_earlier_run(tmp_path, capsys):
    """Settings are checked before --overwrite removes anything."""
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "results.json").write_text("{}")
    argv = ["train", "--task", "numbers", "--warmup", "5000", "--out", str(out), "--overwrite"]
    assert main(argv) == 2
    assert "warmup" in capsys.readouterr().err
    assert (out / "results.json").is_file()


# -- the docs' commands start as written -------------------------------------------------------


def _text_commands() -> list[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [
        line.strip()
        for page in pages
        if page.is_file()
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("attnlab train --task text")
    ]


def test_the_docs_text_task_commands_start(tmp_path, monkeypatch):
    """Each `attnlab train --task text ...` of the README and docs builds a job that starts
    (a limit, the text file found, every setting valid), with book.txt present."""
    commands = _text_commands()
    assert commands, "no `attnlab train --task text` command in README.md or docs/"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "book.txt").write_text("the cat sat on the mat\n" * 50)
    for command in commands:
        argv = shlex.split(command.split("#")[0])[1:]
        _check_startable(build_job(parse(build_parser(), argv)))


@pytest.mark.slow
def test_the_docs_text_task_command_trains(tmp_path, monkeypatch, capsys):
    """The docs' command, shrunk to 3 steps of a small model (seconds), trains and writes a
    model that `attnlab generate` reads."""
    command = _text_commands()[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "book.txt").write_text("the cat sat on the mat and the dog ran\n" * 60)
    argv = shlex.split(command.split("#")[0])[1:]
    shrink = ["--max-steps", "3", "--no-progress", "--out", str(tmp_path / "run")]
    for setting in ("model.d_model=32", "model.d_ff=64", "model.num_decoder_layers=1"):
        shrink += ["--set", setting]
    shrink += ["--set", "tokenizer.vocab_size=300"]
    assert main([*argv, *shrink]) == 0
    assert main(["generate", "--model", str(tmp_path / "run"), "the", "--max-new-tokens", "3"]) == 0

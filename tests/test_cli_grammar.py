"""One grammar across commands: a walk over every subcommand's parser (the model flag, help
that names the defaults it shows), and `attnlab config` listing every kind of preset."""

from __future__ import annotations

import argparse
import json

import pytest

from _helpers import subcommands
from attnlab import VisionConfig, VisionTransformer
from attnlab.cli import build_parser, main
from attnlab.vision import count_vit_parameters

COMMANDS = dict(subcommands(build_parser()))
#: Commands whose model was positional (viz's MODEL, export's MODEL_DIR): kept as a
#: deprecated alias beside --model.
POSITIONAL_MODEL = {"viz attention", "viz learned-pe", "viz rollout", "export"}


def test_the_walk_finds_every_command():
    for name in ("train", "translate", "evaluate", "serve", "average", "generate", "predict"):
        assert name in COMMANDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_taking_a_model_calls_it_model(name):
    parser = COMMANDS[name]
    flags = {s for a in parser._actions for s in a.option_strings}
    dests = {a.dest for a in parser._actions}
    if name in POSITIONAL_MODEL:
        positional = [a for a in parser._actions if a.dest in {"model", "model_dir"}]
        assert positional and positional[0].nargs == "?" and "deprecated" in positional[0].help
    if dests & {"model", "model_dir"}:
        assert "--model" in flags, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_defaults_in_parentheses_are_the_defaults(name):
    """A help text ending in "(VALUE)" names the default the parser uses, where the default
    is a plain number (the check the issue asked for: no '(4096)' over a default of None)."""
    parser = COMMANDS[name]
    for action in parser._actions:
        text = action.help or ""
        if not text.endswith(")") or "(" not in text:
            continue
        shown = text[text.rindex("(") + 1 : -1]
        try:
            number = float(shown.replace(",", ""))
        except ValueError:
            continue
        if not isinstance(action.default, (int, float)) or isinstance(action.default, bool):
            continue  # None: the task's recipe decides (train); the help names the usual value
        assert float(action.default) == number, (name, action.dest, shown, action.default)


def test_config_lists_the_vision_presets_with_exact_counts(capsys):
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    for name in VisionConfig.preset_names():
        line = next(line for line in out.splitlines() if line.startswith(f"{name} "))
        count = count_vit_parameters(VisionConfig.preset(name))
        assert line.endswith(f"{count:,}")
    small = VisionConfig.preset("digits")
    assert count_vit_parameters(small) == VisionTransformer(small).num_parameters()


def test_config_prints_a_vision_preset(capsys):
    assert main(["config", "digits", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == VisionConfig.preset("digits").to_dict()


def _device_action(parser: argparse.ArgumentParser) -> argparse.Action | None:
    return next((a for a in parser._actions if "--device" in a.option_strings), None)


#: Commands that take a model but run none: they read or convert its weights only.
RUNS_NO_MODEL = {"viz learned-pe": "draws the embedding table", "export": "converts weights"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_that_runs_a_model_takes_device(name):
    parser = COMMANDS[name]
    dests = {a.dest for a in parser._actions}
    if dests & {"model", "model_dir", "model_flag"} and name not in RUNS_NO_MODEL:
        assert _device_action(parser) is not None, name


def test_device_has_the_same_choices_default_and_help_everywhere():
    from attnlab.cli._args import DEVICE_CHOICES, DEVICE_HELP

    found = {name: _device_action(p) for name, p in COMMANDS.items() if _device_action(p)}
    expected = {"train", "translate", "evaluate", "serve", "generate", "predict"}
    assert expected | {"viz attention", "viz rollout"} <= set(found)
    for name, action in found.items():
        assert tuple(action.choices) == DEVICE_CHOICES, name
        assert (action.help, action.default) == (DEVICE_HELP, None), name


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the error of a machine without CUDA"
)
def test_device_cuda_without_cuda_is_one_line_naming_the_flag(tmp_path, capsys):
    """Checked before the model is read: an empty directory stands in for it."""
    (tmp_path / "model").mkdir()
    model = str(tmp_path / "model")
    commands = {
        "train": ["train", "--out", str(tmp_path / "run"), "--max-steps", "1"],
        "translate": ["translate", "--model", model, "one"],
        "evaluate": ["evaluate", "--model", model],
        "serve": ["serve", "--model", model, "--port", "0"],
        "generate": ["generate", "--model", model, "x"],
        "predict": ["predict", "--model", model, str(tmp_path / "x.png")],
        "viz attention": ["viz", "attention", "--model", model, "--src-ids", "5 6"],
        "viz rollout": ["viz", "rollout", "--model", model],
    }
    for name, argv in commands.items():
        assert main([*argv, "--device", "cuda"]) == 2, name
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1, (name, captured.err)
        assert "--device: cuda was asked for, but CUDA is not available" in captured.err, name
    assert not (tmp_path / "run").exists()

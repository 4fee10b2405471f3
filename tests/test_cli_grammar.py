"""One grammar across commands: a walk over every subcommand's parser (the model flag, help
that names the defaults it shows), and `attnlab config` listing every kind of preset."""

from __future__ import annotations

import argparse
import json

import pytest

from attnlab import VisionConfig, VisionTransformer
from attnlab.cli import build_parser, main
from attnlab.vision import count_vit_parameters


def _subparsers(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _subparsers(sub, f"{prefix}{name} ")


COMMANDS = dict(_subparsers(build_parser()))
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

"""One grammar across commands: a walk over every subcommand's parser (the model flag, help
that names the defaults it shows), and `attnlab config` listing every kind of preset."""

from __future__ import annotations

import argparse
import json

import pytest

from _helpers import subcommands
from attnlab import VisionConfig, VisionTransformer
from attnlab.cli import build_parser, main
from attnlab.cli._args import MODEL_HELP, MODELS_HELP
from attnlab.models.vision import count_vit_parameters

COMMANDS = dict(subcommands(build_parser()))
#: Every command that reads one model: `--model DIR`, the same flag everywhere.
READS_A_MODEL = {
    "translate", "evaluate", "serve", "generate", "predict", "export",
    "viz attention", "viz learned-pe", "viz rollout",
}  # fmt: skip
#: Commands whose --model may be repeated: an ensemble.
ENSEMBLES = {"translate", "evaluate", "serve"}


def test_the_walk_finds_every_command():
    for name in ("train", "translate", "evaluate", "serve", "average", "generate", "predict"):
        assert name in COMMANDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_reading_a_model_takes_model(name):
    model = [a for a in COMMANDS[name]._actions if a.dest in {"model", "model_dir"}]
    if name not in READS_A_MODEL:
        assert not model, name
        return
    assert [a.option_strings for a in model] == [["--model"]], name
    wanted = MODELS_HELP if name in ENSEMBLES else MODEL_HELP
    assert (model[0].help, model[0].metavar) == (wanted, "DIR"), name
    assert (model[0].__class__.__name__ == "_AppendAction") == (name in ENSEMBLES), name
    assert model[0].required, name


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


# -- one spelling per concept (issue 26, section 2) -------------------------------------------


def _live_actions(parser: argparse.ArgumentParser):
    """The actions --help shows (not --help itself)."""
    for action in parser._actions:
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            yield action


def _spellings(action: argparse.Action) -> list[str]:
    """How a user writes ``action``: its option strings, or a positional's METAVAR."""
    return list(action.option_strings) or [str(action.metavar or action.dest.upper())]


#: Known second spellings of one concept: canonical -> the synonyms that may not appear. A new
#: flag in a group of its own needs no entry.
SYNONYMS = {
    "--model": {"MODEL", "MODEL_DIR", "--model-dir", "--model-path", "--checkpoint"},
    "--out": {"--output", "OUT_DIR", "OUT", "--out-dir", "--output-dir", "-o"},
    "--overwrite": {"--force", "--replace", "-f"},
    "--quantize": {"--quantization", "--quant"},
    "--max-new-tokens": {"--max-len", "--max-length", "--max-tokens-out"},
    "--top-classes": {"--classes", "--num-classes"},
    "--pad-to": {"--pad-len", "--padded-length"},
    "--num-heads": {"--n-heads"},
    "--d-model": {"--dim", "--width"},
    "--causal": {"--no-look-ahead", "--look-ahead"},
    "--preset": {"--model-preset"},
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_second_spelling_of_a_concept(name):
    """Only the canonical spelling of a group may appear; ``-o`` only as
    the short form of --out, ``--no-causal`` only as the negative of --causal."""
    for action in _live_actions(COMMANDS[name]):
        spellings = _spellings(action)
        for canonical, others in SYNONYMS.items():
            found = set(spellings) & others
            if found == {"-o"} and "--out" in spellings:
                continue
            assert not found, f"{name}: {found} is a second spelling of {canonical}"
        if "--no-causal" in spellings:
            assert isinstance(action, argparse.BooleanOptionalAction), name


def test_top_k_means_sampling_only():
    from attnlab.cli._args import add_sampling_flags

    probe = argparse.ArgumentParser()
    add_sampling_flags(probe)
    shared = next(a for a in probe._actions if "--top-k" in a.option_strings)
    for name, parser in COMMANDS.items():
        for action in _live_actions(parser):
            if "--top-k" in action.option_strings:
                assert (action.help, action.default) == (shared.help, shared.default), name
                assert any("--sample" in a.option_strings for a in parser._actions), name


#: Flags that several commands take with a different help or default on purpose: flag ->
#: why. Each must still be one concept in one unit.
SAME_NAME_EXCEPTIONS = {
    "--out": "what is written differs (a run, a model directory, a file of translations, a "
    "PNG, a report); its help says which; metavar PATH everywhere",
    "--overwrite": "train removes only an earlier run (its checkpoints); the others replace "
    "their output; the help says which",
    "--beam-size": "the beam everywhere; every command defaults to the [eval] beam_size of "
    "the job (train) or of the model directory's job.json, else 4",
    "--alpha": "the length penalty everywhere; the default is the job's or the model's [eval] "
    "alpha, else 0.6",
    "--max-tokens": "a batch's token budget; train's default is the task's recipe, "
    "translate's 4096 source tokens",
    "--seed": "a random seed everywhere; train's default is the job's, translate's none "
    "(sampling unseeded)",
    "--split": "a split of the model's task; evaluate scores the task's own, rollout draws "
    "test images",
    "--d-model": "a width everywhere; each picture or count has its own default",
    "--length": "positions drawn; viz pe draws 100, viz learned-pe all of the table",
    "--warmup": "warm-up steps; train's default is the recipe's, viz lr draws eq. 3's 4000",
    "--quantize": "weight types of different engines: translate's own int8 decoder, "
    "CTranslate2's types for export",
    "--preset": "a preset name; train's default is the task's recipe, flops counts paper-base",
    "--model": "one model everywhere; translate and evaluate also take several (repeated), "
    "an ensemble",
    "--src": "the source side: evaluate reads a FILE of sentences, viz attention draws one "
    "sentence (TEXT; issue 26 asks for that spelling); the metavar says which",
}


def _signature(action: argparse.Action) -> tuple:
    kind = type(action).__name__
    choices = tuple(action.choices) if action.choices is not None else None
    return (action.help, repr(action.default), action.type, choices, kind, action.metavar)


def test_a_flag_on_several_commands_is_one_flag():
    """Options with one name on several commands have the same help, default, type, choices
    and metavar (defined once, in cli/_args.py), or are listed above with the reason."""
    seen: dict[str, dict[tuple, list[str]]] = {}
    for name, parser in COMMANDS.items():
        for action in _live_actions(parser):
            for flag in action.option_strings:
                seen.setdefault(flag, {}).setdefault(_signature(action), []).append(name)
    for flag, signatures in seen.items():
        if flag in SAME_NAME_EXCEPTIONS or flag in ("-h", "--help"):
            continue
        assert len(signatures) == 1, (flag, signatures)


def test_the_exceptions_are_still_used():
    """An exception that no two commands need any more is removed, not kept."""
    counts: dict[str, int] = {}
    for parser in COMMANDS.values():
        for action in _live_actions(parser):
            for flag in action.option_strings:
                counts[flag] = counts.get(flag, 0) + 1
    assert not [flag for flag in SAME_NAME_EXCEPTIONS if counts.get(flag, 0) < 2]


@pytest.mark.parametrize("name", ["", *sorted(COMMANDS)])
def test_abbreviations_are_refused_everywhere(name):
    parser = build_parser() if not name else COMMANDS[name]
    assert parser.allow_abbrev is False, name


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--model", "m", "--beam", "4", "x"],
        ["train", "--max-step", "3"],
        ["viz", "masks", "--pad", "5"],
        ["export", "--model", "m", "--out", "o", "--to", "huggingface", "--over"],
    ],
)
def test_an_abbreviated_flag_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert (
        f"attnlab {' '.join(argv[:2]) if argv[0] == 'viz' else argv[0]}: error: unrecognized" in err
    )


@pytest.mark.parametrize("name", ["masks", "viz masks"])
def test_masks_share_causal_with_one_default(name):
    causal = next(a for a in COMMANDS[name]._actions if a.dest == "causal")
    assert isinstance(causal, argparse.BooleanOptionalAction)
    assert causal.option_strings == ["--causal", "--no-causal"] and causal.default is True


def test_masks_old_spellings_still_work(capsys):
    assert main(["masks", "--lengths", "2,1", "--causal"]) == 0  # masks' old flag
    causal = capsys.readouterr().out
    assert main(["masks", "--lengths", "2,1"]) == 0
    assert capsys.readouterr().out == causal  # --causal is the default
    assert main(["masks", "--lengths", "2,1", "--no-causal"]) == 0  # viz masks' old flag
    assert "look-ahead" not in capsys.readouterr().out


# -- presentation --------------------------------------------------------------------------


def test_export_shows_its_required_to():
    to = next(a for a in COMMANDS["export"]._actions if "--to" in a.option_strings)
    assert to.required
    assert "--to TARGET" in COMMANDS["export"].format_usage().replace("[--to TARGET]", "")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["export", "--out", "o", "--to", "huggingface"], "--model"),
        (["export", "--model", "MODEL", "--to", "huggingface"], "--out"),
        (["viz", "rollout"], "--model"),
    ],
)
def test_a_missing_model_or_out_is_a_usage_error(argv, flag, capsys, tmp_path):
    """argparse refuses it (exit status 2) before anything is read, naming the flag."""
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path) if word == "MODEL" else word for word in argv])
    assert stop.value.code == 2
    assert f"error: the following arguments are required: {flag}" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(n for n in COMMANDS if n.startswith("viz ")))
def test_every_picture_has_a_description(name):
    assert COMMANDS[name].description, name


def _python_functions() -> set[str]:
    """Names of attnlab's functions and methods a CLI text must not show."""
    import inspect

    import attnlab

    names = {"save_pretrained", "load_pretrained", "from_pretrained", "is_available"}
    for value in vars(attnlab).values():
        if inspect.isfunction(value):
            names.add(value.__name__)
        if inspect.isclass(value):
            names.update(n for n, v in vars(value).items() if inspect.isfunction(v))
    return {name for name in names if "_" in name.strip("_")}  # one-word names are words


def test_help_never_names_a_python_function():
    import re

    functions = _python_functions()
    for name, parser in [("attnlab", build_parser()), *COMMANDS.items()]:
        texts = [parser.description or "", parser.epilog or ""]
        texts += [a.help for a in parser._actions if a.help and a.help != argparse.SUPPRESS]
        for text in texts:
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
            assert not words & functions, (name, words & functions, text)
            assert "()" not in text, (name, text)

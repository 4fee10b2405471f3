"""The `attnlab` command line: exit codes and what it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main


def test_tour_runs_and_reports_parity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tour"]) == 0
    printed = capsys.readouterr().out
    assert "max |attnlab - torch|" in printed
    difference = float(printed.split("max |attnlab - torch| = ")[1].split()[0])
    assert difference < 1e-5
    # The demo's weights show exact zeros on the padded keys of sentence 2.
    assert "0.000  0.000" in printed
    # The model section: the paper's parameter count, and no cross-attention to padding.
    assert "paper-base: N=6, d_model=512, d_ff=2048, h=8: 63,082,496 parameters" in printed
    assert "logits (2, 5, 1000)" in printed
    assert "weight on sentence 2's padded source tokens: 0.0\n" in printed
    # The decoding section: cached steps match recomputation, and both searches print.
    cached = float(printed.split("max |cached - recomputed logits| = ")[1].split()[0])
    assert cached < 1e-5
    assert "DecoderCache(layers=2, length=6, capacity=8, cross=6 positions" in printed
    assert "greedy: [[" in printed and "beam 4: [[" in printed


def test_masks_prints_the_causal_padding_grid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["masks", "--lengths", "3,1", "--causal"]) == 0
    printed = capsys.readouterr().out
    assert "padding mask (1 = real token): [1, 0, 0]" in printed
    rows = [line.split()[2:] for line in printed.splitlines() if line.strip().startswith("query")]
    # Sequence 0 (length 3): lower-triangular. Sequence 1 (length 1): only key 0.
    assert rows[:3] == [["1", "0", "0"], ["1", "1", "0"], ["1", "1", "1"]]
    assert rows[3:] == [["1", "0", "0"]] * 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["masks", "--lengths", "2", "--pad-to", "1"],
            "--pad-to: expected >= the longest of --lengths (2), got 1",
        ),
        (["masks", "--lengths", "0,0"], "every length is 0"),
    ],
)
def test_bad_values_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unparseable_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["masks", "--lengths", "a,b"])
    assert raised.value.code == 2
    assert "comma-separated integers" in capsys.readouterr().err


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_console_script_and_module_entry_points() -> None:
    script = Path(sys.executable).parent / "attnlab"
    for command in ([str(script), "--help"], [sys.executable, "-m", "attnlab", "--version"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "attnlab" in done.stdout


def test_config_lists_presets_with_exact_parameter_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from attnlab import TransformerConfig, count_parameters

    assert main(["config"]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line}
    for name in TransformerConfig.preset_names():
        config = TransformerConfig.preset(name)
        encoder_count = int(lines[name][-1].replace(",", ""))
        assert encoder_count == count_parameters(config, "encoder")
    # The paper's base model: 63,082,496 parameters at a 37,000-token shared vocabulary.
    assert lines["paper-base"][6] == "63,082,496"
    # all-MiniLM-L6 has no decoder: no encoder-decoder or LM count.
    assert lines["minilm-l6"][6:8] == ["-", "-"]


def test_config_json_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from attnlab import TransformerConfig

    assert main(["config", "small", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert TransformerConfig.from_dict(data) == TransformerConfig.preset("small")


def test_config_unknown_preset_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["config", "paper-huge"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'paper-huge'" in capsys.readouterr().err


# -- attnlab viz -------------------------------------------------------------------------------


def _png_ok(path) -> bool:
    import matplotlib.image

    image = matplotlib.image.imread(path)
    return image.shape[0] > 50 and image.shape[1] > 50 and image[..., :3].std() > 0.02


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory: pytest.TempPathFactory):
    import torch

    from attnlab import Transformer, TransformerConfig, TransformerEncoder, TransformerLM

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    small = {"num_encoder_layers": 1, "num_decoder_layers": 1}
    Transformer(TransformerConfig.preset("tiny", **small)).save_pretrained(root / "tr")
    lm_config = TransformerConfig.preset("tiny", positional="learned", **small)
    TransformerLM(lm_config).save_pretrained(root / "lm")
    TransformerEncoder(TransformerConfig.preset("tiny", **small)).save_pretrained(root / "enc")
    return root


def test_viz_attention_of_each_model_type(saved_models, tmp_path, capsys) -> None:
    out = tmp_path / "tr"
    argv = ["viz", "attention", "--model", str(saved_models / "tr"), "--src-ids", "5 6 7 8"]
    assert main([*argv, "--max-new-tokens", "4", "--out", str(out), "--dpi", "50"]) == 0
    for kind in ("encoder", "decoder", "cross"):
        assert _png_ok(out / f"{kind}.png"), kind
    argv = ["viz", "attention", "--model", str(saved_models / "lm"), "--src-ids", "5,6,7"]
    assert main([*argv, "--out", str(tmp_path / "lm"), "--dpi", "50", "--heads", "0,1"]) == 0
    assert _png_ok(tmp_path / "lm" / "decoder.png")
    assert not (tmp_path / "lm" / "cross.png").exists()
    argv = ["viz", "attention", "--model", str(saved_models / "enc"), "--src-ids", "5 6"]
    assert main([*argv, "--out", str(tmp_path / "enc"), "--dpi", "50"]) == 0
    assert _png_ok(tmp_path / "enc" / "encoder.png")
    assert "wrote" in capsys.readouterr().out


@pytest.mark.slow  # not in make test-fast: waits on a deadline, or one of several alike
@pytest.mark.parametrize(
    "argv",
    [
        ["pe", "--d-model", "32", "--length", "20"],
        ["masks", "--lengths", "3,2"],
        ["lr", "--steps", "2000", "--warmup", "400", "--extra", "256:400"],
        ["learned-pe", "--model", "LM", "--length", "16"],
    ],
    ids=["pe", "masks", "lr", "learned-pe"],
)
def test_viz_pictures_are_written(argv, saved_models, tmp_path) -> None:
    argv = [str(saved_models / "lm") if a == "LM" else a for a in argv]
    out = tmp_path / "picture.png"
    assert main(["viz", *argv, "--out", str(out), "--dpi", "50"]) == 0
    assert _png_ok(out)


def test_viz_curves_from_a_metrics_csv(tmp_path, capsys) -> None:
    csv = tmp_path / "metrics.csv"
    csv.write_text("step,loss,val_loss,lr\n1,9.0,,1e-4\n2,8.0,8.5,2e-4\n3,7.5,,3e-4\n")
    out = tmp_path / "curves.png"
    assert main(["viz", "curves", str(csv), "--out", str(out), "--dpi", "50"]) == 0
    assert _png_ok(out)
    # several runs in one picture, named in the legend
    other = tmp_path / "other.csv"
    other.write_text("step,loss,val_loss\n1,9.5,\n2,8.2,8.9\n")
    both = tmp_path / "both.png"
    argv = ["viz", "curves", str(csv), str(other), "--out", str(both), "--dpi", "50"]
    assert main([*argv, "--label", "base", "--label", "long"]) == 0
    assert _png_ok(both)
    assert main([*argv, "--label", "base"]) == 2
    assert "--label: expected one per CSV (2), got 1" in capsys.readouterr().err


def test_viz_errors_are_clear(saved_models, capsys) -> None:
    assert main(["viz", "attention", "--model", str(saved_models / "tr")]) == 2
    assert "--src: required for an encoder-decoder model (or --src-ids)" in capsys.readouterr().err
    assert main(["viz", "learned-pe", "--model", str(saved_models / "tr")]) == 2
    assert "not 'learned'" in capsys.readouterr().err
    assert main(["viz", "curves", "no-such-file.csv"]) == 2
    assert "no-such-file.csv" in capsys.readouterr().err


def test_every_command_has_complete_help(capsys) -> None:
    for argv in (["flops"], ["explain"], ["viz"], ["viz", "attention"], ["viz", "lr"]):
        with pytest.raises(SystemExit) as done:
            main([*argv, "--help"])
        assert done.value.code == 0
        assert "usage: attnlab" in capsys.readouterr().out

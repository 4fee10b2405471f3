"""The `attnlab` command line: exit codes and what it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main


def test_demo_runs_and_reports_parity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
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
            ["masks", "--lengths", "2", "--max-len", "1"],
            "max_len: expected >= the longest length 2",
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

"""Bounded inputs (issue 26, section 4): a hostile line costs no more than the model's max_len.

Every entry point that translates (``attnlab translate``, ``evaluate --src``, the Translator)
cuts a source to the model's ``max_len`` tokens, after cutting its text to ``CHARS_PER_TOKEN``
characters per token of it before tokenizing, and caps the output at ``max_len`` tokens, also
for a sinusoidal model, which has no limit of its own. ``--too-long refuse`` leaves such a line
out instead; a line that is not UTF-8 is an error naming its file and line, before any work,
or U+FFFD with ``--errors replace``. The work is bounded by tokens and steps: the tests record
what reaches the tokenizer and the decoder.
"""

from __future__ import annotations

import io
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import attnlab.decode.search
import attnlab.inference.scores
import attnlab.inference.translator
from _helpers import TINY_CLI
from attnlab.cli import build_parser, main
from attnlab.data.tokenizer import Tokenizer
from attnlab.decode.options import DecodingOptions
from attnlab.inference.bounds import CHARS_PER_TOKEN, TOO_LONG_CHOICES, TooLong
from attnlab.inference.translator import Translator

#: 203,000 characters of number words: tens of thousands of tokens, one line.
LONG = "nine hundred and ninety-nine " * 7000
ORDINARY = ["seven", "three hundred and twelve", "", "forty-two"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY_CLI's model (4 steps: it rarely ends a sentence, so outputs run to their budget,
    which is what these tests bound). A sinusoidal model with max_len 64."""
    out = tmp_path_factory.mktemp("bounds")
    assert main([*TINY_CLI, "--out", str(out / "run"), "--no-progress"]) == 0
    return out / "run" / "model"


@pytest.fixture(scope="module")
def alone(model_dir: Path):
    """Each line's greedy translation on its own (the library, one line per call)."""
    translator = Translator.load(model_dir, decoding=DecodingOptions(beam_size=1), device="cpu")
    return lambda line: translator.translate([line])[0]


@pytest.fixture()
def work(monkeypatch) -> dict[str, list[int]]:
    """What reaches the tokenizer (characters per text) and the decoder (source widths, output
    budgets and output lengths, in tokens)."""
    seen: dict[str, list[int]] = {"chars": [], "widths": [], "budgets": [], "outputs": []}
    encode_batch = Tokenizer.encode_batch

    def recording_encode(self, texts):
        seen["chars"] += [len(t) for t in texts]
        return encode_batch(self, texts)

    monkeypatch.setattr(Tokenizer, "encode_batch", recording_encode)
    # The Translator decodes through attnlab.decode.search.decode, which calls these.
    for name in ("greedy_search", "beam_search"):
        search = getattr(attnlab.decode.search, name)

        def recording(model, sources, *, _search=search, **options):
            seen["widths"] += [len(row) for row in sources]
            budget = options.get("max_new_tokens")
            seen["budgets"].append(budget if budget is not None else -1)
            found = _search(model, sources, **options)
            seen["outputs"] += [len(row) for row in found.tolist()]
            return found

        monkeypatch.setattr(attnlab.decode.search, name, recording)
    return seen


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _bounded(work: dict[str, list[int]], max_len: int = 64) -> None:
    assert work["widths"] and max(work["widths"]) <= max_len
    assert max(work["outputs"]) <= max_len
    assert all(budget <= max_len for budget in work["budgets"])  # -1: each row's source + 50
    assert max(work["chars"]) <= CHARS_PER_TOKEN * max_len


def test_too_long_takes_what_the_translator_takes(model_dir, capsys):
    """``--too-long`` parses each of the Translator's choices, with its default; a value the
    Translator refuses, the flag refuses too, naming the choices."""
    parser = build_parser()
    given = ["translate", "--model", str(model_dir)]
    assert parser.parse_args([*given, "x"]).too_long == "cut"
    for choice in TOO_LONG_CHOICES:
        assert parser.parse_args([*given, "--too-long", choice, "x"]).too_long == choice
        assert Translator.load(model_dir, device="cpu", too_long=choice).too_long == choice
    with pytest.raises(SystemExit):
        parser.parse_args([*given, "--too-long", "skip", "x"])
    assert "invalid choice: 'skip'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^too_long: expected one of cut, refuse, got 'skip'"):
        Translator.load(model_dir, device="cpu", too_long="skip")


def test_a_200000_character_line_is_cut_with_a_note_and_costs_max_len(
    model_dir, alone, work, tmp_path, capsys
):
    lines = [ORDINARY[0], LONG, *ORDINARY[1:]]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(model_dir), "--beam-size", "1", "-i", str(source)]
    status, out, err = _run(argv, capsys)
    assert status == 0, err
    got = out.split("\n")[:-1]
    assert len(got) == len(lines)
    assert [got[i] for i in (0, 2, 3, 4)] == [alone(line) for line in ORDINARY]
    with pytest.warns(UserWarning, match="cut to its first 64 tokens"):
        assert got[1] == alone(LONG[: CHARS_PER_TOKEN * 64])  # its first 64 tokens
    assert err.count("\n") == 1
    assert err.startswith(f"attnlab translate: note: --input {source} line 2: 203,000 characters")
    assert "cut to its first 64 tokens" in err
    _bounded(work)


def test_refuse_leaves_the_line_empty_with_an_error_and_translates_the_others(
    model_dir, alone, work, tmp_path, capsys
):
    middle = "seven hundred and seventy-seven " * 20  # 640 characters, over 64 tokens
    lines = [ORDINARY[0], middle, ORDINARY[1]]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out_file = tmp_path / "out.txt"
    argv = ["translate", "--model", str(model_dir), "--beam-size", "2", "--alpha", "0.6"]
    argv += ["-i", str(source)]
    status, out, err = _run([*argv, "--too-long", "refuse", "--out", str(out_file)], capsys)
    assert status == 2 and out == ""
    beam = Translator.load(model_dir, decoding=DecodingOptions(beam_size=2), device="cpu")
    expected = [beam.translate([ORDINARY[0]])[0], "", beam.translate([ORDINARY[1]])[0]]
    assert out_file.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert err.count("\n") == 1
    assert err.startswith(f"attnlab translate: error: --input {source} line 2: ")
    assert "tokens, more than the model's max_len of 64: refused" in err
    assert 64 not in work["widths"]  # the refused line never reached the decoder
    _bounded(work)


def test_text_arguments_and_n_best_are_bounded_too(model_dir, work, capsys):
    argv = ["translate", "--model", str(model_dir), "--beam-size", "2", "--alpha", "0.6"]
    argv += ["--n-best", "2"]
    status, out, err = _run([*argv, "--too-long", "refuse", "seven", LONG], capsys)
    assert status == 2
    assert out.split("\n")[2:] == ["", ""]  # two n-best lines, then an empty one
    assert err.startswith("attnlab translate: error: TEXT 2: 203,000 characters")
    _bounded(work)


def test_max_new_tokens_is_capped_by_max_len(model_dir, work, capsys):
    argv = ["translate", "--model", str(model_dir), "--beam-size", "1"]
    status, out, _ = _run([*argv, "--max-new-tokens", "100000", "seven"], capsys)
    assert status == 0 and out.count("\n") == 1
    assert work["budgets"] == [64]
    _bounded(work)


@pytest.mark.slow  # a subprocess: imports torch
def test_the_command_on_a_hostile_file_ends_well_within_a_generous_deadline(model_dir, tmp_path):
    """The issue's case through the real command: before, over 10 minutes at 900 MB."""
    source = tmp_path / "in.txt"
    source.write_text(f"seven\n{LONG}\n{LONG}x\neight\n", encoding="utf-8")
    command = [sys.executable, "-m", "attnlab", "translate", "--model", str(model_dir)]
    done = subprocess.run(
        [*command, "-i", str(source)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 4 and done.stderr.count("note: ") == 2


# -- text that is not UTF-8 --------------------------------------------------------------------


def _bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.txt"
    # A CRLF line, a Latin-1 byte, a euro sign cut off after 2 of its 3 bytes.
    path.write_bytes(b"seven\r\nf\xfcnf\n\xe2\x82\nforty-two\n")
    return path


def test_a_line_that_is_not_utf8_is_one_error_naming_the_file_and_line_before_any_work(
    model_dir, work, tmp_path, capsys
):
    source = _bad_file(tmp_path)
    out_file = tmp_path / "out.txt"
    argv = ["translate", "--model", str(model_dir), "-i", str(source), "--out", str(out_file)]
    status, out, err = _run(argv, capsys)
    assert status == 2 and out == ""
    assert err == (
        f"attnlab translate: error: --input {source} line 2: not UTF-8 (byte 0xfc at byte 2 of "
        f"the line); fix the file, or pass --errors replace to read bad bytes as U+FFFD\n"
    )
    assert not out_file.exists()
    assert work["chars"] == [] and work["widths"] == []  # nothing tokenized, nothing decoded


def test_errors_replace_reads_bad_bytes_as_u_fffd(model_dir, alone, tmp_path, capsys):
    source = _bad_file(tmp_path)
    argv = ["translate", "--model", str(model_dir), "--beam-size", "1", "-i", str(source)]
    status, out, err = _run([*argv, "--errors", "replace"], capsys)
    assert status == 0 and err == ""
    expected = ["seven", "f\ufffdnf", "\ufffd", "forty-two"]
    assert [line.decode("utf-8", errors="replace") for line in (b"f\xfcnf", b"\xe2\x82")] == [
        expected[1],
        expected[2],
    ]  # Python's errors="replace": one U+FFFD for the cut-off sequence
    assert out.split("\n")[:-1] == [alone(line) for line in expected]


def test_standard_input_is_read_line_by_line_too(model_dir, monkeypatch, capsys):
    stdin = io.TextIOWrapper(io.BytesIO(b"seven\n\xff\neight\n"), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    status, _, err = _run(["translate", "--model", str(model_dir), "--beam-size", "1"], capsys)
    assert status == 2
    assert err.startswith("attnlab translate: error: standard input line 2: not UTF-8")


def test_evaluate_names_the_line_of_either_file_and_bounds_the_sources(
    model_dir, work, tmp_path, capsys
):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text(f"seven\n{LONG}\n", encoding="utf-8")
    ref.write_bytes(b"sieben\nneun\xe4\n")
    argv = ["evaluate", "--model", str(model_dir), "--src", str(src), "--ref", str(ref)]
    status, _, err = _run([*argv, "--json"], capsys)
    assert status == 2
    assert err.startswith(f"attnlab evaluate: error: --ref {ref} line 2: not UTF-8 (byte 0xe4")
    assert work["widths"] == []
    status, out, err = _run([*argv, "--json", "--errors", "replace", "--beam-size", "1"], capsys)
    assert status == 0 and '"sentences": 2' in out
    assert err.startswith(f"attnlab evaluate: note: --src {src} line 2: 203,000 characters")
    _bounded(work)
    status, _, err = _run([*argv, "--errors", "replace", "--too-long", "refuse"], capsys)
    assert status == 2 and f"error: --src {src} line 2: " in err and "refused" in err
    status, _, err = _run(["evaluate", "--model", str(model_dir), "--too-long", "refuse"], capsys)
    assert status == 2 and "error: --too-long: applies to the files of --src/--ref" in err


# -- the library -------------------------------------------------------------------------------


def test_the_translator_cuts_with_a_warning_or_refuses_with_an_error(model_dir, work):
    translator = Translator.load(model_dir, decoding=DecodingOptions(beam_size=1), device="cpu")
    with pytest.warns(UserWarning, match=r"^texts\[1\]: 203,000 characters, more than 1,280"):
        cut = translator.translate(["seven", LONG])
    assert len(cut) == 2 and cut[0] == translator.translate(["seven"])[0]
    _bounded(work)
    refusing = Translator.load(
        model_dir, decoding=DecodingOptions(beam_size=1), device="cpu", too_long="refuse"
    )
    calls = len(work["widths"])
    with pytest.raises(ValueError, match=r"^texts\[1\]: 203,000 characters.*: refused"):
        refusing.translate(["seven", LONG])
    assert len(work["widths"]) == calls  # refused before any decoding
    reports: list[TooLong] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a callback takes the place of the warning
        got = refusing.translate(["seven", LONG], on_too_long=reports.append)
    assert got == [translator.translate(["seven"])[0], ""]
    assert reports == [TooLong(1, len(LONG), "characters", 64, True)]
    with pytest.raises(ValueError, match="too_long: expected one of cut, refuse, got 'drop'"):
        Translator.load(model_dir, device="cpu", too_long="drop")


def test_the_translators_output_budget_is_capped_by_max_len(model_dir, work):
    asked = Translator.load(
        model_dir, decoding=DecodingOptions(beam_size=1, max_new_tokens=100_000), device="cpu"
    )
    asked.translate(["seven"])
    assert work["budgets"] == [64]
    default = Translator.load(model_dir, decoding=DecodingOptions(beam_size=1), device="cpu")
    middle = " ".join(["seven"] * 8)  # 15 to 64 tokens: source + 50 is over 64
    assert 64 - 50 < len(default.src_tokenizer.encode(middle)) <= 64
    default.translate(["seven", middle])
    # The two are decoded apart, each with the budget it has alone.
    assert work["budgets"][1:] == [-1, 64]
    _bounded(work)

"""`attnlab viz attention --src TEXT [--tgt TEXT]` (issue 26, section 6): text tokenised with
the model's own tokenizers, the pictures labelled with its tokens; without --tgt a translation
model shows its own greedy translation. Checked on what the plotting function receives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import attnlab.instruments.viz
from _helpers import TINY_CLI
from attnlab.cli import main
from attnlab.data import load_tokenizers
from attnlab.decode.search import greedy_search
from attnlab.models.transformer import load_pretrained

SOURCE = "three hundred and twelve"
TARGET = "dreihundertzwölf"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY_CLI's translation model (a joint BPE tokenizer, max_len 64)."""
    out = tmp_path_factory.mktemp("viz-text")
    assert main([*TINY_CLI, "--out", str(out / "run"), "--no-progress"]) == 0
    return out / "run" / "model"


@pytest.fixture()
def drawn(monkeypatch) -> list[dict]:
    """The keyword arguments of every call of viz.attention_maps (which still draws)."""
    calls: list[dict] = []
    draw = attnlab.instruments.viz.attention_maps

    def recording(maps, **options):
        calls.append({"maps": maps, **options})
        return draw(maps, **options)

    monkeypatch.setattr(attnlab.instruments.viz, "attention_maps", recording)
    return calls


def _pictures(out: Path) -> list[str]:
    found = sorted(p.name for p in out.glob("*.png"))
    assert all((out / name).read_bytes().startswith(PNG) for name in found)
    return found


def test_source_text_is_labelled_with_its_tokens_and_the_models_own_translation(
    model_dir, drawn, tmp_path, capsys
):
    out = tmp_path / "own"
    argv = ["viz", "attention", "--model", str(model_dir), "--src", SOURCE]
    assert main([*argv, "--out", str(out), "--dpi", "40"]) == 0, capsys.readouterr().err
    assert _pictures(out) == ["cross.png", "decoder.png", "encoder.png"]
    src_tokenizer, tgt_tokenizer = load_tokenizers(model_dir)
    ids = src_tokenizer.encode(SOURCE)
    model = load_pretrained(model_dir, device="cpu").eval()
    budget = min(len(ids) + 50, model.config.max_len - 1)
    own = greedy_search(model, torch.tensor([ids]), max_new_tokens=budget).tolist()[0]
    (call,) = drawn
    assert call["src_tokens"] == src_tokenizer.labels(ids)
    assert "".join(call["src_tokens"]) == SOURCE  # the pieces spell the sentence
    assert call["tgt_tokens"] == tgt_tokenizer.labels([model.config.bos_id, *own])
    assert call["tgt_tokens"][0] == "<bos>"
    # the maps are of those tokens: one row per target token, one column per source token
    assert call["maps"].cross[0].shape[-2:] == (len(own) + 1, len(ids))


def test_target_text_is_teacher_forced_and_labelled(model_dir, drawn, tmp_path, capsys):
    out = tmp_path / "forced"
    argv = ["viz", "attention", "--model", str(model_dir), "--src", SOURCE, "--tgt", TARGET]
    assert main([*argv, "--out", str(out), "--dpi", "40"]) == 0, capsys.readouterr().err
    _, tgt_tokenizer = load_tokenizers(model_dir)
    (call,) = drawn
    assert call["tgt_tokens"] == ["<bos>", *tgt_tokenizer.labels(tgt_tokenizer.encode(TARGET))]
    assert "".join(call["tgt_tokens"][1:]) == TARGET
    assert call["maps"].decoder[0].shape[-1] == len(call["tgt_tokens"])
    assert _pictures(out) == ["cross.png", "decoder.png", "encoder.png"]


def test_ids_still_label_with_ids(model_dir, drawn, tmp_path):
    argv = ["viz", "attention", "--model", str(model_dir), "--src-ids", "5 6 7"]
    assert main([*argv, "--tgt-ids", "1 8", "--out", str(tmp_path), "--dpi", "40"]) == 0
    assert drawn[0]["src_tokens"] == [5, 6, 7] and drawn[0]["tgt_tokens"] == [1, 8]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--src", SOURCE, "--src-ids", "5 6"],
            "--src: give --src TEXT or --src-ids IDS, not both",
        ),
        (["--src", "   "], "--src: empty text; give a sentence"),
        (["--src", "nine " * 300], "--src: 1,500 characters, more than the model takes"),
        (["--src", "nine " * 100], "tokens, more than the model takes (64: its max_len 64)"),
        (["--src", SOURCE, "--tgt", "drei" * 80], "--tgt: "),
        (["--tgt", TARGET], "--src: required for an encoder-decoder model (or --src-ids)"),
    ],
    ids=["both", "empty", "characters", "tokens", "long-target", "no-source"],
)
def test_bad_text_is_one_line_naming_the_flag(model_dir, drawn, tmp_path, capsys, extra, message):
    argv = ["viz", "attention", "--model", str(model_dir), "--out", str(tmp_path)]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert drawn == []

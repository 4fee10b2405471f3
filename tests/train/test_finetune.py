"""Fine-tuning: ``[model] init_from`` (``attnlab train --init-from MODEL_DIR``) continues from a
saved model's weights with its tokenizers, on another task's data.

A numbers model (the session's, ``numbers_model_dir``) is fine-tuned for a few steps on the
numbers task again, written as plain parallel files (the ``files`` task): the run starts from
exactly the given weights (its first evaluation's loss equals the starting model's), keeps the
given tokenizers, reports validation scores before and after, and refuses what would change
the architecture or the vocabulary, before any file is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from _paths import MULTI30K_DIR as MULTI30K
from _paths import needs_multi30k
from attnlab import load_pretrained
from attnlab.data.tokenizer import load_tokenizers
from attnlab.jobs import Job, train_job

pytestmark = pytest.mark.slow  # trains for a few steps and translates validation twice


def _write_numbers_files(directory: Path) -> dict[str, str]:
    """The numbers task's splits as parallel text files; the ``[task]`` table that reads them."""
    from attnlab.tasks.numbers import Numbers

    corpus = Numbers(high=199, valid_size=12, test_size=12).load()
    table: dict[str, str] = {"name": "files"}
    for split in ("train", "valid", "test"):
        pairs = corpus[split]
        for side, index in (("src", 0), ("tgt", 1)):
            path = directory / f"{split}.{side}"
            path.write_text("".join(p[index] + "\n" for p in pairs), encoding="utf-8")
            table[f"{split}_{side}"] = str(path)
    return table


def _job(start: Path, task: dict[str, str], **model) -> Job:
    return Job.from_dict(
        {
            "task": task,
            "model": {"init_from": str(start), **model},
            "train": {
                "max_steps": 4,
                "warmup": 1,
                "eval_every": 2,
                "checkpoint_every": 2,
                "log_every": 2,
                "keep_best": "val_bleu",
            },
            "eval": {"beam_size": 1, "bleu_sentences": 6},
        }
    )


def test_fine_tuning_continues_from_the_given_model(numbers_model_dir, tmp_path):
    task = _write_numbers_files(tmp_path)
    job = _job(numbers_model_dir, task, dropout=0.2)
    assert job.train["schedule"] == "cosine" and job.train["lr"] == 0.0005  # the recipe
    start = load_pretrained(numbers_model_dir)
    assert job.model_config() == type(start.config)(**{**start.config.to_dict(), "dropout": 0.2})
    lines: list[str] = []
    result = train_job(job, tmp_path / "run", progress=False, log=lines.append)
    # The tokenizers are the starting model's, file for file.
    src, tgt = load_tokenizers(tmp_path / "run" / "model")
    given, _ = load_tokenizers(numbers_model_dir)
    assert src.fingerprint() == given.fingerprint() and tgt is src
    tuned = load_pretrained(tmp_path / "run" / "model")
    assert tuned.config.d_model == start.config.d_model and tuned.config.dropout == 0.2
    changed = [
        name
        for name, p in tuned.state_dict().items()
        if not torch.equal(p, start.state_dict()[name])
    ]
    assert changed, "fine-tuning changed no weight"
    # Validation scores of the starting model before the first step, and of the result.
    assert any(line.startswith("starting model (") and "valid BLEU" in line for line in lines)
    assert any(line.startswith("fine-tuned model: valid BLEU") for line in lines)
    for key in ("valid_before", "valid_after"):
        assert set(result[key]) == {"bleu", "chrf", "exact_match"}
        assert 0 <= result[key]["chrf"] <= 100
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["valid_before"] == result["valid_before"]
    assert saved["init_from"] == str(numbers_model_dir)


def test_the_first_evaluation_is_the_starting_models(numbers_model_dir, tmp_path):
    """No step taken, the weights are the given ones: the validation loss that training
    measures at step 0 of a zero-learning-rate run equals the starting model's."""
    task = _write_numbers_files(tmp_path)
    job = _job(numbers_model_dir, task, dropout=0.0)
    job.train.update(lr=1e-12, max_steps=2, eval_every=2, keep_best=None)
    train_job(job, tmp_path / "run", progress=False)
    tuned = load_pretrained(tmp_path / "run" / "model")
    start = load_pretrained(numbers_model_dir)
    for name, p in start.state_dict().items():
        torch.testing.assert_close(tuned.state_dict()[name], p, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("model", "data", "named"),
    [
        ({"d_model": 32}, {}, "[model] d_model = 32"),
        ({"preset": "tiny"}, {}, "[model] preset"),
        ({}, {"tokenizer": {"vocab_size": 500}}, "[tokenizer]"),
    ],
)
def test_changing_the_architecture_or_vocabulary_is_refused(
    numbers_model_dir, tmp_path, model, data, named
):
    task = _write_numbers_files(tmp_path)
    job = Job.from_dict(
        {"task": task, "model": {"init_from": str(numbers_model_dir), **model}, **data}
    )
    with pytest.raises(ValueError) as caught:
        train_job(job, tmp_path / "run", progress=False)
    assert named in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()


def test_a_same_valued_architecture_key_is_accepted(numbers_model_dir, tmp_path):
    task = _write_numbers_files(tmp_path)
    d_model = load_pretrained(numbers_model_dir).config.d_model
    _job(numbers_model_dir, task, d_model=d_model).check()


def test_init_from_must_be_a_translation_model(tmp_path):
    task = _write_numbers_files(tmp_path)
    with pytest.raises(FileNotFoundError, match="init_from"):
        _job(tmp_path / "nowhere", task).check()


def test_the_cli_flag_builds_a_fine_tuning_job(numbers_model_dir, tmp_path, capsys):
    from attnlab.cli import build_job, build_parser, main

    task = _write_numbers_files(tmp_path)
    settings = [f"task.{k}={v}" for k, v in task.items() if k != "name"]
    argv = ["train", "--init-from", str(numbers_model_dir), "--task", "files"]
    for setting in settings:
        argv += ["--set", setting]
    job = build_job(build_parser().parse_args(argv))
    assert job.init_from == str(numbers_model_dir)
    assert job.train["lr"] == 0.0005 and job.train["keep_best"] == "val_chrf"
    job.check()
    out = tmp_path / "refused"
    for flag, value in (("--preset", "tiny"), ("--vocab-size", "500")):
        assert main([*argv, flag, value, "--out", str(out)]) != 0
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and flag in error[0] and "--init-from" in error[0]
        assert not out.exists()


@needs_multi30k
def test_the_domain_shift_tool_runs(numbers_model_dir, tmp_path, capsys):
    """tools/finetune_domain.py (docs/pretrained.md's table), shrunk: 2 steps, 8 sentences."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import finetune_domain

    argv = ["--model", str(numbers_model_dir), "--multi30k", str(MULTI30K)]
    argv += ["--out", str(tmp_path / "ft"), "--max-steps", "2", "--warmup", "1", "--limit", "8"]
    argv += ["--beam-size", "1"]
    assert finetune_domain.main(argv) == 0
    report = json.loads((tmp_path / "ft" / "finetune.json").read_text())
    assert report["train"]["max_steps"] == 2 and report["train"]["keep_best"] == "val_chrf"
    for side in ("before", "after"):
        assert set(report[side]) == {"numbers_test", "numbers_valid", "multi30k_valid"}
    table = capsys.readouterr().out
    assert "| numbers test: exact match |" in table and "| fine-tuning time |" in table
    assert len((tmp_path / "ft" / "data" / "test.en").read_text().splitlines()) == 500

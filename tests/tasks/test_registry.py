"""The task registry: each task is one registered class owning its [task] options; a new task
is one module (CONTRIBUTING.md's example, run here through `attnlab train`); saved jobs of the
flat [task] table before tasks were objects still read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnlab.jobs import Job, evaluate_model, read_job
from attnlab.tasks import TASKS, Task, get_task, register_task

ROOT = Path(__file__).resolve().parents[2]


def contributing_example() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- contributing: example task -->\n```python\n(.*?)```", text, re.S)
    assert match, "CONTRIBUTING.md: the example task's block is missing"
    return match.group(1)


@pytest.fixture
def reverse_task():
    """CONTRIBUTING.md's example task, registered for one test and removed after it."""
    namespace: dict = {"__name__": "contributing_example"}
    exec(compile(contributing_example(), "CONTRIBUTING.md", "exec", dont_inherit=True), namespace)
    yield namespace["Reverse"]
    TASKS.pop("reverse")


def test_the_built_in_tasks_in_the_order_train_offers_them():
    assert list(TASKS)[:5] == ["numbers", "multi30k", "files", "text", "digits"]
    for name, cls in TASKS.items():
        assert issubclass(cls, Task) and cls().name == name and get_task(name) is cls


def test_each_task_names_the_objective_that_trains_its_model():
    """The trainer is handed the task's objective; it trains the model the task builds."""
    from attnlab.models.transformer import Transformer, TransformerLM
    from attnlab.models.vision import VisionTransformer

    expected = {"numbers": Transformer, "multi30k": Transformer, "files": Transformer}
    expected.update(text=TransformerLM, digits=VisionTransformer)
    for name, model_class in expected.items():
        assert TASKS[name]().objective().model_class is model_class, name


def test_an_unknown_task_and_a_foreign_option_are_named():
    with pytest.raises(ValueError, match=r"^\[task\] name: expected one of \['numbers'"):
        get_task("numbrs")
    with pytest.raises(ValueError, match=r"unknown \[task\] fields \['text_file'\]"):
        Job.from_dict({"task": {"name": "numbers", "text_file": "a.txt"}})
    with pytest.raises(ValueError, match=r"did you mean 'high'"):
        Job.from_dict({"task": {"name": "numbers", "hihg": 3}})


def test_a_name_taken_twice_is_refused():
    from dataclasses import dataclass

    @dataclass
    class Other(Task):
        name: str = "numbers"

    with pytest.raises(ValueError, match="task 'numbers': already registered"):
        register_task(Other)


def test_a_saved_job_of_the_flat_task_table_still_reads(tmp_path):
    """job.json written before tasks were objects holds every task's keys, None for "the
    task's default": they are left out when a saved job is read, and only then."""
    flat = {
        "name": "digits", "src_lang": "en", "tgt_lang": "de", "data_dir": None, "low": 0,
        "high": 9999, "valid_size": None, "test_size": None, "seed": 3, "train_src": None,
        "train_tgt": None, "valid_src": None, "valid_tgt": None, "test_src": None,
        "test_tgt": None, "max_len": 200, "text_file": None, "valid_fraction": 0.05,
    }  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps({"task": flat}), encoding="utf-8")
    task = read_job(tmp_path).task
    assert (task.name, task.valid_size, task.test_size, task.seed) == ("digits", 180, 360, 3)
    with pytest.raises(ValueError, match="unknown"):
        Job.from_dict({"task": flat})


@pytest.mark.slow
def test_the_contributing_example_task_trains_from_the_command_line(reverse_task, tmp_path):
    from attnlab.cli import main

    out = tmp_path / "run"
    argv = [
        "train", "--task", "reverse", "--out", str(out), "--no-progress", "--max-steps", "30",
        "--eval-every", "30", "--set", "task.length=4", "--set", "tokenizer.vocab_size=300",
        "--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.num_heads=2",
        "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1",
        "--set", "eval.bleu_sentences=5", "--set", "train.average_last=1",
    ]  # fmt: skip
    assert main(argv) == 0
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert result["task"] == "reverse" and result["split"] == "test"
    assert result["sentences"] == 50 and len(result["examples"]) == 10
    # The scores are the saved model's on the test split of the job it saved: evaluating the
    # model directory again gives them back.
    again = evaluate_model(out / "model")
    for key in ("bleu", "chrf", "exact_match", "sentences"):
        assert again[key] == result[key], key
    assert [e["source"] for e in again["examples"]] == [e["source"] for e in result["examples"]]
    assert read_job(out / "model").task.length == 4

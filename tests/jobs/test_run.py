"""The main job end to end, small: `attnlab train` -> model directory -> translate / evaluate.

The full runs are `make demo` (numbers, <= 5 minutes) and `make train-multi30k` (6,600 steps,
41 minutes on 2 idle Xeon cores, 65 on a 2-core AMD EPYC); these are their smoke versions.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from _paths import MULTI30K_DIR as MULTI30K
from _paths import needs_multi30k
from attnlab import load_pretrained
from attnlab.cli import main
from attnlab.data.tokenizer import load_tokenizers
from attnlab.decode.options import DecodingOptions
from attnlab.jobs import TASKS, Job, evaluate_model, recipe

SMALL = [
    "--set", "task.high=299", "--set", "task.valid_size=30", "--set", "task.test_size=30",
    "--set", "tokenizer.vocab_size=300",
    "--set", "model.d_model=64", "--set", "model.d_ff=128",
    "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1",
    "--set", "train.schedule=transformer",  # eq. 3: a resumed run may extend max_steps
    "--set", "train.lr_factor=1.0", "--set", "train.warmup=40",
    "--set", "train.max_tokens=512", "--set", "train.keep_checkpoints=2",
    "--set", "train.average_last=2", "--set", "eval.bleu_sentences=20",
]  # fmt: skip


@pytest.fixture(scope="module")
def numbers_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("numbers")
    argv = ["train", "--config", "configs/numbers.toml", "--out", str(out), "--no-progress"]
    argv += ["--max-steps", "120", "--eval-every", "60", "--checkpoint-every", "60", *SMALL]
    assert main(argv) == 0
    return out


@pytest.mark.slow
def test_train_writes_the_model_the_metrics_and_the_results(numbers_run, capsys):
    out = numbers_run
    model_dir = out / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "job.json"):
        assert (model_dir / name).is_file(), name
    model = load_pretrained(model_dir)
    src, tgt = load_tokenizers(model_dir)
    assert src is tgt and model.config.vocab_size == src.vocab_size == 300
    results = json.loads((out / "results.json").read_text())
    assert results["split"] == "test" and results["sentences"] == 30
    assert {"bleu", "chrf", "exact_match", "bleu_signature", "chrf_signature"} <= set(results)
    assert results["training"]  # the trainer's summary
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"step", "loss", "lr", "val_loss", "val_bleu", "val_exact"} <= set(rows[0])
    # The columns that `keep_best` is checked against are the ones the run wrote.
    header = list(rows[0])
    job = Job.from_dict(json.loads((model_dir / "job.json").read_text()))
    assert header[header.index("val_loss") :] == list(job.validation_columns())
    evaluated = [r for r in rows if r["val_loss"]]
    assert [int(r["step"]) for r in evaluated][:2] == [60, 120]
    # Training learned something: the loss fell, and the translations share characters with
    # the references (chrF well above what an untrained model gets: 0).
    losses = [float(r["loss"]) for r in rows if r["loss"]]
    assert losses[-1] < 0.8 * losses[0]
    assert results["chrf"] > 15


@pytest.mark.slow
def test_translate_and_evaluate_a_trained_model(numbers_run, capsys):
    from attnlab.inference.translator import Translator

    model_dir = str(numbers_run / "model")
    capsys.readouterr()
    sources = ["twelve", "two hundred and one"]
    assert main(["translate", "--model", model_dir, *sources]) == 0
    lines = capsys.readouterr().out.splitlines()
    # The command prints the library's translations, one line each, with the model's decoding.
    assert lines == Translator.load(model_dir).translate(sources)
    assert main(["evaluate", "--model", model_dir, "--json", "--limit", "10"]) == 0
    report = json.loads(capsys.readouterr().out)
    # The command reports what evaluate_model scores: the job's split and decoding.
    scored = evaluate_model(model_dir, limit=10)
    for key in ("bleu", "chrf", "exact_match", "sentences", "beam_size", "alpha"):
        assert report[key] == scored[key], key
    assert report["sentences"] == 10 and report["split"] == "test"
    # Task.evaluate's result: the scores, the split and the task, then decoding and examples.
    assert list(scored)[-5:] == ["split", "task", "beam_size", "alpha", "examples"]
    with pytest.raises(
        ValueError, match=r"^split: the numbers task has \['test', 'train', 'valid'\], not 'x'$"
    ):
        evaluate_model(model_dir, split="x")


@pytest.mark.slow
def test_translate_reads_stdin_in_order(numbers_run, capsys, monkeypatch):
    import io

    model_dir = str(numbers_run / "model")
    monkeypatch.setattr("sys.stdin", io.StringIO("one\n\ntwo hundred\nthree\n"))
    capsys.readouterr()
    assert main(["translate", "--model", model_dir, "--batch-lines", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[1] == ""  # an empty line stays an empty line, in its place
    assert len(lines) == 5  # four translations and the final newline


@pytest.mark.slow
def test_resume_continues_from_the_last_checkpoint(numbers_run, capsys):
    argv = ["train", "--config", "configs/numbers.toml", "--out", str(numbers_run)]
    argv += ["--no-progress", "--resume", "--max-steps", "180", "--eval-every", "60"]
    argv += ["--checkpoint-every", "60", *SMALL]
    assert main(argv) == 0
    with open(numbers_run / "metrics.csv", newline="") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps == sorted(set(steps)) and steps[-1] == 180  # continued, nothing repeated


def test_a_train_run_checks_its_job_once(tmp_path, monkeypatch):
    """`attnlab train`, start to end: the job is checked once and its TrainConfig built once;
    the task plans epoch 0 to report its padding and the trainer trains on that plan (planning
    an epoch of millions of pairs takes a second of the start). That calls only go down the
    layers is the import contract's (tests/test_architecture.py)."""
    import attnlab.data.batching as batching
    from attnlab.train.config import TrainConfig

    planned: list[int] = []  # the number of examples of each plan
    pack = batching._pack
    monkeypatch.setattr(batching, "_pack", lambda *a: planned.append(len(a[0])) or pack(*a))
    built = {"check": 0, "TrainConfig": 0}

    def count(owner: type, name: str, key: str) -> None:  # owner.name, counted under key
        method = getattr(owner, name)

        def counted(self, *args, **kwargs):
            built[key] += 1
            return method(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    count(Job, "check", "check")
    count(TrainConfig, "__init__", "TrainConfig")
    argv = ["train", "--config", "configs/numbers.toml", "--out", str(tmp_path / "run")]
    argv += ["--no-progress", "--max-steps", "2", "--eval-every", "2", *SMALL]
    assert main(argv) == 0
    assert built == {"check": 1, "TrainConfig": 1}
    train_examples = max(planned)  # 240 numbers pairs; the validation's 30 are planned once too
    assert train_examples > 30 and planned.count(train_examples) == 1, planned


@pytest.mark.slow
@needs_multi30k
def test_multi30k_smoke_run(tmp_path, capsys):
    """The Multi30K benchmark's config for about a minute: it reads the real corpus, trains,
    and scores the test split with sacreBLEU."""
    argv = ["train", "--config", "configs/multi30k-en-de.toml", "--out", str(tmp_path)]
    argv += ["--data-dir", str(MULTI30K), "--no-progress", "--max-steps", "40", "--warmup", "10"]
    argv += ["--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1"]
    argv += ["--set", "train.eval_every=40", "--set", "train.checkpoint_every=40"]
    argv += ["--set", "eval.bleu_sentences=20", "--set", "eval.beam_size=1"]
    argv += ["--set", "tokenizer.vocab_size=2000", "--set", "train.max_tokens=1024"]
    assert main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["task"] == "multi30k" and results["sentences"] == 1000
    assert results["bleu_signature"].startswith("nrefs:1|case:mixed")
    best = results["training"]["best"]  # the recipe keeps the best model by validation BLEU
    assert best["column"] == "val_bleu" and best["step"] == 40
    assert (tmp_path / "best" / "job.json").is_file()


@pytest.mark.slow
def test_a_language_model_on_a_text_file(tmp_path, capsys):
    """The `text` task: TransformerLM on a plain text file, scored by perplexity."""
    from attnlab.data.corpora import numbers

    text = tmp_path / "corpus.txt"
    lines = [
        f"{src} is {tgt} in German."
        for src, tgt in numbers(high=399, valid_size=20, test_size=20)["train"]
    ]
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "lm"
    argv = ["train", "--task", "text", "--text-file", str(text), "--out", str(out)]
    argv += ["--no-progress", "--max-steps", "60", "--eval-every", "30", "--checkpoint-every", "30"]
    argv += ["--preset", "tiny", "--vocab-size", "300", "--set", "train.warmup=30"]
    argv += ["--set", "train.max_tokens=1024", "--set", "train.keep_checkpoints=2"]
    argv += ["--set", "train.average_last=2", "--set", "model.num_decoder_layers=1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "perplexity" in printed and "attnlab evaluate --model" in printed
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "text" and results["split"] == "valid"
    # Trained for 60 steps on a repetitive text: far better than guessing among 300 subwords.
    assert 1.0 < results["perplexity"] < 100
    assert main(["evaluate", "--model", str(out / "model"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["perplexity"] == pytest.approx(results["perplexity"], rel=1e-6)
    # Beam settings mean nothing for perplexity: refused in one line, split or --src file.
    for extra in (["--alpha", "1.0"], ["--beam-size", "2"], ["--src", str(text), "--alpha", "0"]):
        assert main(["evaluate", "--model", str(out / "model"), *extra]) == 2
        err = capsys.readouterr().err
        assert f"error: {extra[-2]}: " in err and "perplexity" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match=r"^decoding: the text task"):
        evaluate_model(out / "model", decoding=DecodingOptions(alpha=1.0))
    with pytest.raises(ValueError, match=r"^engine ctranslate2: the text task"):
        evaluate_model(out / "model", engine="ctranslate2")
    assert list(report)[-2:] == ["split", "task"]
    with pytest.raises(
        ValueError, match=r"^split: the text task has \['train', 'valid'\], not 'test'$"
    ):
        evaluate_model(out / "model", split="test")


@pytest.mark.parametrize("task", [name for name, task in TASKS.items() if task.recipe])
def test_a_task_alone_runs_its_recipe_the_file_in_configs(task):
    """`attnlab train --task NAME` with no --config runs the task's recipe: the packaged TOML
    file that configs/ links to (one copy of each recipe), and its values are valid."""
    from_file = Job.from_toml(Path("configs") / TASKS[task].recipe)
    alone = Job.from_dict({"task": {"name": task}})
    assert alone.to_dict() == from_file.to_dict()
    assert alone.task.name == task
    alone.check()
    assert recipe(task) == recipe(task) and recipe(task) is not recipe(task)  # fresh copies


def test_the_cli_offers_the_registered_tasks():
    from attnlab.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    train = sub.choices["train"]
    (task,) = [a for a in train._actions if a.dest == "task"]
    assert tuple(task.choices) == tuple(TASKS) == ("numbers", "multi30k", "files", "text", "digits")


# -- a job is checked before any work ---------------------------------------------------------


@pytest.fixture
def no_work(monkeypatch):
    """Record any call that reads a corpus or trains a tokenizer (none may happen)."""
    from attnlab.data import corpora
    from attnlab.data.tokenizer import Tokenizer

    calls: list[str] = []

    def refuse(name):
        def call(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was called before the job was checked")

        return call

    for cls in TASKS.values():
        monkeypatch.setattr(cls, "load", refuse(f"{cls.__name__}.load"))
    for name in ("numbers", "multi30k", "parallel_files", "text_corpus"):
        monkeypatch.setattr(corpora, name, refuse(f"corpora.{name}"))
    monkeypatch.setattr(Tokenizer, "train", refuse("Tokenizer.train"))
    return calls


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--set", "train.patiense=3"], "[train] fields ['patiense']; did you mean 'patience'?"),
        (["--set", "model.d_modle=64"], "[model] fields ['d_modle']; did you mean 'd_model'?"),
        (["--set", "eval.beam=2"], "unknown [eval] fields ['beam']; did you mean 'beam_size'?"),
        (["--set", "model.d_model=-1"], "[model] d_model: expected a positive int, got -1"),
        (["--set", "train.warmup=0"], "[train] warmup: expected a positive int, got 0"),
        (["--preset", "digits"], "[model] preset: unknown name 'digits'; expected one of"),
        (["--set", "train.out=x"], "[train] out: the run directory is given by --out"),
    ],
)  # fmt: skip
def test_a_job_typo_fails_before_any_work(argv, expected, tmp_path, capsys, no_work):
    """Through the real CLI: one line naming the table and the setting, with the nearest known
    key for a near miss; no corpus read, no tokenizer trained, no run directory created."""
    out = tmp_path / "run"
    assert main(["train", "--task", "numbers", "--out", str(out), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab train: error: ") and err.count("\n") == 1, err
    assert expected in err
    assert not out.exists() and no_work == []


def test_a_job_file_typo_names_the_file_and_the_table(tmp_path, capsys, no_work):
    job = tmp_path / "vit.toml"
    job.write_text('[task]\nname = "digits"\n\n[model]\nnum_layer = 2\n', encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--config", str(job), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "vit.toml: unknown [model] fields ['num_layer']; did you mean 'num_layers'?" in err
    assert not out.exists() and no_work == []
    job.write_text("[trian]\nmax_steps = 5\n", encoding="utf-8")
    assert main(["train", "--config", str(job), "--out", str(out)]) == 2
    assert "vit.toml: unknown tables ['trian']; did you mean [train]?" in capsys.readouterr().err
    assert not out.exists() and no_work == []


def test_train_job_checks_values_before_creating_the_run_directory(tmp_path, no_work):
    from attnlab.jobs import train_job

    job = Job.from_dict({"task": {"name": "digits"}, "train": {"lr": -1.0}})
    with pytest.raises(ValueError, match=r"^\[train\] lr: expected a positive number, got -1.0"):
        train_job(job, tmp_path / "run")
    assert not (tmp_path / "run").exists() and no_work == []


def test_a_job_json_that_is_not_tables_is_named(tmp_path):
    from attnlab.jobs import evaluate_model

    (tmp_path / "job.json").write_text("[]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"job\.json: expected a JSON object, got list"):
        evaluate_model(tmp_path)


def test_job_tables_must_be_tables():
    with pytest.raises(TypeError, match=r"\[train\]: expected a table of settings, got 5"):
        Job.from_dict({"train": 5})
    job = Job.from_dict({"task": {"name": "digits"}, "train": {"max_epochs": 3}})
    assert job.train["max_epochs"] == 3 and job.train["schedule"] == "cosine"
    assert job.model == {"preset": "digits"}

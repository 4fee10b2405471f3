"""The ``files`` task on the data path of large corpora: tokenizers from a sample, the
training split as token shards on disk (cached), several corpora mixed, every problem of the
job found before any work, and a job without a test split. Trained on the numbers task's
pairs written as files, it gives bit for bit the model the in-memory path gives."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from _paths import MULTI30K_DIR, needs_multi30k
from attnlab.cli import main
from attnlab.data.corpora import numbers
from attnlab.jobs import Job, recipe, train_job

SMALL = {
    "model": {
        "preset": "small", "d_model": 32, "d_ff": 64, "num_heads": 2,
        "num_encoder_layers": 1, "num_decoder_layers": 1,
    },
    "tokenizer": {"vocab_size": 300},
    "train": {
        "max_steps": 12, "warmup": 4, "eval_every": 12, "checkpoint_every": 12,
        "average_last": 1, "max_tokens": 512, "seed": 3, "log_every": 4,
    },
    "eval": {"beam_size": 1, "bleu_sentences": 5},
}  # fmt: skip
CORPUS = {"high": 299, "valid_size": 20, "test_size": 20, "seed": 0}


def write_pairs(directory: Path, pairs, split: str, compress: bool = False) -> tuple[str, str]:
    paths = []
    for side, lang in enumerate(("en", "de")):
        path = directory / (f"{split}.{lang}" + (".gz" if compress else ""))
        text = "".join(pair[side] + "\n" for pair in pairs).encode("utf-8")
        path.write_bytes(gzip.compress(text, mtime=0) if compress else text)
        paths.append(str(path))
    return paths[0], paths[1]


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """The numbers corpus of CORPUS as a files job's [task] table (the training split
    gzipped)."""
    corpus = numbers(**CORPUS)
    task = {"name": "files", "src_lang": "en", "tgt_lang": "de"}
    for split in ("train", "valid", "test"):
        src, tgt = write_pairs(tmp_path, corpus[split], split, compress=split == "train")
        task[f"{split}_src"], task[f"{split}_tgt"] = src, tgt
    return task


def weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "model" / "model.safetensors"))


@pytest.mark.slow
def test_the_shard_path_trains_the_model_the_in_memory_path_trains(files, tmp_path):
    """Same pairs, same seed: the files task (sampled tokenizer, cleaning off, shards on disk)
    and the numbers task (everything in memory) train the same weights, bit for bit."""
    cache = str(tmp_path / "cache")
    recipe_ = recipe("numbers")  # what the numbers job takes from its recipe, the files job too
    tables = {k: {**recipe_.get(k, {}), **v} for k, v in SMALL.items()}
    in_memory = Job.from_dict({**tables, "task": {"name": "numbers", **CORPUS}})
    on_disk = Job.from_dict({**tables, "task": {**files, "clean": False, "cache_dir": cache}})
    assert in_memory.to_dict()["train"] == on_disk.to_dict()["train"]
    a = train_job(in_memory, tmp_path / "memory", progress=False)
    lines: list[str] = []
    b = train_job(on_disk, tmp_path / "disk", progress=False, log=lines.append)
    assert any("shards prepared" in line for line in lines)
    assert a["training"]["train_tokens"] == b["training"]["train_tokens"]
    wa, wb = weights(tmp_path / "memory"), weights(tmp_path / "disk")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (a["bleu"], a["chrf"]) == (b["bleu"], b["chrf"])
    again: list[str] = []  # a second run reuses the tokenizers and the shards
    train_job(on_disk, tmp_path / "disk2", progress=False, log=again.append)
    assert any("shards reused" in line for line in again)
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1


@pytest.mark.slow
def test_a_job_without_a_test_split_trains_and_says_so(files, tmp_path, capsys):
    del files["test_src"], files["test_tgt"]
    config = tmp_path / "job.toml"
    tables = {**SMALL, "task": {**files, "cache_dir": str(tmp_path / "cache")}}
    config.write_text(_toml(tables), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "no test split" in printed and "nothing scored on test" in printed
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert result["split"] is None and "bleu" not in result
    assert "cleaning: kept" in (out / "train.log").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"valid_src": None, "valid_tgt": None}, "valid_src, valid_tgt: required"),
        ({"test_tgt": None}, "test_src, test_tgt: give both or neither"),
        ({"train_src": "nope.en"}, "train_src, train_tgt: nope.en: no such file"),
        ({"short": True}, "train_src, train_tgt: the files differ in length"),
        ({"clean": {"max_ratio": -1}}, "[task] clean: max_ratio"),
        ({"temperature": 2.0}, "[task] temperature: mixes [task] corpora"),
        ({"corpora": [{"src": "a", "tgt": "b"}]}, "give the training corpora one way"),
    ],
)
def test_every_problem_of_the_job_is_found_before_any_work(files, tmp_path, change, message):
    if change.pop("short", False):
        short = tmp_path / "short.de"
        short.write_text("eins\n", encoding="utf-8")
        change = {"train_tgt": str(short)}
    files.update(change)
    out = tmp_path / "run"
    with pytest.raises((ValueError, OSError)) as error:
        train_job(Job.from_dict({**SMALL, "task": files}), out, progress=False)
    assert message in str(error.value)
    assert not out.exists()  # nothing was read, trained or written


@pytest.mark.slow
def test_several_corpora_mix_by_weight(files, tmp_path):
    corpus = numbers(high=99, valid_size=5, test_size=5, seed=1)
    src, tgt = write_pairs(tmp_path / "", corpus["train"], "extra")
    task = {k: v for k, v in files.items() if not k.startswith("train_")}
    task["corpora"] = [
        {"name": "numbers", "src": files["train_src"], "tgt": files["train_tgt"]},
        {"name": "small", "src": src, "tgt": tgt, "weight": 2.0},
    ]
    task["cache_dir"] = str(tmp_path / "cache")
    lines: list[str] = []
    result = train_job(
        Job.from_dict({**SMALL, "task": task}), tmp_path / "run", progress=False, log=lines.append
    )
    assert any(line.startswith("small: shards prepared") for line in lines)
    assert result["training"]["steps"] == 12


def _toml(tables: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return repr(v)

    return "".join(
        f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items()) + "\n"
        for name, table in tables.items()
    )


@pytest.mark.slow
@needs_multi30k
def test_multi30k_as_files_trains_the_model_the_multi30k_task_trains(tmp_path):
    """The Multi30K recipe's data on the large-corpus path (its gzip files as a files job,
    cleaning off, every line in the tokenizer's sample) trains, step for step, the weights the
    multi30k task trains in memory: the recipe's quality carries over unchanged."""
    tables = {k: {**recipe("multi30k").get(k, {}), **v} for k, v in SMALL.items()}
    tables["tokenizer"]["vocab_size"] = 2000
    tables["train"].update(max_steps=6, warmup=2, eval_every=6, checkpoint_every=6)
    data = MULTI30K_DIR
    task = {"name": "files", "src_lang": "en", "tgt_lang": "de", "max_len": 100, "clean": False}
    for split, stem in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        task[f"{split}_src"] = str(data / f"{stem}.en.gz")
        task[f"{split}_tgt"] = str(data / f"{stem}.de.gz")
    task["cache_dir"] = str(tmp_path / "cache")
    tables["eval"]["bleu_sentences"] = 0
    tables["train"]["keep_best"] = None
    in_memory = Job.from_dict({**tables, "task": {"name": "multi30k", "data_dir": str(data)}})
    on_disk = Job.from_dict({**tables, "task": task})
    train_job(in_memory, tmp_path / "memory", progress=False)
    train_job(on_disk, tmp_path / "disk", progress=False)
    wa, wb = weights(tmp_path / "memory"), weights(tmp_path / "disk")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)

"""``attnlab prepare``: a files job's tokenizers and shards made ready ahead of training, in
the cache ``attnlab train`` then only opens; a task held in memory has nothing to prepare; a
second start reads no unchanged file for its digest (``--verify-data`` does); an epoch of
mixed corpora said at the start; and (slow) 2 gloo processes under torchrun whose
preparation outlasts the process group's timeout train without an error, with and without
``attnlab prepare`` first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.data import textfiles
from attnlab.data.corpora import numbers

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "_prepare_worker.py"
PAST_NS = 1_000_000_000 * 10**9  # 2001: files "long unchanged" (a fresh file is not remembered)

TABLES = """
[tokenizer]
vocab_size = 300

[model]
preset = "small"
d_model = 32
d_ff = 64
num_heads = 2
num_encoder_layers = 1
num_decoder_layers = 1

[train]
max_steps = 6
warmup = 2
eval_every = 6
checkpoint_every = 6
average_last = 1
max_tokens = 512
seed = 3
log_every = 3

[eval]
beam_size = 1
bleu_sentences = 0
"""


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.utime(path, ns=(PAST_NS, PAST_NS))
    return str(path)


def _job(tmp_path: Path, *, mixed: bool = True) -> tuple[Path, dict[str, str]]:
    """A files job on the numbers task's pairs (two training corpora, weights 1 and 3, when
    ``mixed``), its cache under ``tmp_path``; returns the job file and the training files."""
    data = tmp_path / "data"
    data.mkdir()
    corpus = numbers(high=299, valid_size=20, test_size=20, seed=0)
    extra = numbers(high=99, valid_size=5, test_size=5, seed=1)["train"]
    files = {}
    for name, pairs in (("train", corpus["train"]), ("extra", extra), ("valid", corpus["valid"])):
        for side, lang in enumerate(("en", "de")):
            files[f"{name}.{lang}"] = _write(data / f"{name}.{lang}", [p[side] for p in pairs])
    task = [
        "[task]",
        'name = "files"',
        'src_lang = "en"',
        'tgt_lang = "de"',
        f"valid_src = {json.dumps(files['valid.en'])}",
        f"valid_tgt = {json.dumps(files['valid.de'])}",
        f"cache_dir = {json.dumps(str(tmp_path / 'cache'))}",
    ]
    if mixed:
        task.append("corpora = [")
        for name, weight in (("train", 1.0), ("extra", 3.0)):
            src, tgt = json.dumps(files[f"{name}.en"]), json.dumps(files[f"{name}.de"])
            task.append(f'  {{ name = "{name}", src = {src}, tgt = {tgt}, weight = {weight} }},')
        task.append("]")
    else:
        task += [
            f"train_src = {json.dumps(files['train.en'])}",
            f"train_tgt = {json.dumps(files['train.de'])}",
        ]
    job = tmp_path / "job.toml"
    job.write_text("\n".join(task) + "\n" + TABLES, encoding="utf-8")
    return job, files


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths read for a digest from now on, in a process that has read nothing yet."""
    reads: list[str] = []
    scan = textfiles._scan
    monkeypatch.setattr(textfiles, "_scan", lambda p, **kw: reads.append(str(p)) or scan(p, **kw))
    monkeypatch.setattr(textfiles, "_SCANS", {})
    return reads


def test_an_in_memory_task_has_nothing_to_prepare(capsys) -> None:
    assert main(["prepare", "--config", "numbers"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "attnlab prepare: nothing to prepare for the numbers task: its data is small and held "
        "in memory (attnlab train reads it at the start)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "nope.toml"], "attnlab prepare: error: --config nope.toml: no such file"),
        (["--config", "numbers", "--set", "task.nope=1"], "unknown [task] fields ['nope']"),
        (["--config", "numbers", "--set", "nope"], "--set: expected TABLE.KEY=VALUE"),
    ],
)
def test_bad_input_is_one_line_naming_the_argument(argv, message, capsys) -> None:
    try:
        status = main(["prepare", *argv])
    except SystemExit as stop:  # argparse's usage error
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


def test_a_missing_training_file_is_named_before_any_work(tmp_path: Path, capsys) -> None:
    job, files = _job(tmp_path)
    os.unlink(files["extra.de"])
    assert main(["prepare", "--config", str(job)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnlab prepare: error: [task] corpora[1]: ")
    assert "no such file" in err and "\n" not in err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("*/meta.json"))


def test_prepare_then_a_start_reads_no_unchanged_file(tmp_path: Path, monkeypatch, capsys):
    """What `attnlab prepare` makes is what `attnlab train` looks for; a later start reads no
    training file for its digest, unless the file was touched or --verify-data asks."""
    job, files = _job(tmp_path)
    training = {files[name] for name in ("train.en", "train.de", "extra.en", "extra.de")}
    reads = _count_reads(monkeypatch)
    assert main(["prepare", "--config", str(job)]) == 0
    out = capsys.readouterr().out
    assert "train: shards prepared in" in out and "extra: shards prepared in" in out
    assert "train: cleaning: kept" in out and out.rstrip().endswith("opens what was prepared")
    assert training <= set(reads)
    meta = list((tmp_path / "cache").glob("*/meta.json"))
    assert len(meta) == 2 and (tmp_path / "cache" / textfiles.DIGESTS_FILE).is_file()

    reads = _count_reads(monkeypatch)  # a second start: everything ready, nothing read
    assert main(["prepare", "--config", str(job)]) == 0
    out = capsys.readouterr().out
    assert "train: shards ready" in out and "prepared in" not in out
    assert not training & set(reads)

    reads = _count_reads(monkeypatch)
    assert main(["prepare", "--config", str(job), "--verify-data"]) == 0
    assert "prepared in" not in capsys.readouterr().out
    assert training <= set(reads)  # each read once, in full
    assert len([r for r in reads if r in training]) == len(training)

    os.utime(files["extra.de"], ns=(PAST_NS + 1, PAST_NS + 1))  # touched
    reads = _count_reads(monkeypatch)
    assert main(["prepare", "--config", str(job)]) == 0
    assert "prepared in" not in capsys.readouterr().out  # the same bytes: the same shards
    assert [r for r in reads if r in training] == [files["extra.de"]]


@pytest.mark.slow
def test_train_after_prepare_opens_and_says_what_an_epoch_holds(tmp_path, monkeypatch, capsys):
    job, files = _job(tmp_path)
    training = {files[name] for name in ("train.en", "train.de", "extra.en", "extra.de")}
    assert main(["prepare", "--config", str(job)]) == 0
    capsys.readouterr()
    reads = _count_reads(monkeypatch)
    out_dir = tmp_path / "run"
    assert main(["train", "--config", str(job), "--out", str(out_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "prepared in" not in out and "train: shards reused" in out
    assert not training & set(reads)
    # Weights 1 : 3 over the 196 and 88 pairs cleaning keeps: the second is drawn fastest for
    # its size; an epoch holds all of it, and a third as many of the first.
    epoch = next(line for line in out.splitlines() if "an epoch:" in line and "pairs" in line)
    expected = "an epoch: 117 pairs: train 29 of 196 (14.8%; 24.8%), extra 88 of 88 (all; 75.2%)"
    assert epoch.strip() == expected
    steps = next(line for line in out.splitlines() if "epochs" in line and "an epoch:" in line)
    assert "the run's 6 steps cover" in steps
    log = (out_dir / "train.log").read_text(encoding="utf-8")
    assert epoch.strip() in log
    reads = _count_reads(monkeypatch)  # --verify-data: each training file read once, in full
    argv = ["train", "--config", str(job), "--out", str(out_dir), "--no-progress"]
    assert main([*argv, "--overwrite", "--verify-data"]) == 0
    assert "prepared in" not in capsys.readouterr().out
    assert sorted(r for r in reads if r in training) == sorted(training)


def _torchrun(tmp_path: Path, *argv: str, delay_s: float = 0.0) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ATTNLAB_TEST_PG_TIMEOUT_S": "8",
        "ATTNLAB_TEST_PREPARE_DELAY_S": str(delay_s),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", str(WORKER), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("prepared_first", [False, True], ids=["train-alone", "after-prepare"])
def test_torchrun_never_waits_on_a_timeout_for_the_preparation(tmp_path, prepared_first):
    """2 gloo processes, a process-group timeout of 8 s and a preparation of over 20 s: the
    second rank waits for the first's preparation on the cache, before the group exists,
    and says so; after `attnlab prepare`, both only open what it made."""
    job, _ = _job(tmp_path, mixed=False)
    out = tmp_path / "run"
    if prepared_first:
        env = {**os.environ, "ATTNLAB_TEST_PREPARE_DELAY_S": "20"}
        command = [sys.executable, str(WORKER), "prepare", "--config", str(job)]
        ready = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        assert ready.returncode == 0, ready.stderr[-3000:]
        assert "train: shards prepared in" in ready.stdout
    ran = _torchrun(
        tmp_path, "train", "--config", str(job), "--out", str(out), "--no-progress", delay_s=20
    )
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "on 2 processes" in ran.stdout
    if prepared_first:
        assert "prepared in" not in ran.stdout and "waiting for rank 0" not in ran.stdout
        assert "train: shards ready" in ran.stdout
    else:
        assert "train: shards prepared in" in ran.stdout
        assert "rank 1: waiting for rank 0 to prepare the shards of" in ran.stdout
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["steps"] == 6 and summary["world_size"] == 2


def test_the_launched_rank_is_read_before_any_process_group(tmp_path, monkeypatch, capsys):
    from attnlab.train.distributed import launched_world

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_world() == (0, 1)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launched_world() == (1, 4)
    monkeypatch.setenv("RANK", "one")
    out = tmp_path / "run"
    argv = ["train", "--task", "numbers", "--max-steps", "500", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnlab train: error: RANK: expected a whole number (set by torchrun), got 'one'"
    assert not out.exists()
    monkeypatch.setenv("RANK", "4")
    assert main(argv) == 2
    assert "RANK: expected 0 <= RANK < WORLD_SIZE = 4, got 4" in capsys.readouterr().err

"""Sequence-level distillation as a job's ``[distill]`` table (attnlab.tasks.distill): the
table checked when a job is read, the chunked corpus maker (resumed after a crash, the same
corpus whether interrupted or not), and students of two tiny numbers teachers trained end to
end through ``attnlab train``: their job.json names the teachers and their digests, the
distilled corpus is cached and reused, a SIGKILL during the teachers' decoding then a rerun
gives the corpus an uninterrupted run gives, and the files task trains on it from shards."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.decode.options import DecodingOptions
from attnlab.jobs import Job, train_job
from attnlab.tasks.distill import (
    META_FILE,
    SRC_FILE,
    TGT_FILE,
    DistillOptions,
    distill_corpus,
    load_distilled,
)

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]
#: The numbers task, small: 60 training pairs.
TASK = {"name": "numbers", "high": 79, "valid_size": 10, "test_size": 10}
SMALL = {
    "task": TASK,
    "model": {
        "preset": "small", "d_model": 32, "d_ff": 64, "num_heads": 2,
        "num_encoder_layers": 1, "num_decoder_layers": 1,
    },
    "tokenizer": {"vocab_size": 300},
    "train": {
        "max_steps": 60, "warmup": 10, "eval_every": 60, "checkpoint_every": 60,
        "average_last": 1, "max_tokens": 512, "log_every": 20,
    },
    "eval": {"beam_size": 1, "bleu_sentences": 0},
}  # fmt: skip
#: A student's training: a few steps (what it trains on is what these tests look at).
STUDENT_TRAIN = {"max_steps": 2, "warmup": 1, "eval_every": 2, "checkpoint_every": 2}


def tables(**changes) -> dict:
    found = json.loads(json.dumps(SMALL))
    for name, table in changes.items():
        found[name] = {**found.get(name, {}), **table}
    return found


def toml(data: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    return "".join(
        f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items()) + "\n"
        for name, table in data.items()
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def corpora_in(cache: Path) -> list[Path]:
    """The complete distilled corpora under ``cache`` (``$ATTNLAB_CACHE``)."""
    return complete(cache / "shards" / "distilled")


def complete(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*") if load_distilled(p) is not None)


@pytest.fixture(scope="module")
def teachers(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two tiny numbers models, seeds 1 and 2 (60 steps each)."""
    root = tmp_path_factory.mktemp("teachers")
    found = []
    for seed in (1, 2):
        train_job(Job.from_dict(tables(train={"seed": seed})), root / f"t{seed}", progress=False)
        found.append(str(root / f"t{seed}" / "model"))
    return found


# -- the table, checked ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("distill", "message"),
    [
        ({}, "[distill] teachers: expected a non-empty list of model directories, got None"),
        ({"teachers": []}, "[distill] teachers: expected a non-empty list"),
        ({"teachers": "runs/t0/model"}, "[distill] teachers: expected a non-empty list"),
        ({"beam_size": 0}, "[distill] beam_size: expected a positive int, got 0"),
        ({"n_best": 9}, "[distill] n_best: expected at most beam_size (8), got 9"),
        ({"select": "bleu"}, "[distill] select: expected one of chrf, best, got 'bleu'"),
        ({"keep_original": "yes"}, "[distill] keep_original: expected a bool, got 'yes'"),
        ({"alpha": -1}, "[distill] alpha: expected a finite number >= 0"),
        ({"chunk_size": 0}, "[distill] chunk_size: expected a positive int, got 0"),
        ({"digests": ["ab"]}, "[distill] digests: expected one SHA-256 (64 hex digits)"),
        ({"beam": 4}, "unknown [distill] fields ['beam']; did you mean 'beam_size'?"),
    ],
)
def test_a_bad_distill_table_is_refused_naming_the_key(distill, message):
    if distill and "teachers" not in distill and "beam" not in distill:
        distill = {"teachers": ["runs/t0/model"], **distill}
    if "beam" in distill:
        distill["teachers"] = ["runs/t0/model"]
    with pytest.raises(ValueError) as error:
        Job.from_dict(tables(distill=distill))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def fake_teacher(directory: Path, weights: bytes = b"weights") -> str:
    """A directory that passes for a model directory until it is loaded."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}", encoding="utf-8")
    (directory / "model.safetensors").write_bytes(weights)
    return str(directory)


def test_check_names_a_missing_teacher_a_foreign_task_and_changed_weights(tmp_path):
    teacher = fake_teacher(tmp_path / "t0")
    job = Job.from_dict(tables(distill={"teachers": [teacher, str(tmp_path / "nope")]}))
    with pytest.raises(FileNotFoundError, match=r"\[distill\] teachers\[1\]: .*nope: no such"):
        job.check()
    (tmp_path / "empty").mkdir()
    job = Job.from_dict(tables(distill={"teachers": [str(tmp_path / "empty")]}))
    with pytest.raises(ValueError, match=r"\[distill\] teachers\[0\]: .*no model.safetensors"):
        job.check()
    text = {"task": {"name": "text", "text_file": __file__}, "distill": {"teachers": [teacher]}}
    text["train"] = {"max_steps": 2}
    with pytest.raises(ValueError, match=r"\[distill\]: .*task 'text' is not one"):
        Job.from_dict(text).check()
    # check() records the weights' digests (job.json keeps them) and the first teacher's alpha;
    # a job that names digests is refused when the teacher's weights changed since.
    job = Job.from_dict(tables(distill={"teachers": [teacher]}))
    job.check()
    assert job.to_dict()["distill"]["digests"] == [hashlib.sha256(b"weights").hexdigest()]
    assert (
        job.distill is not None and job.distill.decoding.alpha == 0.6
    )  # no job.json: the defaults
    pinned = Job.from_dict(job.to_dict())
    pinned.check()
    other = fake_teacher(tmp_path / "t1", b"other weights")
    changed = job.to_dict()
    changed["distill"]["teachers"] = [other]
    with pytest.raises(ValueError, match=r"\[distill\] digests\[0\]: .* the job names "):
        Job.from_dict(changed).check()


def test_set_makes_a_job_a_student_and_a_missing_teacher_stops_it_before_any_work(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", "numbers", "--out", str(out)]
    argv += ["--set", f'distill.teachers=["{tmp_path / "nope"}"]', "--set", "distill.beam_size=2"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "[distill] teachers[0]: " in error and "nope: no such directory" in error
    assert not out.exists()


def test_n_best_defaults_to_the_beam_and_is_one_for_the_best():
    def n(**table):
        return DistillOptions.from_table({"teachers": ["t"], **table}).decoding.n_best

    assert n() == 8
    assert n(beam_size=4) == 4
    assert n(beam_size=4, n_best=2) == 2
    assert n(select="best") == 1
    with pytest.raises(ValueError, match=r"^\[distill\] n_best: expected at most beam_size \(4\)"):
        n(beam_size=4, n_best=5)


# -- the corpus maker ------------------------------------------------------------------------------


def reverse_words(sources: list[str], references: list[str]) -> list[str]:
    return [
        " ".join(reversed(s.split())) + " | " + r for s, r in zip(sources, references, strict=True)
    ]


PAIRS = [(f"{'w ' * (i % 7)}s{i}".strip(), f"r{i}") for i in range(23)]


def test_the_corpus_is_made_in_length_sorted_chunks_and_kept_in_the_sources_order(tmp_path):
    seen: list[list[str]] = []

    def translate(sources, references):
        seen.append(sources)
        return reverse_words(sources, references)

    made = distill_corpus(
        lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "c", translate=translate,
        chunk_size=3, window_chunks=2, meta={"what": "test"},
    )  # fmt: skip
    assert not made.cached and made.pairs == 23 and made.meta["what"] == "test"
    assert made.src.read_text("utf-8").splitlines() == [s for s, _ in PAIRS]
    assert made.tgt.read_text("utf-8").splitlines() == reverse_words(*zip(*PAIRS, strict=True))
    # Windows of 6 lines (6, 6, 6, 5), each cut into chunks of 3 by source length.
    assert len(seen) == 8 and all(len(chunk) <= 3 for chunk in seen)
    first = sorted(PAIRS[:6], key=lambda p: len(p[0]))
    assert seen[0] == [s for s, _ in first[:3]]
    assert not (tmp_path / "c.work").exists()
    again = distill_corpus(
        lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "c", translate=_refuse, chunk_size=3
    )
    assert again.cached and again.directory == made.directory


def test_progress_is_reported_inside_a_chunk_and_the_corpus_is_the_same(tmp_path):
    """A chunk is translated ``progress_lines`` sources at a time, with a report after each:
    the line moves while a long chunk decodes, and the corpus is the one chunks give whole."""
    seen: list[list[str]] = []
    reports: list[tuple[int, int]] = []

    def translate(sources, references):
        seen.append(sources)
        return reverse_words(sources, references)

    made = distill_corpus(
        lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "c", translate=translate,
        chunk_size=5, progress_lines=2,
        progress=lambda done, total, rate, eta: reports.append((done, total)),
    )  # fmt: skip
    assert [len(part) for part in seen] == [2, 2, 1] * 4 + [2, 1]  # chunks of 5, 5, 5, 5, 3
    assert [done for done, _ in reports] == [2, 4, 5, 7, 9, 10, 12, 14, 15, 17, 19, 20, 22, 23]
    assert {total for _, total in reports} == {23}
    whole = distill_corpus(
        lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "w", translate=reverse_words,
        chunk_size=5,
    )  # fmt: skip
    assert made.tgt.read_bytes() == whole.tgt.read_bytes()
    with pytest.raises(ValueError, match="progress_lines"):
        distill_corpus(
            lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "x", translate=reverse_words,
            progress_lines=0,
        )  # fmt: skip


def test_a_crash_leaves_no_corpus_and_the_rerun_resumes_to_the_same_bytes(tmp_path):
    calls = []

    def crash_in_chunk_4(sources, references):
        calls.append(sources)
        if len(calls) == 4:
            raise KeyboardInterrupt  # the process dies in the middle of chunk 4
        return reverse_words(sources, references)

    options = {"chunk_size": 3, "window_chunks": 2}
    with pytest.raises(KeyboardInterrupt):
        distill_corpus(
            lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "c",
            translate=crash_in_chunk_4, **options,
        )  # fmt: skip
    assert load_distilled(tmp_path / "c") is None  # no corpus: not even a partial one
    assert len(list((tmp_path / "c.work").glob("chunk-*.json"))) == 3
    calls.clear()
    lines: list[str] = []
    reports: list[tuple[int, float]] = []
    resumed = distill_corpus(
        lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "c",
        translate=_counting(calls), note=lines.append, **options,
        progress=lambda done, total, rate, eta: reports.append((done, rate)),
    )  # fmt: skip
    assert len(calls) == 8 - 3  # the three chunks on disk were not decoded again
    assert any("resuming: 3 chunks" in line for line in lines)
    # Progress speaks of the chunks decoded now: no "0 lines/s, ETA ?" for those read back.
    assert [done for done, _ in reports] == [12, 15, 18, 21, 23]
    assert all(rate > 0 for _, rate in reports)
    whole = distill_corpus(
        lambda: iter(PAIRS), len(PAIRS), directory=tmp_path / "whole",
        translate=reverse_words, **options,
    )  # fmt: skip
    for name in (SRC_FILE, TGT_FILE):
        assert (resumed.directory / name).read_bytes() == (whole.directory / name).read_bytes()


def _refuse(sources, references):
    raise AssertionError("decoded again")


def _counting(calls: list):
    def translate(sources, references):
        calls.append(sources)
        return reverse_words(sources, references)

    return translate


def test_a_work_directory_of_another_plan_is_started_over(tmp_path):
    distill_corpus(
        lambda: iter(PAIRS[:6]), 6, directory=tmp_path / "c", translate=reverse_words,
        chunk_size=3,
    )  # fmt: skip
    # The same corpus asked in chunks of 2, after a crashed attempt in chunks of 4.
    work = tmp_path / "d.work"
    work.mkdir()
    (work / "plan.json").write_text(json.dumps({"chunk_size": 4}), encoding="utf-8")
    (work / "chunk-000000.json").write_text('{"lines": [0], "targets": ["stale"], "seconds": 0}')
    made = distill_corpus(
        lambda: iter(PAIRS[:6]), 6, directory=tmp_path / "d", translate=reverse_words,
        chunk_size=2,
    )  # fmt: skip
    assert "stale" not in made.tgt.read_text("utf-8")
    assert made.tgt.read_bytes() == (tmp_path / "c" / TGT_FILE).read_bytes()


# -- students, end to end --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_student_of_two_teachers_trains_end_to_end_and_the_corpus_is_reused(
    teachers, tmp_path, monkeypatch, capsys
):
    from sacrebleu.metrics import CHRF

    from attnlab.inference.translator import Translator

    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTNLAB_CACHE", str(cache))
    distill = {"teachers": teachers, "beam_size": 3, "chunk_size": 16}
    config = tmp_path / "student.toml"
    config.write_text(toml(tables(train=STUDENT_TRAIN, distill=distill)), encoding="utf-8")
    out = tmp_path / "student"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert (
        "distill: 2 teachers (their ensemble), beam 3, of each source's 3 best by chrF" in printed
    )
    # One process makes it once, as its training sets up (under torchrun, or with
    # --verify-data, it is made before the process group exists and then reused).
    assert printed.count("distill train: 60 pairs made: ") == 1
    assert "pairs reused" not in printed
    assert "student: trains on 60 distilled pairs + 60 original" in printed
    assert "model: small preset" in printed and "120 training examples" in printed

    # The student's job.json names its teachers and the digests of their weights.
    digests = [sha256(Path(t) / "model.safetensors") for t in teachers]
    for where in (out / "job.json", out / "model" / "job.json"):
        saved = json.loads(where.read_text(encoding="utf-8"))["distill"]
        assert saved["teachers"] == teachers and saved["digests"] == digests
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [t["sha256"] for t in result["distill"]["teachers"]] == digests
    assert result["distill"]["corpora"][0]["decode_seconds"] > 0

    # The corpus: the sources, each with the one of the ensemble's 3 best closest by chrF to
    # its reference.
    (corpus,) = corpora_in(cache)
    meta = json.loads((corpus / META_FILE).read_text(encoding="utf-8"))
    assert meta["pairs"] == 60 and meta["n_best"] == 3 and meta["select"] == "chrf"
    sources = (corpus / SRC_FILE).read_text("utf-8").splitlines()
    targets = (corpus / TGT_FILE).read_text("utf-8").splitlines()
    job = Job.from_dict(tables())
    pairs = job.task.load()["train"]
    assert sources == [s for s, _ in pairs]
    ensemble = Translator.load(teachers, decoding=DecodingOptions(3, 0.6, n_best=3))
    chrf = CHRF()
    for (source, reference), target, found in zip(
        pairs[:8], targets, ensemble.hypotheses(sources[:8]), strict=False
    ):
        texts = [h.text for h in found]
        assert target in texts, source
        best = max(chrf.sentence_score(t, [reference]).score for t in texts)
        assert chrf.sentence_score(target, [reference]).score == best

    # A second student of the same teachers and corpus decodes nothing: the corpus is reused.
    real_load = Translator.load

    def load(model_dir, **options):
        if model_dir == teachers or str(model_dir) in teachers:
            raise AssertionError("the teachers were loaded: the corpus was not reused")
        return real_load(model_dir, **options)

    monkeypatch.setattr(Translator, "load", load)
    lines: list[str] = []
    again = Job.from_dict(tables(train=STUDENT_TRAIN, distill=distill))
    result = train_job(again, tmp_path / "again", progress=False, log=lines.append)
    assert any(line.startswith("distill train: 60 pairs reused: ") for line in lines)
    assert result["distill"]["corpora"][0]["reused"] is True
    assert corpora_in(cache) == [corpus]


def run_worker(config: Path, out: Path, cache: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, ATTNLAB_CACHE=str(cache), OMP_NUM_THREADS="1")
    argv = [sys.executable, str(ROOT / "tests" / "_distill_worker.py"), str(config), str(out)]
    return subprocess.Popen(
        [*argv, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT
    )


def finish(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=900)
    text = output.decode("utf-8", "replace")
    assert process.returncode == 0, text[-3000:]
    return text


@pytest.mark.slow
def test_a_sigkill_during_the_teachers_decoding_then_a_rerun_gives_the_same_corpus(
    teachers, tmp_path
):
    distill = {"teachers": teachers[:1], "beam_size": 2, "chunk_size": 16}
    config = tmp_path / "student.toml"
    config.write_text(toml(tables(train=STUDENT_TRAIN, distill=distill)), encoding="utf-8")
    cache = tmp_path / "cache"
    killed = run_worker(config, tmp_path / "killed", cache, "--hang-after-chunks", "1")
    work = cache / "shards" / "distilled"
    deadline = time.monotonic() + 600  # generous: it waits for a process to import and decode
    while not list(work.glob("*.work/chunk-*.json")):
        assert killed.poll() is None, killed.communicate()[0].decode()[-3000:]
        assert time.monotonic() < deadline, "no chunk of the teachers' translations appeared"
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert corpora_in(cache) == []  # a partial corpus is not a corpus
    assert len(list(work.glob("*.work/chunk-*.json"))) == 1

    resumed = finish(run_worker(config, tmp_path / "resumed", cache))
    assert "resuming: 1 chunk of 16 sources decoded by an earlier run" in resumed
    whole = finish(run_worker(config, tmp_path / "whole", tmp_path / "cache2"))
    assert "resuming" not in whole
    (a,), (b,) = corpora_in(cache), corpora_in(tmp_path / "cache2")
    assert a.name == b.name  # the same key
    for name in (SRC_FILE, TGT_FILE):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert not list(work.glob("*.work"))  # the chunks are gone once the corpus is whole


@pytest.mark.slow
def test_the_files_task_trains_a_student_from_the_distilled_shards(teachers, tmp_path):
    """The files task's large-corpus path: the distilled corpus is one more corpus prepared
    into shards; the student (a deeper encoder than decoder) exports to CTranslate2, which
    decodes it as attnlab does."""
    from attnlab.data.corpora import numbers

    corpus = numbers(**{k: v for k, v in TASK.items() if k != "name"})
    task = {"name": "files", "src_lang": "en", "tgt_lang": "de", "cache_dir": str(tmp_path)}
    for split in ("train", "valid", "test"):
        for side, lang in enumerate(("en", "de")):
            path = tmp_path / f"{split}.{lang}"
            path.write_text("".join(p[side] + "\n" for p in corpus[split]), encoding="utf-8")
            task[f"{split}_{'src' if side == 0 else 'tgt'}"] = str(path)
    distill = {"teachers": teachers[:1], "beam_size": 1, "select": "best", "chunk_size": 32}
    student = {"num_encoder_layers": 2, "num_decoder_layers": 1}
    job = Job.from_dict(
        {**tables(train=STUDENT_TRAIN, distill=distill, model=student), "task": task}
    )
    lines: list[str] = []
    result = train_job(job, tmp_path / "student", progress=False, log=lines.append)
    assert any(line.startswith("train-distilled: shards prepared") for line in lines)
    assert any(line.startswith("train: shards prepared") for line in lines)
    (made,) = complete(tmp_path / "distilled")  # in the task's cache_dir, beside the shards
    assert result["distill"]["corpora"][0]["directory"] == str(made)
    assert json.loads((made / META_FILE).read_text("utf-8"))["pairs"] == 60
    assert result["training"]["steps"] == 2
    student_exports_to_ctranslate2(tmp_path / "student" / "model", [s for s, _ in corpus["valid"]])


def student_exports_to_ctranslate2(model_dir: Path, texts: list[str]) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2")
    from attnlab.decode.search import greedy_search
    from attnlab.inference.modeldir import load_with_tokenizers

    out = model_dir.parent / "ct2"
    assert (
        main(["export", "--model", str(model_dir), "--out", str(out), "--to", "ctranslate2"]) == 0
    )
    model, src, tgt = load_with_tokenizers(model_dir, device="cpu")
    assert (model.config.num_encoder_layers, model.config.num_decoder_layers) == (2, 1)
    ids = [src.encode(t) for t in texts]
    expected = greedy_search(model, ids, max_new_tokens=12).tolist()
    c = model.config
    banned = [[tgt.backend.id_to_token(i)] for i in sorted({c.pad_id, c.bos_id} - {c.eos_id})]
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    results = translator.translate_batch(
        [[src.backend.id_to_token(i) for i in row] for row in ids],
        beam_size=1, length_penalty=0.0, min_decoding_length=0, max_decoding_length=12,
        suppress_sequences=banned,
    )  # fmt: skip
    found = [[tgt.backend.token_to_id(t) for t in r.hypotheses[0]] for r in results]
    assert found == expected


@pytest.mark.slow
def test_a_teacher_imported_from_opus_mt_teaches_a_student(tmp_path, monkeypatch):
    """Any model directory the Translator reads is a teacher: here a tiny random opus-mt
    model (SentencePiece tokenizers, Marian's vocabulary) brought in by `attnlab import`. The
    student trains its own BPE tokenizers on the teacher's translations."""
    pytest.importorskip("transformers")
    from attnlab.inference.translator import Translator
    from test_docs_examples import tiny_opus_mt

    tiny_opus_mt(tmp_path / "opus-mt-en-de")
    teacher = tmp_path / "teacher"
    assert main(["import", str(tmp_path / "opus-mt-en-de"), "--out", str(teacher)]) == 0
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    distill = {"teachers": [str(teacher)], "beam_size": 1, "select": "best", "chunk_size": 32}
    job = Job.from_dict(tables(train=STUDENT_TRAIN, distill=distill))
    result = train_job(job, tmp_path / "student", progress=False)
    (made,) = corpora_in(tmp_path / "cache")
    sources = (made / SRC_FILE).read_text("utf-8").splitlines()
    targets = (made / TGT_FILE).read_text("utf-8").splitlines()
    expected = Translator.load(teacher, decoding=DecodingOptions(beam_size=1)).translate(
        sources[:8]
    )
    assert targets[:8] == [t.replace("\n", " ") for t in expected]
    assert result["distill"]["teachers"][0]["sha256"] == sha256(teacher / "model.safetensors")
    assert (tmp_path / "student" / "model" / "tokenizer.json").is_file()  # its own BPE


# -- engines, weights, a run killed while its teachers decode, and torchrun ------------------------


def test_an_engine_is_one_teacher_s_and_a_weight_a_files_job_s(tmp_path, capsys):
    """[distill] engine = "ctranslate2" decodes one teacher: an ensemble on it is refused when
    the job is read, in one line naming the key; a weight is a positive number, and a task that
    mixes no corpora by weight refuses it before any decoding. Both are written back to
    job.json only where they are not their defaults (the cache keys of the defaults' corpora
    do not change)."""
    with pytest.raises(ValueError) as error:
        DistillOptions.from_table({"teachers": ["a", "b"], "engine": "ctranslate2"})
    assert str(error.value) == (
        "[distill] engine ctranslate2: an ensemble (2 models): it decodes one model; the torch "
        "engine can"
    )
    with pytest.raises(ValueError, match=r"^\[distill\] engine: expected one of torch, ct"):
        DistillOptions.from_table({"teachers": ["a"], "engine": "ct2"})
    with pytest.raises(ValueError, match=r"^\[distill\] weight: expected a positive number"):
        DistillOptions.from_table({"teachers": ["a"], "weight": 0})
    assert set(DistillOptions.from_table({"teachers": ["a"]}).to_dict()) == {
        "teachers", "beam_size", "n_best", "select", "keep_original", "alpha", "chunk_size",
        "digests",
    }  # fmt: skip
    table = {"teachers": ["a"], "engine": "ctranslate2", "weight": 2.0}
    assert DistillOptions.from_table(table).to_dict()["engine"] == "ctranslate2"
    assert DistillOptions.from_table(DistillOptions.from_table(table).to_dict()).weight == 2.0
    teacher = fake_teacher(tmp_path / "t0")
    out = tmp_path / "run"
    argv = ["train", "--task", "numbers", "--out", str(out), "--max-steps", "2", "--warmup", "1"]
    argv += ["--set", f'distill.teachers=["{teacher}"]', "--set", "distill.weight=2.0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "[distill] weight: a files job's weights; numbers trains on each pair once" in err
    assert err.count("\n") == 1 and not out.exists()


def test_overwrite_starts_over_a_run_killed_while_its_teachers_decode(tmp_path, capsys):
    """A student's run killed before training (its teachers decoding, for hours) holds its
    job.json and train.log: --overwrite removes it as any run (it once held train.log alone,
    and was refused as "not an attnlab run")."""
    teacher = fake_teacher(tmp_path / "t0")  # its loading fails: the decoding stops there
    job = Job.from_dict(tables(train=STUDENT_TRAIN, distill={"teachers": [teacher]}))
    out = tmp_path / "run"
    with pytest.raises(Exception):  # noqa: B017 - what a fake teacher raises: not the point
        train_job(job, out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["job.json", "train.log"]
    config = tmp_path / "numbers.toml"
    config.write_text(toml(tables(train=STUDENT_TRAIN)), encoding="utf-8")
    argv = ["train", "--config", str(config), "--out", str(out), "--no-progress", "--overwrite"]
    assert main(argv) == 0
    assert f"--overwrite: removed the earlier run in {out}/" in capsys.readouterr().out
    assert (out / "results.json").is_file()


@pytest.mark.slow
def test_one_teacher_decodes_on_ctranslate2_into_a_corpus_of_its_own(
    teachers, tmp_path, monkeypatch
):
    """engine = "ctranslate2": greedy search gives the torch engine's translations, in a corpus
    of its own key (the engine is part of it: beam outputs may differ); the n best by chrF come
    from CTranslate2's n best."""
    pytest.importorskip("ctranslate2")
    from attnlab.tasks.distill import student_task

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))

    def corpus(**distill) -> Path:
        table = {"teachers": teachers[:1], "chunk_size": 16, **distill}
        job = Job.from_dict(tables(distill=table))
        data = job.task.load()
        _, _, record = student_task(
            job.task, job.distill, job.eval.max_tokens, data, rank=0, note=lambda line: None
        )
        return Path(record["corpora"][0]["directory"])

    on_torch = corpus(beam_size=1, select="best")
    on_ct2 = corpus(beam_size=1, select="best", engine="ctranslate2")
    assert on_torch != on_ct2
    assert (on_ct2 / TGT_FILE).read_bytes() == (on_torch / TGT_FILE).read_bytes()
    chosen = corpus(beam_size=3, engine="ctranslate2")  # select chrf of CTranslate2's 3 best
    meta = json.loads((chosen / META_FILE).read_text("utf-8"))
    assert (meta["engine"], meta["n_best"], meta["pairs"]) == ("ctranslate2", 3, 60)
    assert "engine" not in json.loads((on_torch / META_FILE).read_text("utf-8"))


@pytest.mark.parametrize("weight", [None, 0.1])
def test_cleaning_the_distilled_pairs_leaves_the_originals_share_of_an_epoch(
    weight, tmp_path, monkeypatch
):
    """A files job's student mixes each distilled corpus with ``[distill] weight`` times its
    corpus's weight (default 1): the originals' share of an epoch is 1 / (1 + weight) whether
    cleaning keeps every distilled pair or removes most of them (here the teachers' empty
    translations). An epoch ends when the corpus drawn fastest for its size has been seen once:
    a lower weight lets the originals be seen whole beside a few distilled pairs."""
    import attnlab.tasks.distill as distill
    from attnlab.data.corpora import numbers

    corpus = numbers(**{k: v for k, v in TASK.items() if k != "name"})
    task = {"name": "files", "src_lang": "en", "tgt_lang": "de", "cache_dir": str(tmp_path)}
    for split in ("train", "valid"):
        for side, lang in enumerate(("en", "de")):
            path = tmp_path / f"{split}.{lang}"
            path.write_text("".join(p[side] + "\n" for p in corpus[split]), encoding="utf-8")
            task[f"{split}_{'src' if side == 0 else 'tgt'}"] = str(path)
    monkeypatch.setattr(distill, "_teachers", lambda options, max_tokens: None)
    found = []
    for kept in (60, 6):  # the teachers' translations: the references, or mostly empty

        def chunk_targets(translator, sources, references, *, select, kept=kept):
            return [r if i < kept else "" for i, r in enumerate(references)]

        monkeypatch.setattr(distill, "chunk_targets", chunk_targets)
        table = {"teachers": [fake_teacher(tmp_path / f"t{kept}", str(kept).encode())]}
        table.update({} if weight is None else {"weight": weight})
        job = Job.from_dict({**tables(train=STUDENT_TRAIN, distill=table), "task": task})
        lines: list[str] = []
        train_job(job, tmp_path / f"student{kept}", progress=False, log=lines.append)
        epoch = next(line for line in lines if line.startswith("an epoch: "))
        parts = re.search(
            r"train-distilled \d+ of (\d+) .*, train (\d+) of (\d+) \(.*; ([\d.]+)%\)$", epoch
        )
        assert parts is not None, epoch
        pairs = int(epoch.split()[2])  # "an epoch: N pairs: ..."
        found.append([*(float(x) for x in parts.groups()), 100 / pairs])
    assert found[1][0] < found[0][0] / 5  # most distilled pairs were cleaned away
    share = 100 / (1 + (weight or 1.0))  # 50% or 90.9%
    for _, _, _, found_share, one_pair in found:  # exact but for the rounding of one pair
        assert found_share == pytest.approx(share, abs=one_pair)
    if weight is not None:  # the originals are seen whole in an epoch, however few distilled
        assert found[1][1] == found[1][2]


@pytest.mark.slow
def test_every_process_of_a_torchrun_group_decodes_and_the_corpus_is_the_same(teachers, tmp_path):
    """Under torchrun every process decodes its share of the chunks (chunk n % 2 == rank),
    rank 0 assembles them, and the corpus is the one a plain run makes, byte for byte; the
    student's results.json records the processes and the decoding time."""
    task = {**TASK, "high": 359}  # 340 training pairs: 22 chunks of 16
    distill = {"teachers": teachers[:1], "beam_size": 2, "chunk_size": 16}
    config = tmp_path / "student.toml"
    config.write_text(
        toml({**tables(train=STUDENT_TRAIN, distill=distill), "task": task}), encoding="utf-8"
    )
    plain = finish(run_worker(config, tmp_path / "plain", tmp_path / "cache1"))
    assert "process 0 of" not in plain
    env = dict(os.environ, ATTNLAB_CACHE=str(tmp_path / "cache2"), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    command += ["2", str(ROOT / "tests" / "_distill_worker.py"), str(config), str(tmp_path / "tr")]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "on 2 processes" in ran.stdout
    assert "rank 1: distill train: translating 340 sources with the teachers, process 1 of 2, " in (
        ran.stdout
    )
    (a,), (b,) = corpora_in(tmp_path / "cache1"), corpora_in(tmp_path / "cache2")
    assert a.name == b.name  # the same key
    for name in (SRC_FILE, TGT_FILE):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    result = json.loads((tmp_path / "tr" / "results.json").read_text(encoding="utf-8"))
    (made,) = result["distill"]["corpora"]
    assert made["processes"] == 2 and made["decode_seconds"] > 0 and made["pairs"] == 340
    assert made["decode_wall_seconds"] > 0
    # Each process's threads (OMP_NUM_THREADS=1 here): time x threads is the core-hours.
    assert made["threads"] == 1 and result["training"]["threads"] == 1
    plain_result = json.loads((tmp_path / "plain" / "results.json").read_text(encoding="utf-8"))
    assert plain_result["distill"]["corpora"][0]["processes"] == 1

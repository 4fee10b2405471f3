"""The data path at scale (issue 40): preparing, loading and starting to train on millions of
sentence pairs, against the goals.

Corpora are synthetic, made from Multi30K's training pairs (``train.en.gz``, ``train.de.gz``
in ``$ATTNLAB_MULTI30K``): each line joins 1-3 pairs drawn at random (seeded), about 24 words
a line, ``--sizes`` million lines (default 0.1 1 4.5), written as plain text to ``--work DIR``
(default: a temporary directory, removed at the end; never committed). Each figure is measured
in a child process. Memory has one measure (:data:`MEMORY_MEASURE`): the peak of the PSS
(proportional set size: a page shared by N processes counts 1/N in each) summed over the
child and all its descendants, read from ``/proc/PID/smaps_rollup`` every 0.25 s, so the
pages that preparation workers share with their parent count once. Where a process's
``smaps_rollup`` cannot be read, its RSS stands in, and the run's ``memory_measure`` says so.

* preparation: the tokenizer trained on a sample (:func:`attnlab.data.tokenizer_sample.
  train_tokenizer_on_sample`, ``--vocab-size`` joint subwords, default 16,000, the default
  1,000,000-pair sample) and the shards written (:func:`attnlab.data.prepare.cached_corpus`,
  every core, default cleaning): seconds, peak memory, and the pairs kept after cleaning
  (the duplicate filter drops most);
* the loader: :class:`attnlab.data.shards.ShardExamples` over those shards, batched by
  :class:`attnlab.data.batching.TokenBatcher` (25,000 tokens) and collated for 10 s: pairs/s
  in one process, and its peak memory, whose growth from 1M to 4.5M pairs is divided by the
  growth in kept pairs;
* training (:func:`measure_training`): ``attnlab train`` on a ``files`` job (preset
  ``--preset``, default ``small``) with ``[train] max_steps = 3``, once with an empty cache
  (tokenizer + preparation + 3 steps) and once with the shards ready: the seconds until the
  first step begins (its ``start: step 0`` line: the start-up, which issue 48 judges) and until
  the step has run (its ``step 1/3`` line: the start-up plus one step of the model), and peak
  memory; then the first run resumed from its last checkpoint for one more step;
* today's path (not with ``--skip-today``; up to 1M pairs, and only with the memory for it):
  the corpus in memory as the ``files`` task held it before the shards (``parallel_files``,
  ``Tokenizer.train`` on every pair, ``encode_batch``, ``make_examples``, ``TokenBatcher``)
  up to its first collated batch.

The goals (issues 40 and 48): peak memory of training on 4.5M pairs, preparation included,
<= 2 GB; of preparing them alone <= 1 GB; preparing 4.5M pairs on 2 cores <= 10 minutes; with
shards ready, the first step <= 5 s at 4.5M; the loader >= 30,000 pairs/s per process; memory
growth <= 32 bytes per kept pair (1M against 4.5M). Results go to
``benchmarks/results/data_scale.json``, with the measure's name, the vocabulary size, the
preset and each size's kept pairs.

    ATTNLAB_MULTI30K=... python benchmarks/data_scale.py --sizes 0.1 1 4.5
    python benchmarks/data_scale.py --sizes 0.1 --skip-today --skip-training   # a quick look
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results" / "data_scale.json"
VOCAB = 16000  # --vocab-size's default (the docs' large-corpus job)
PRESET = "small"  # --preset's default (the docs' large-corpus job)
MAX_TOKENS = 25_000  # the loader's batches (the paper's ~25,000 tokens)
LOADER_SECONDS = 10.0
TODAY_MAX_PAIRS = 1_000_000
GiB = 1024**3

#: The one memory measure, by name (recorded in the results) and in words.
MEMORY_MEASURE = "pss_tree"
MEMORY_MEASURE_TEXT = (
    "peak PSS summed over the process and all its descendants (/proc/PID/smaps_rollup), "
    "sampled every 0.25 s; RSS stands in for a process whose smaps_rollup is unreadable"
)

GOALS = {
    "prepare_s_4.5M": ("preparing 4.5M pairs (tokenizer + shards)", "s", "<=", 600.0),
    "train_peak_pss_4.5M": ("peak PSS, training on 4.5M incl. preparation", "MiB", "<=", 2048.0),
    "prepare_peak_pss_4.5M": ("peak PSS, preparing 4.5M pairs", "MiB", "<=", 1024.0),
    "first_step_ready_4.5M": ("first step begins, shards ready, 4.5M", "s", "<=", 5.0),
    "loader_pairs_per_s": ("loader pairs/s per process (each size)", "pairs/s", ">=", 30_000.0),
    "pss_growth_per_pair": ("PSS growth per kept pair, 1M -> 4.5M", "B/pair", "<=", 32.0),
}


# -- measuring a child process -----------------------------------------------------------------


def _tree_pids(root: int) -> set[int]:
    """``root`` and its descendants, from each process's parent in ``/proc/PID/stat``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    return tree


def _status_rss(pid: int | str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None  # a zombie or a kernel thread: no memory of its own


def process_memory(pid: int | str) -> tuple[int, str] | None:
    """``pid``'s PSS in bytes and ``"pss"``; its RSS and ``"rss"`` where its
    ``smaps_rollup`` cannot be read (an older kernel, another user's process); None when the
    process is gone or holds no memory."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024, "pss"
    except OSError:
        pass
    rss = _status_rss(pid)
    return None if rss is None else (rss, "rss")


def tree_memory(root: int) -> tuple[int, int]:
    """The PSS summed over ``root`` and its descendants, in bytes, and how many of those
    processes were counted by their RSS instead (their ``smaps_rollup`` unreadable)."""
    total = fallbacks = 0
    for pid in _tree_pids(root):
        found = process_memory(pid)
        if found is not None:
            total += found[0]
            fallbacks += found[1] == "rss"
    return total, fallbacks


def measure_name(samples: int, fallbacks: int) -> str:
    """The measure a run's peak was taken with: :data:`MEMORY_MEASURE`, with a note where some
    processes were counted by RSS."""
    if samples == 0:
        return f"{MEMORY_MEASURE} (no sample: the process ended within the first one)"
    if fallbacks:
        return (
            f"{MEMORY_MEASURE}, RSS for {fallbacks} process sample(s) whose smaps_rollup was "
            "unreadable"
        )
    return MEMORY_MEASURE


def run_measured(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    watch: dict[str, str] | None = None,
    timeout: float = 7200.0,
) -> dict[str, Any]:
    """Run ``command``; its exit status, wall time, output lines, its peak memory (the PSS
    summed over its process tree, sampled every 0.25 s from the start: :func:`tree_memory`)
    with the measure's name, and ``matched_s``: for each name of ``watch``, the seconds until
    a line first matched its regex (None: none did)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
    )
    peak, samples, fallbacks = [0], [0], [0]
    stop = threading.Event()

    def sample() -> None:
        while True:
            total, rss_counted = tree_memory(proc.pid)
            if total:
                samples[0] += 1
                fallbacks[0] += rss_counted
                peak[0] = max(peak[0], total)
            if stop.wait(0.25):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines: list[tuple[float, str]] = []
    patterns = {name: re.compile(regex) for name, regex in (watch or {}).items()}
    matched: dict[str, float | None] = dict.fromkeys(patterns)
    assert proc.stdout is not None
    for line in proc.stdout:
        at = time.perf_counter() - started
        lines.append((at, line.rstrip("\n")))
        for name, pattern in patterns.items():
            if matched[name] is None and pattern.search(line):
                matched[name] = at
    stop.set()  # before the wait: a zombie's tree is no longer its working set
    sampler.join()
    proc.wait()
    timer.cancel()
    return {
        "rc": proc.returncode,
        "wall_s": time.perf_counter() - started,
        "peak_pss_mib": peak[0] / 2**20,
        "memory_measure": measure_name(samples[0], fallbacks[0]),
        "matched_s": matched,
        "lines": [f"{at:8.1f}s {text}" for at, text in lines],
        "raw": [text for _, text in lines],
    }


def _child_json(result: dict[str, Any]) -> dict[str, Any]:
    """The JSON line a child printed last."""
    for text in reversed(result["raw"]):
        if text.startswith("{"):
            return json.loads(text)
    tail = "\n".join(result["lines"][-30:])
    raise SystemExit(f"a child process failed (exit {result['rc']}):\n{tail}")


def _child(*argv: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", *argv]


def mem_available() -> int:
    with open("/proc/meminfo", encoding="ascii") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# -- the corpora -------------------------------------------------------------------------------


def multi30k_dir() -> Path:
    value = os.environ.get("ATTNLAB_MULTI30K")
    if not value:
        raise SystemExit("ATTNLAB_MULTI30K is not set: the corpora are made from Multi30K's files")
    directory = Path(value).expanduser()
    for name in ("train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz"):
        if not (directory / name).is_file():
            raise SystemExit(f"{directory / name}: missing (attnlab download multi30k)")
    return directory


def _gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n").strip() for line in handle]


def build_corpus(pairs: int, work: Path, seed: int) -> Path:
    """``work/corpus-<pairs>/train.{en,de}`` (each line 1-3 random Multi30K pairs joined),
    and 100-line ``valid`` and ``test`` files; made once (``done.json`` marks it whole)."""
    directory = work / f"corpus-{pairs}"
    marker = directory / "done.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"pairs": pairs, "seed": seed}:
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    source = multi30k_dir()
    en, de = _gz_lines(source / "train.en.gz"), _gz_lines(source / "train.de.gz")
    rng = np.random.default_rng(seed)
    with (
        open(directory / "train.en", "w", encoding="utf-8") as out_en,
        open(directory / "train.de", "w", encoding="utf-8") as out_de,
    ):
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            counts = rng.integers(1, 4, n).tolist()
            picks = rng.integers(0, len(en), (n, 3)).tolist()
            out_en.write(
                "".join(
                    " ".join(en[j] for j in p[:c]) + "\n"
                    for c, p in zip(counts, picks, strict=True)
                )
            )
            out_de.write(
                "".join(
                    " ".join(de[j] for j in p[:c]) + "\n"
                    for c, p in zip(counts, picks, strict=True)
                )
            )
    for split, stem in (("valid", "val"), ("test", "val")):
        for lang in ("en", "de"):
            lines = _gz_lines(source / f"{stem}.{lang}.gz")
            chosen = lines[:100] if split == "valid" else lines[100:200]
            (directory / f"{split}.{lang}").write_text("\n".join(chosen) + "\n", encoding="utf-8")
    marker.write_text(json.dumps({"pairs": pairs, "seed": seed}))
    return directory


# -- the children ------------------------------------------------------------------------------


def child_prepare(corpus: Path, cache: Path, vocab: int, workers: int | None) -> dict[str, Any]:
    from attnlab.data.prepare import cached_corpus
    from attnlab.data.progress import progress_printer
    from attnlab.data.tokenizer_sample import train_tokenizer_on_sample

    src, tgt = corpus / "train.en", corpus / "train.de"
    start = time.perf_counter()
    src_tok, tgt_tok = train_tokenizer_on_sample(src, tgt, vocab)
    tokenizer_s = time.perf_counter() - start
    src_tok.save(cache / "tokenizer.json")
    start = time.perf_counter()
    result = cached_corpus(
        src, tgt, src_tok, tgt_tok, cache_dir=cache, workers=workers,
        progress=progress_printer("train", stream=sys.stdout, every_s=15.0),
    )  # fmt: skip
    return {
        "tokenizer_s": tokenizer_s,
        "shards_s": time.perf_counter() - start,
        "vocab_size": src_tok.vocab_size,
        "pairs": result.pairs,
        "lines": result.lines,
        "dropped": result.dropped,
        "summary": result.summary,
        "directory": str(result.directory),
        "disk_bytes": sum(p.stat().st_size for p in result.directory.iterdir()),
    }


def _own_mib() -> float:
    """This process's memory now, in the one measure (its PSS; its RSS where unreadable)."""
    found = process_memory("self")
    return float("nan") if found is None else found[0] / 2**20


def child_loader(directory: Path) -> dict[str, Any]:
    from attnlab.data.batching import TokenBatcher
    from attnlab.data.shards import ShardExamples

    before = _own_mib()
    start = time.perf_counter()
    examples = ShardExamples(directory, max_len=256)
    batcher = TokenBatcher.for_examples(examples, MAX_TOKENS, seed=0)
    batches = batcher.batches(0)
    open_s = time.perf_counter() - start
    opened = _own_mib()
    pairs = tokens = 0
    start = time.perf_counter()
    for indices in batches:
        src, tgt_in, _ = examples.collate(indices, pad_id=0)
        pairs += len(indices)
        tokens += int(src.numel() + tgt_in.numel())
        if time.perf_counter() - start >= LOADER_SECONDS:
            break
    seconds = time.perf_counter() - start
    return {
        "pairs": len(examples),
        "open_s": open_s,
        "pss_before_mib": before,
        "pss_opened_mib": opened,
        "pss_end_mib": _own_mib(),
        "pairs_collated": pairs,
        "padded_tokens": tokens,
        "pairs_per_s": pairs / seconds,
    }


def child_today(corpus: Path, vocab: int) -> dict[str, Any]:
    """The corpus in memory, as the ``files`` task held it before the shards."""
    from attnlab.data.batching import TokenBatcher
    from attnlab.data.corpora import parallel_files
    from attnlab.data.examples import make_examples
    from attnlab.data.tokenizer import Tokenizer

    start = time.perf_counter()
    train = parallel_files((corpus / "train.en", corpus / "train.de"))["train"]
    read_s = time.perf_counter() - start
    tok = Tokenizer.train([s for pair in train for s in pair], vocab)
    tokenizer_s = time.perf_counter() - start - read_s
    src = tok.encode_batch([s for s, _ in train])
    tgt = tok.encode_batch([t for _, t in train])
    examples = make_examples(list(zip(src, tgt, strict=True)), max_len=256)
    batcher = TokenBatcher.for_examples(examples, MAX_TOKENS, seed=0)
    examples.collate(batcher.batches(0)[0], pad_id=0)
    return {
        "pairs": len(examples),
        "read_s": read_s,
        "tokenizer_s": tokenizer_s,
        "first_batch_s": time.perf_counter() - start,
    }


# -- training ----------------------------------------------------------------------------------

_JOB = """\
[task]
name = "files"
src_lang = "en"
tgt_lang = "de"
train_src = {train_src}
train_tgt = {train_tgt}
valid_src = {valid_src}
valid_tgt = {valid_tgt}
test_src = {test_src}
test_tgt = {test_tgt}
max_len = 256
cache_dir = {cache}

[tokenizer]
vocab_size = {vocab}
joint = true

[model]
preset = {preset}
max_len = 260

[train]
max_steps = 3
max_tokens = 4096
log_every = 1
eval_every = 3
checkpoint_every = 3
keep_checkpoints = 1
average_last = 1

[eval]
beam_size = 1
bleu_sentences = 0
"""


#: The line in which ``attnlab train`` reports its cleaning: kept and read pairs.
KEPT = re.compile(r"cleaning: kept ([\d,]+) of ([\d,]+) pairs")


def measure_training(
    corpus: Path,
    cache: Path,
    out: Path,
    *,
    vocab: int = VOCAB,
    preset: str = PRESET,
    resume: bool = False,
) -> dict[str, Any]:
    """``attnlab train --config JOB.toml --out OUT`` on a ``files`` job of ``corpus`` with
    ``[train] max_steps = 3``, ``vocab`` joint subwords, the model ``preset`` and the shard
    cache ``cache``: seconds until the first step begins (``start: step 0``) and until its
    progress line (``step 1/3``), peak memory (:func:`run_measured`), the pairs the run kept
    after cleaning, and its own lines about its data. ``resume``: instead, ``--resume`` the
    finished run ``out`` for one more step (``--set train.max_steps=4``): until its
    checkpoint is loaded and the data is at its place (``resume from the checkpoint``), and
    until ``step 4/4``."""
    job = out.with_suffix(".toml")
    attnlab = Path(sys.executable).with_name("attnlab")
    command = [str(attnlab), "train", "--config", str(job), "--out", str(out), "--no-progress"]
    if resume:
        command += ["--resume", "--set", "train.max_steps=4"]
        watch = {"start": r"^\s*resume from the checkpoint", "step": r"^\s*step 4/"}
        return _training_figures(run_measured(command, watch=watch), vocab, preset)
    sides = (("src", "en"), ("tgt", "de"))
    paths = {
        f"{split}_{side}": corpus / f"{split}.{lang}"
        for split in ("train", "valid", "test")
        for side, lang in sides
    }
    fields = {k: json.dumps(str(v)) for k, v in paths.items()}
    job.write_text(
        _JOB.format(**fields, cache=json.dumps(str(cache)), vocab=vocab, preset=json.dumps(preset))
    )
    shutil.rmtree(out, ignore_errors=True)
    result = run_measured(command, watch={"start": r"^\s*start: step 0", "step": r"^\s*step 1/"})
    return _training_figures(result, vocab, preset)


def _training_figures(result: dict[str, Any], vocab: int, preset: str) -> dict[str, Any]:
    data_lines = [
        line for line in result["lines"] if re.search(r"shards|cleaning|tokenizer|preparing", line)
    ]
    measured = {k: result[k] for k in ("rc", "wall_s", "peak_pss_mib", "memory_measure")}
    measured["start_s"] = result["matched_s"]["start"]  # ready to train: its first step begins
    measured["first_step_s"] = result["matched_s"]["step"]  # ... and has run
    measured["vocab_size"], measured["preset"] = vocab, preset
    kept = [KEPT.search(line) for line in data_lines]
    kept = [m for m in kept if m]
    measured["kept_pairs"] = int(kept[-1].group(1).replace(",", "")) if kept else None
    measured["data_lines"] = data_lines
    if result["rc"] != 0:
        measured["tail"] = result["lines"][-20:]
    return measured


# -- the report --------------------------------------------------------------------------------


def _label(pairs: int) -> str:
    return f"{pairs / 1e6:g}M"


def measure_size(pairs: int, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    label = _label(pairs)
    print(f"== {label} pairs", flush=True)
    started = time.perf_counter()
    corpus = build_corpus(pairs, work, args.seed)
    found: dict[str, Any] = {"pairs": pairs, "corpus_s": time.perf_counter() - started}
    found["corpus_bytes"] = sum((corpus / f"train.{x}").stat().st_size for x in ("en", "de"))
    print(f"corpus: {found['corpus_bytes'] / 1e6:,.0f} MB of text", flush=True)

    cache = work / f"cache-prepare-{pairs}"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    workers = [] if args.workers is None else [str(args.workers)]
    run = run_measured(_child("prepare", str(corpus), str(cache), str(args.vocab_size), *workers))
    prepared = _child_json(run)
    prepared.update({k: run[k] for k in ("wall_s", "peak_pss_mib", "memory_measure")})
    found["prepare"] = prepared
    found["kept_pairs"] = prepared["pairs"]  # after cleaning: the duplicate filter drops most
    print(
        f"prepare: {prepared['wall_s']:.0f} s (tokenizer {prepared['tokenizer_s']:.0f} s, "
        f"shards {prepared['shards_s']:.0f} s), peak PSS {prepared['peak_pss_mib']:,.0f} MiB "
        f"({prepared['memory_measure']}); {prepared['summary']}",
        flush=True,
    )

    run = run_measured(_child("loader", prepared["directory"]))
    loader = _child_json(run)
    loader.update({k: run[k] for k in ("wall_s", "peak_pss_mib", "memory_measure")})
    found["loader"] = loader
    print(
        f"loader: {loader['pairs_per_s']:,.0f} pairs/s, opened in {loader['open_s']:.1f} s, "
        f"peak PSS {loader['peak_pss_mib']:,.0f} MiB",
        flush=True,
    )

    if not args.skip_training:
        train_cache = work / f"cache-train-{pairs}"
        shutil.rmtree(train_cache, ignore_errors=True)
        job = {"vocab": args.vocab_size, "preset": args.preset}
        cold = measure_training(corpus, train_cache, work / f"run-cold-{pairs}", **job)
        warm = measure_training(corpus, train_cache, work / f"run-warm-{pairs}", **job)
        resumed = measure_training(
            corpus, train_cache, work / f"run-cold-{pairs}", **job, resume=True
        )
        found["training"] = {"cold": cold, "ready": warm, "resumed": resumed}
        named = (("cold cache", cold), ("shards ready", warm), ("resumed", resumed))
        for name, result in named:
            start, first = result["start_s"], result["first_step_s"]
            never = f"never (exit {result['rc']})"
            shown = f"{start:.1f} s" if start is not None else never
            shown += f", its line {first:.1f} s" if first is not None else ""
            print(
                f"training, {name}: first step begins {shown}, peak PSS "
                f"{result['peak_pss_mib']:,.0f} MiB ({result['memory_measure']})",
                flush=True,
            )
        shutil.rmtree(train_cache, ignore_errors=True)

    if args.skip_today:
        found["today"] = {"skipped": "--skip-today"}
    elif pairs > TODAY_MAX_PAIRS:
        found["today"] = {"skipped": f"more than {TODAY_MAX_PAIRS:,} pairs"}
    elif mem_available() < 12 * GiB * pairs / 1e6 + GiB:  # 9.4 GB at 1M (issue 40)
        found["today"] = {"skipped": f"{mem_available() / GiB:.1f} GiB available"}
    else:
        run = run_measured(_child("today", str(corpus), str(args.vocab_size)))
        today = _child_json(run)
        today.update({k: run[k] for k in ("wall_s", "peak_pss_mib", "memory_measure")})
        found["today"] = today
        print(
            f"today's path: first batch after {today['first_batch_s']:.0f} s, peak PSS "
            f"{today['peak_pss_mib']:,.0f} MiB",
            flush=True,
        )
    if "skipped" in found["today"]:
        print(f"today's path: skipped ({found['today']['skipped']})", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    return found


def goals(sizes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal with its measured value (None: not measured in this run) and the verdict."""
    big, one = sizes.get("4.5M"), sizes.get("1M")
    values: dict[str, tuple[float | None, str]] = {}
    if big:
        prepared = big["prepare"]
        values["prepare_s_4.5M"] = (prepared["wall_s"], "")
        values["prepare_peak_pss_4.5M"] = (prepared["peak_pss_mib"], prepared["memory_measure"])
        training = big.get("training")
        if training and training["cold"]["rc"] == 0:
            cold = training["cold"]
            values["train_peak_pss_4.5M"] = (
                cold["peak_pss_mib"], f"attnlab train; {cold['memory_measure']}"
            )  # fmt: skip
            ready = training["ready"]
            values["first_step_ready_4.5M"] = (
                ready["start_s"],
                f"its line at {ready['first_step_s']:.1f} s, the step run",
            )
        else:
            values["train_peak_pss_4.5M"] = (
                prepared["peak_pss_mib"], f"preparation only; {prepared['memory_measure']}"
            )  # fmt: skip
    values["loader_pairs_per_s"] = (
        min((s["loader"]["pairs_per_s"] for s in sizes.values()), default=None),
        "the slowest size",
    )
    if big and one:
        growth = big["loader"]["peak_pss_mib"] - one["loader"]["peak_pss_mib"]
        pairs = big["loader"]["pairs"] - one["loader"]["pairs"]  # kept pairs, as loaded
        note = "loader process"
        if big.get("training") and one.get("training") and big["training"]["ready"]["rc"] == 0:
            growth = (
                big["training"]["ready"]["peak_pss_mib"] - one["training"]["ready"]["peak_pss_mib"]
            )
            note = "attnlab train, shards ready"
        values["pss_growth_per_pair"] = (growth * 2**20 / pairs, note)
    rows = []
    for key, (label, unit, sense, target) in GOALS.items():
        value, note = values.get(key, (None, "not measured (size not run)"))
        passed = None
        if value is not None:
            passed = value <= target if sense == "<=" else value >= target
        rows.append({"goal": key, "label": label, "unit": unit, "target": f"{sense} {target:g}",
                     "value": value, "passed": passed, "note": note})  # fmt: skip
    return rows


def child_main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "prepare":
        workers = int(argv[4]) if len(argv) > 4 else None
        result = child_prepare(Path(argv[1]), Path(argv[2]), int(argv[3]), workers)
    elif mode == "loader":
        result = child_loader(Path(argv[1]))
    else:
        result = child_today(Path(argv[1]), int(argv[2]))
    print(json.dumps(result), flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.1, 1, 4.5],
                        help="corpus sizes in millions of pairs")  # fmt: skip
    parser.add_argument("--work", type=Path, help="keep the corpora here (default: a temp)")
    parser.add_argument("--workers", type=int, help="preparation processes (default: all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=VOCAB, help="joint subwords")
    parser.add_argument("--preset", default=PRESET, help="the training runs' model preset")
    parser.add_argument("--skip-today", action="store_true", help="not today's in-memory path")
    parser.add_argument("--skip-training", action="store_true", help="no attnlab train runs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    args = parser.parse_args()
    multi30k_dir()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="attnlab-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sizes: dict[str, dict[str, Any]] = {}
    try:
        for size in args.sizes:
            pairs = round(size * 1e6)
            sizes[_label(pairs)] = measure_size(pairs, work, args)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    rows = goals(sizes)
    print("goals:")
    for r in rows:
        value = "-" if r["value"] is None else f"{r['value']:,.1f}"
        verdict = {None: "n/a", True: "PASS", False: "FAIL"}[r["passed"]]
        note = f" ({r['note']})" if r["note"] else ""
        print(f"  {r['label']}: {value} {r['unit']} (goal {r['target']}) {verdict}{note}")
    for label, found in sizes.items():
        today = found.get("today", {})
        if "first_batch_s" in today:
            print(
                f"  today's path at {label}: first batch {today['first_batch_s']:.0f} s, peak PSS "
                f"{today['peak_pss_mib']:,.0f} MiB; shards: loader opened in "
                f"{found['loader']['open_s']:.1f} s, {found['loader']['peak_pss_mib']:,.0f} MiB"
            )
    report = {
        "benchmark": "data_scale",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python_version": platform.python_version(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB,
        "memory_measure": {"name": MEMORY_MEASURE, "description": MEMORY_MEASURE_TEXT},
        "vocab_size": args.vocab_size,
        "preset": args.preset,
        "kept_pairs": {label: found["kept_pairs"] for label, found in sizes.items()},
        "sizes": sizes,
        "goals": rows,
        "wall_time_s": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

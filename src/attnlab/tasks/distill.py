"""Sequence-level knowledge distillation as data (Kim & Rush 2016): a translation job's
``[distill]`` table names teachers; before training, their ensemble translates the training
sources, and the student trains on those translations (and on the original pairs, unless
``keep_original = false``) through the ordinary loop::

    [distill]
    teachers = ["runs/t0/model", "runs/t1/model", "runs/t2/model"]
    beam_size = 8          # the teachers' beam (default 8)
    n_best = 8             # hypotheses per source considered (default: beam_size)
    select = "chrf"        # of the n best, the closest to the reference by sentence chrF;
                           # "best": the teachers' top hypothesis
    keep_original = true   # train on the original pairs too
    # alpha = 1.0          # the length penalty (default: the first teacher's own decoding)
    # chunk_size = 2000    # sources decoded, then written to disk, at a time

The teachers' translations of a corpus are a corpus too, made once and cached
(:func:`distill_corpus`): under the task's cache directory (``[task] cache_dir``, else
:func:`attnlab.data.shardformat.default_cache_dir`), in ``distilled/KEY``, KEY a digest of the
teachers' weights, the corpus and the options that change the translations. Such a directory
holds two line-aligned text files, ``src.txt`` (the sources) and ``tgt.txt`` (their chosen
translations), and ``meta.json``, written last: a directory with its ``meta.json`` is
complete, and nothing else is read as a distilled corpus.

Decoding is done in chunks of ``chunk_size`` sources, each written to ``distilled/KEY.work/``
atomically and durably as it finishes, so a killed run resumes after the chunks it finished.
The chunks are cut from the sources sorted by length (within windows of
``WINDOW_CHUNKS * chunk_size`` lines, so that memory stays bounded), so that the batches inside
a chunk are full; the chunks are the same whether a run was interrupted or not, and the
corpus, assembled in the sources' order once every chunk is there, is the same too.

The student's tokenizers are its own, trained as its task trains them, on the text it trains
on: the distilled pairs (and the original ones when kept). The in-memory tasks (numbers,
multi30k) replace their training split with those pairs; the ``files`` task trains from the
distilled files as one more corpus of its shard path (each of its corpora distilled, with
the corpus's weight in the mixture).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .._checks import check_bool, check_choice, check_int, check_keys, check_optional_int
from .._io import read_json
from ..decode.options import DecodingOptions

__all__ = [
    "BEAM_SIZE",
    "CHUNK_SIZE",
    "SELECTIONS",
    "DistillOptions",
    "DistilledCorpus",
    "chunk_targets",
    "corpus_key",
    "distill_corpus",
    "distilled_root",
    "load_distilled",
    "student_task",
]

#: The teachers' beam unless ``[distill] beam_size`` says otherwise: the Bergamot / Firefox
#: Translations pipeline's (mozilla/translations).
BEAM_SIZE = 8
#: How a translation is chosen from a source's n best: ``chrf``, the one with the best sentence
#: chrF against the reference (as mozilla/translations keeps); ``best``, the teachers' top one.
SELECTIONS = ("chrf", "best")
#: Sources decoded, then written to disk, at a time.
CHUNK_SIZE = 2000
#: Chunks per window: the lines of a window are sorted by length together.
WINDOW_CHUNKS = 50
#: Sources translated between two progress reports (a chunk of the Multi30K teachers' beam 8
#: takes minutes: the progress line should not wait for it).
PROGRESS_LINES = 200
FORMAT = "attnlab-distilled"
VERSION = 1
SRC_FILE, TGT_FILE, META_FILE = "src.txt", "tgt.txt", "meta.json"
#: The plan of a decoding in progress (``KEY.work/``): a work directory of another plan is
#: started over.
PLAN_FILE = "plan.json"
_SHA256_HEX = 64


@dataclass
class DistillOptions:
    """The ``[distill]`` table of a translation job (see the module docstring), made from the
    table's flat keys by :meth:`from_table` and written back by :meth:`to_dict`. ``decoding``
    is how the teachers decode: the table's ``beam_size`` and ``alpha``, with ``n_best`` the
    hypotheses a source asked for (1 for ``select = "best"``, else ``n_best``, by default the
    beam). Its values are checked when it is made (ValueError naming ``[distill]`` and the
    key); :meth:`check` checks what it names (the teachers' directories) before any work, and
    fills in what it leaves to them: the length penalty (the first teacher's, where the table
    gives no ``alpha``: ``teacher_alpha``) and ``digests`` (the SHA-256 of each teacher's
    ``model.safetensors``, in order), which the student's ``job.json`` records. A job that
    gives ``digests`` is refused unless its teachers still have those weights."""

    teachers: list[str]
    decoding: DecodingOptions = field(default_factory=lambda: DecodingOptions(BEAM_SIZE))
    select: str = "chrf"
    keep_original: bool = True
    chunk_size: int = CHUNK_SIZE
    digests: list[str] | None = None
    teacher_alpha: bool = True

    #: The keys of the ``[distill]`` table.
    KEYS: ClassVar[tuple[str, ...]] = (
        "teachers", "beam_size", "n_best", "select", "keep_original", "alpha", "chunk_size",
        "digests",
    )  # fmt: skip

    def __post_init__(self) -> None:
        teachers = self.teachers
        if (
            not isinstance(teachers, list)
            or not teachers
            or not all(isinstance(t, str) and t for t in teachers)
        ):
            raise ValueError(
                f"[distill] teachers: expected a non-empty list of model directories, got "
                f"{teachers!r}"
            )
        check_choice(self.select, SELECTIONS, "[distill] select")
        check_bool(self.keep_original, "[distill] keep_original")
        check_int(self.chunk_size, "[distill] chunk_size")
        digests = self.digests
        if digests is not None and (
            not isinstance(digests, list)
            or len(digests) != len(teachers)
            or not all(isinstance(d, str) and len(d) == _SHA256_HEX for d in digests)
        ):
            raise ValueError(
                f"[distill] digests: expected one SHA-256 (64 hex digits) per teacher "
                f"({len(teachers)}), got {digests!r}"
            )

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> DistillOptions:
        """The options of a ``[distill]`` table; ValueError naming ``[distill]`` and the key."""
        if not isinstance(table, Mapping):
            raise TypeError(f"[distill]: expected a table, got {type(table).__name__}")
        check_keys(table, cls.KEYS, "[distill]")
        given = dict(table)
        beam, n_best, alpha = (given.pop(k, None) for k in ("beam_size", "n_best", "alpha"))
        select = given.get("select", "chrf")
        try:
            check_optional_int(n_best, "n_best")
            decoding = DecodingOptions(BEAM_SIZE).updated(beam_size=beam, alpha=alpha)
            asked = 1 if select == "best" else (n_best or decoding.beam_size)
            decoding = decoding.updated(n_best=asked)
        except ValueError as e:
            raise ValueError(f"[distill] {e}") from None
        teachers = given.pop("teachers", None)  # None: refused by name below
        return cls(teachers, **given, decoding=decoding, teacher_alpha=alpha is None)

    def to_dict(self) -> dict[str, Any]:
        """The ``[distill]`` table, flat, as ``job.json`` holds it."""
        d = self.decoding
        table: dict[str, Any] = {"teachers": self.teachers, "beam_size": d.beam_size}
        table.update(n_best=d.n_best, select=self.select, keep_original=self.keep_original)
        table.update(alpha=None if self.teacher_alpha else d.alpha, chunk_size=self.chunk_size)
        return {**table, "digests": self.digests}

    def check(self) -> None:
        """Each teacher is a model directory with its weights (FileNotFoundError or ValueError
        naming ``[distill] teachers[i]``); fills in the length penalty and ``digests`` (see the
        class), or checks the digests given (ValueError naming ``[distill] digests[i]``)."""
        weights = self.teacher_weights()
        found = [digest for _, digest in weights]
        if self.digests is not None:
            for i, (given, digest) in enumerate(zip(self.digests, found, strict=True)):
                if given != digest:
                    raise ValueError(
                        f"[distill] digests[{i}]: {self.teachers[i]}'s weights have SHA-256 "
                        f"{digest}, the job names {given} (not the teacher the job was "
                        f"written for)"
                    )
        self.digests = found
        if self.teacher_alpha:
            alpha = DecodingOptions.carried_by(weights[0][0].parent)[0].alpha
            self.decoding = self.decoding.updated(alpha=alpha)
            self.teacher_alpha = False

    def teacher_weights(self) -> list[tuple[Path, str]]:
        """Each teacher's ``model.safetensors`` and its SHA-256 (computed once a process for a
        file unchanged)."""
        from ..inference.modeldir import resolve_model_dir
        from ..models.saved import WEIGHTS_FILE

        found = []
        for i, teacher in enumerate(self.teachers or []):
            name = f"[distill] teachers[{i}]"
            directory = resolve_model_dir(teacher, name=name)
            weights = directory / WEIGHTS_FILE
            if not weights.is_file():
                raise ValueError(
                    f"{name}: {teacher}: no {WEIGHTS_FILE} (expected a model directory: "
                    f"OUT/model, a run OUT, or one `attnlab import` wrote)"
                )
            found.append((weights, _weights_digest(weights)))
        return found


#: SHA-256 of weights files this process has read, by (path, device, inode, size, mtime).
_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def _weights_digest(path: Path) -> str:
    from ..data.textfiles import sha256_file

    status = path.stat()
    identity = (os.path.realpath(path), status.st_dev, status.st_ino, status.st_size)
    identity += (status.st_mtime_ns,)
    if identity not in _DIGESTS:
        _DIGESTS[identity] = sha256_file(path)
    return _DIGESTS[identity]


# -- the distilled corpus on disk -----------------------------------------------------------------


@dataclass(frozen=True)
class DistilledCorpus:
    """A complete distilled corpus: its ``directory``, the line-aligned ``src`` and ``tgt``
    files, its ``meta`` and whether it was ``cached`` (made by an earlier run)."""

    directory: Path
    meta: dict[str, Any]
    cached: bool

    @property
    def src(self) -> Path:
        return self.directory / SRC_FILE

    @property
    def tgt(self) -> Path:
        return self.directory / TGT_FILE

    @property
    def pairs(self) -> int:
        return int(self.meta["pairs"])


def distilled_root(cache_dir: str | os.PathLike | None) -> Path:
    """Where distilled corpora are kept: ``CACHE/distilled``, CACHE the task's ``cache_dir``
    or :func:`attnlab.data.shardformat.default_cache_dir`, beside the shards."""
    from ..data.shardformat import default_cache_dir

    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "distilled"


def corpus_key(teachers: Sequence[str], corpus: str, options: dict[str, Any]) -> str:
    """The cache key of a distilled corpus: a SHA-256 hex digest of the teachers' weights
    digests (in order), the corpus's digest and the ``options`` that change the translations
    (beam, n best, selection, length penalty), with the format's version."""
    data = {"format": FORMAT, "version": VERSION, "teachers": list(teachers)}
    data.update(corpus=corpus, options=options)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def load_distilled(directory: str | os.PathLike) -> DistilledCorpus | None:
    """The complete distilled corpus in ``directory`` (its ``meta.json`` is there and of this
    format), else None."""
    directory = Path(directory)
    meta = _read_json(directory / META_FILE)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    if meta.get("version") != VERSION:
        return None
    return DistilledCorpus(directory, meta, cached=True)


def _one_line(text: str) -> str:
    """``text`` on one line of a text file (a line break inside would shift the lines after)."""
    return text.replace("\r", " ").replace("\n", " ")


def _windows(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    window: list[tuple[str, str]] = []
    for pair in pairs:
        window.append(pair)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _plan(window: list[tuple[str, str]], chunk_size: int) -> list[list[int]]:
    """The chunks of a window: its lines' indices sorted by source length (then index), cut
    every ``chunk_size``."""
    order = sorted(range(len(window)), key=lambda i: (len(window[i][0]), i))
    return [order[k : k + chunk_size] for k in range(0, len(order), chunk_size)]


def distill_corpus(
    pairs: Callable[[], Iterable[tuple[str, str]]],
    total: int,
    *,
    directory: str | os.PathLike,
    translate: Callable[[list[str], list[str]], list[str]],
    chunk_size: int = CHUNK_SIZE,
    window_chunks: int = WINDOW_CHUNKS,
    meta: dict[str, Any] | None = None,
    progress: Callable[[int, int, float, float], object] | None = None,
    progress_lines: int = PROGRESS_LINES,
    note: Callable[[str], object] = lambda line: None,
) -> DistilledCorpus:
    """The distilled corpus in ``directory``: returned at once when it is complete, else made.

    ``pairs()`` gives the ``total`` (source, reference) pairs, in order, each time it is
    called (read twice: to decode, then to assemble). ``translate(sources, references)``
    gives one translation per source. Chunks of ``chunk_size`` sources (cut from windows of
    ``window_chunks`` chunks sorted by source length) are decoded and each written to
    ``DIRECTORY.work/`` atomically and durably as it finishes; a chunk already there is not
    decoded again (a killed run resumes). Once every chunk is there the corpus is assembled in
    the sources' order into a temporary sibling, ``src.txt`` and ``tgt.txt`` then ``meta.json``
    (``meta`` and the counts), flushed, and renamed into place in one step; the work directory
    is then removed. ``progress(done, total, lines_per_s, eta_s)`` is called after each chunk
    and, inside one, after every ``progress_lines`` sources it translates (``translate`` is
    called that many at a time; :func:`attnlab.data.progress.progress_printer` makes one),
    ``note`` with a line saying what is decoded and what resumed."""
    from .._io import atomic_write, atomic_write_dir, write_json

    check_int(chunk_size, "chunk_size")
    check_int(window_chunks, "window_chunks")
    check_int(progress_lines, "progress_lines")
    directory = Path(directory)
    done = load_distilled(directory)
    if done is not None:
        return done
    work = directory.with_name(directory.name + ".work")
    plan = {"chunk_size": chunk_size, "window_chunks": window_chunks, "lines": total}
    if work.is_dir() and _read_json(work / PLAN_FILE) != plan:
        shutil.rmtree(work)  # another plan's chunks (or none written yet): start over
    work.mkdir(parents=True, exist_ok=True)
    if not (work / PLAN_FILE).is_file():
        write_json(work / PLAN_FILE, plan)
    window_lines = chunk_size * window_chunks
    present = sum(1 for _ in work.glob("chunk-*.json"))
    if present:
        chunks = f"{present:,} chunk{'s' if present != 1 else ''}"
        note(f"resuming: {chunks} of {chunk_size:,} sources decoded by an earlier run")
    started = time.perf_counter()
    decoded = lines = number = 0

    def report(done: int, translated: int) -> None:  # lines done, of them translated here
        if progress is not None:
            elapsed = time.perf_counter() - started
            rate = translated / elapsed if translated and elapsed > 0 else 0.0
            eta = (total - done) / rate if rate else (0.0 if done >= total else math.inf)
            progress(done, total, rate, eta)

    for w, window in enumerate(_windows(pairs(), window_lines)):
        for indices in _plan(window, chunk_size):
            path = work / f"chunk-{number:06d}.json"
            fresh = not path.is_file()  # else decoded by an earlier run: the note says so
            if fresh:
                began = time.perf_counter()
                sources = [window[i][0] for i in indices]
                references = [window[i][1] for i in indices]
                targets: list[str] = []
                for start in range(0, len(sources), progress_lines):
                    part = slice(start, start + progress_lines)
                    found = translate(sources[part], references[part])
                    if len(found) != len(sources[part]):
                        raise RuntimeError(
                            f"translate: {len(found)} targets for {len(sources[part])}"
                        )
                    targets += found
                    if len(targets) < len(sources):
                        report(lines + len(targets), decoded + len(targets))
                record = {
                    "lines": [w * window_lines + i for i in indices],
                    "targets": targets,
                    "seconds": time.perf_counter() - began,
                }
                text = json.dumps(record, ensure_ascii=False)
                atomic_write(path, lambda temp, text=text: Path(temp).write_text(text, "utf-8"))
                decoded += len(indices)
            lines += len(indices)
            number += 1
            if fresh:  # no line for a chunk read back: its rate would be 0, its ETA unknown
                report(lines, decoded)
    if lines != total:
        raise ValueError(f"the corpus has {lines:,} pairs, not the {total:,} expected")

    def assemble(temp: Path) -> None:
        count, number, seconds = 0, 0, 0.0
        with (
            open(temp / SRC_FILE, "w", encoding="utf-8", newline="\n") as src,
            open(temp / TGT_FILE, "w", encoding="utf-8", newline="\n") as tgt,
        ):
            for w, window in enumerate(_windows(pairs(), window_lines)):
                targets: list[str | None] = [None] * len(window)
                for _ in range(-(-len(window) // chunk_size)):
                    record = read_json(work / f"chunk-{number:06d}.json")
                    for line, target in zip(record["lines"], record["targets"], strict=True):
                        targets[line - w * window_lines] = target
                    seconds += record["seconds"]
                    number += 1
                for (source, _), target in zip(window, targets, strict=True):
                    if target is None:  # not expected: the chunks cover their window
                        raise RuntimeError(f"{work}: chunk {number - 1} leaves a line out")
                    src.write(_one_line(source) + "\n")
                    tgt.write(_one_line(target) + "\n")
                    count += 1
        found = {"format": FORMAT, "version": VERSION, **(meta or {}), "pairs": count}
        found.update(chunk_size=chunk_size, chunks=number, decode_seconds=seconds)
        write_json(temp / META_FILE, found)  # last: it marks the corpus complete

    try:
        atomic_write_dir(directory, assemble)
    except FileNotFoundError:
        done = load_distilled(directory)  # another process assembled it and took the chunks
        if done is None:
            raise
        return done
    shutil.rmtree(work, ignore_errors=True)
    made = load_distilled(directory)
    assert made is not None
    return DistilledCorpus(made.directory, made.meta, cached=False)


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, None where there is none to read (missing, damaged)."""
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


# -- the teachers ---------------------------------------------------------------------------------


def chunk_targets(
    translator: Any, sources: list[str], references: list[str], *, select: str
) -> list[str]:
    """The teachers' translation of each source: of its n best (the ``translator``'s
    decoding, its ``n_best``), the one with the best sentence chrF against its reference
    (sacreBLEU's ``CHRF().sentence_score``; the higher-ranked one on a tie) for ``select =
    "chrf"``, else the best one. A source the teachers give nothing for translates to ``""``."""
    found = translator.hypotheses(sources, on_too_long=lambda report: None)
    if select == "chrf" and translator.decoding.n_best > 1:
        from sacrebleu.metrics import CHRF

        chrf = CHRF()

        def closest(hyps, reference: str) -> str:
            scores = [chrf.sentence_score(h.text, [reference]).score for h in hyps]
            return hyps[scores.index(max(scores))].text

        return [closest(h, r) if h else "" for h, r in zip(found, references, strict=True)]
    return [h[0].text if h else "" for h in found]


def _teachers(options: DistillOptions, max_tokens: int):
    """The Translator of the teachers' ensemble (one teacher: that model)."""
    from ..inference.translator import Translator

    teachers = options.teachers
    return Translator.load(
        teachers if len(teachers) > 1 else teachers[0],
        decoding=options.decoding,
        max_tokens=max_tokens,
    )


def _pairs_digest(pairs: Sequence[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps(pair, ensure_ascii=False).encode("utf-8") + b"\n")
    return digest.hexdigest()


def _file_pairs(src: str, tgt: str) -> Callable[[], Iterator[tuple[str, str]]]:
    """The stripped lines of two line-aligned files as pairs (as the shard path reads them)."""
    from ..data.textfiles import iter_lines

    def pairs() -> Iterator[tuple[str, str]]:
        for s, t in zip(iter_lines(src), iter_lines(tgt), strict=True):
            yield s.strip(), t.strip()

    return pairs


def student_task(
    task: Any, options: DistillOptions, max_tokens: int, data: Any, *, rank: int, note
) -> tuple[Any, Any, dict]:
    """What the student of a translation ``task`` with ``[distill]`` ``options`` (checked:
    :meth:`DistillOptions.check`) trains on, as ``(task, data, record)``; the teachers decode
    batches of ``max_tokens`` (``[eval] max_tokens``). An in-memory task (numbers,
    multi30k): ``task`` itself, and its ``data`` with the training split replaced by the
    distilled pairs followed by the original ones (unless ``keep_original`` is false). A task
    of corpora on disk (files): the task training on the distilled corpus of each of its
    corpora (with that corpus's weight) followed by the original corpora
    (:meth:`~attnlab.tasks.files.Files.with_corpora`), and ``data`` as it
    was. ``record`` says what was distilled, for the run's ``results.json``. Each distilled
    corpus is made once (:func:`distill_corpus`, cached by its key) and reused after; rank 0
    makes them, another rank waits for them on the cache."""
    import torch

    from ..data.corpora import ParallelCorpus
    from ..data.progress import progress_printer
    from ..data.textfiles import check_parallel

    if options.digests is None or options.teacher_alpha:
        options.check()  # options not checked with their job: the digests and alpha
    plan = task.disk_plan()
    root = distilled_root(None if plan is None else plan.cache_dir)
    teachers, decoding = options.teachers, options.decoding
    translation = {"beam_size": decoding.beam_size, "n_best": decoding.n_best}
    translation.update(select=options.select, alpha=decoding.alpha)
    ensemble = f"{len(teachers)} teachers (their ensemble)" if len(teachers) > 1 else "1 teacher"
    chosen = "best by chrF against the reference" if decoding.n_best > 1 else "the best"
    note(
        f"distill: {ensemble}, beam {decoding.beam_size}, of each source's {decoding.n_best} "
        f"{chosen}, alpha {decoding.alpha:g}"
    )
    teachers_meta = [
        {"model": t, "sha256": d} for t, d in zip(teachers, options.digests or [], strict=True)
    ]
    loaded: list[Any] = []

    def translate(sources: list[str], references: list[str]) -> list[str]:
        if not loaded:
            loaded.append(_teachers(options, max_tokens))
        return chunk_targets(loaded[0], sources, references, select=options.select)

    def make(name: str, pairs, total: int, corpus: dict[str, Any]) -> DistilledCorpus:
        key = corpus_key(options.digests or [], corpus["sha256"], translation)
        directory = root / key
        made = load_distilled(directory)
        if made is None and rank != 0:
            note(f"distill {name}: waiting for rank 0 to make {directory}")
            while made is None:  # no deadline: rank 0 decodes for as long as it takes
                time.sleep(2.0)
                made = load_distilled(directory)
        if made is None:
            threads = torch.get_num_threads()
            note(
                f"distill {name}: translating {total:,} sources with the teachers, "
                f"{threads} torch threads, chunks of {options.chunk_size:,}, into {directory}"
            )
            meta = {"key": key, "teachers": teachers_meta, "corpus": corpus, **translation}
            meta["threads"] = threads
            made = distill_corpus(
                pairs,
                total,
                directory=directory,
                translate=translate,
                chunk_size=options.chunk_size,
                meta=meta,
                progress=progress_printer(f"distilled {name}", every_s=10.0, write=note),
                note=lambda line: note(f"distill {name}: {line}"),
            )
        where = "reused" if made.cached else "made"
        note(f"distill {name}: {made.pairs:,} pairs {where}: {made.directory}")
        return made

    made: list[DistilledCorpus] = []
    corpora = None if plan is None else plan.corpora
    if corpora is None:  # in memory: the training split
        train = list(data["train"])
        corpus = {"name": data.name, "split": "train", "sha256": _pairs_digest(train)}
        made.append(make("train", lambda: iter(train), len(train), corpus))
        distilled = _read_pairs(made[0])
        kept = train if options.keep_original else []
        splits = {**data.splits, "train": distilled + kept}
        data = ParallelCorpus(data.name, data.src_lang, data.tgt_lang, splits)
        note(f"student: trains on {len(distilled):,} distilled pairs + {len(kept):,} original")
    else:
        student = []
        for c in corpora:
            src, tgt = check_parallel(c.src, c.tgt, c.option, utf8=False)
            both = hashlib.sha256(f"{src.sha256} {tgt.sha256}".encode("ascii")).hexdigest()
            corpus = {"name": c.name, "src": src.sha256, "tgt": tgt.sha256, "sha256": both}
            one = make(c.name, _file_pairs(c.src, c.tgt), src.lines, corpus)
            made.append(one)
            student.append(
                dataclasses.replace(
                    c,
                    name=f"{c.name}-distilled",
                    src=str(one.src),
                    tgt=str(one.tgt),
                    option=f"[distill] of {c.option}",
                )
            )
        if options.keep_original:
            student += corpora
        task = task.with_corpora(student)
    record = {
        "teachers": teachers_meta,
        **translation,
        "keep_original": options.keep_original,
        "corpora": [
            {
                "directory": str(m.directory),
                "pairs": m.pairs,
                "reused": m.cached,
                "decode_seconds": m.meta.get("decode_seconds"),
            }
            for m in made
        ],
    }
    return task, data, record


def _read_pairs(corpus: DistilledCorpus) -> list[tuple[str, str]]:
    from ..data.textfiles import iter_lines

    pairs = list(zip(iter_lines(corpus.src), iter_lines(corpus.tgt), strict=True))
    if len(pairs) != corpus.pairs:
        raise ValueError(
            f"{corpus.directory}: {len(pairs):,} pairs, its {META_FILE} says {corpus.pairs:,}"
        )
    return pairs

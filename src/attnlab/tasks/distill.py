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
    # engine = "torch"     # "ctranslate2": one teacher decoded by CTranslate2
    # weight = 1.0         # files: a distilled corpus's weight, times its corpus's

The teachers' translations of a corpus are a corpus too, made once and cached
(:func:`distill_corpus`): under the task's cache directory (``[task] cache_dir``, else
:func:`attnlab.data.shardformat.default_cache_dir`), in ``distilled/KEY``, KEY a digest of the
teachers' weights, the corpus and the options that change the translations. Such a directory
holds two line-aligned text files, ``src.txt`` (the sources) and ``tgt.txt`` (their chosen
translations), and ``meta.json``, written last: a directory with its ``meta.json`` is
complete, and nothing else is read as a distilled corpus.

Decoding is :mod:`attnlab.inference.corpus`'s: in length-sorted chunks of ``chunk_size``
sources, each written to ``distilled/KEY.work/`` as it finishes (a killed run resumes), shared
by the processes of a ``torchrun`` group (each decodes its share, rank 0 assembles); the
corpus is the same whether a run was interrupted or not, and however many processes made it.

The student's tokenizers are its own, trained as its task trains them, on the text it trains
on: the distilled pairs (and the original ones when kept). The in-memory tasks (numbers,
multi30k) replace their training split with those pairs; the ``files`` task trains from the
distilled files as one more corpus of its shard path (each of its corpora distilled, with
``weight`` times the corpus's weight in the mixture).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .. import _checks
from .._checks import check_bool, check_choice, check_int, check_keys, check_optional_int
from .._io import read_json
from ..decode.options import DecodingOptions
from ..inference.corpus import CHUNK_SIZE
from ..inference.engines import PATIENCE, check_engine

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
FORMAT = "attnlab-distilled"
VERSION = 1
SRC_FILE, TGT_FILE, META_FILE = "src.txt", "tgt.txt", "meta.json"
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
    gives ``digests`` is refused unless its teachers still have those weights. ``engine`` and
    ``weight`` are written back only where not their defaults (as a job before them was)."""

    teachers: list[str]
    decoding: DecodingOptions = field(default_factory=lambda: DecodingOptions(BEAM_SIZE))
    select: str = "chrf"
    keep_original: bool = True
    chunk_size: int = CHUNK_SIZE
    digests: list[str] | None = None
    teacher_alpha: bool = True
    engine: str = "torch"
    weight: float = 1.0

    #: The keys of the ``[distill]`` table.
    KEYS: ClassVar[tuple[str, ...]] = (
        "teachers", "beam_size", "n_best", "select", "keep_original", "alpha", "chunk_size",
        "digests", "engine", "weight",
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
        try:  # the one rule of what an engine can do (its package there, one model)
            check_engine(self.engine, models=len(teachers))
        except ValueError as e:
            raise ValueError(f"[distill] {e}") from None
        _checks.check_positive_number(self.weight, "[distill] weight")
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
        table["digests"] = self.digests
        defaults = {"engine": "torch", "weight": 1.0}
        return table | {k: getattr(self, k) for k, v in defaults.items() if getattr(self, k) != v}

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
    (beam, n best, selection, length penalty; an engine not torch's, whose beams may differ),
    with the format's version."""
    data = {"format": FORMAT, "version": VERSION, "teachers": list(teachers)}
    data.update(corpus=corpus, options=options)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def load_distilled(directory: str | os.PathLike) -> DistilledCorpus | None:
    """The complete distilled corpus in ``directory`` (its ``meta.json`` is there and of this
    format), else None."""
    directory = Path(directory)
    try:
        meta = read_json(directory / META_FILE)
    except (OSError, ValueError):  # none (yet), or damaged
        return None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        return None
    return DistilledCorpus(directory, meta, cached=True)


def _one_line(text: str) -> str:
    """``text`` on one line of a text file (a line break inside would shift the lines after)."""
    return text.replace("\r", " ").replace("\n", " ")


def distill_corpus(
    pairs: Callable[[], Iterable[tuple[str, str]]],
    total: int,
    *,
    directory: str | os.PathLike,
    translate: Callable[[list[str], list[str]], list[str]],
    meta: dict[str, Any] | None = None,
    **options: Any,
) -> DistilledCorpus:
    """The distilled corpus in ``directory``: returned at once when it is complete, else made.

    ``pairs()`` gives the ``total`` (source, reference) pairs, in order, at each call;
    ``translate(sources, references)`` one translation per source, in the chunks of
    :func:`attnlab.inference.corpus.translate_chunks` (``options``: its own) in
    ``DIRECTORY.work/``. Rank 0 then assembles them, in the sources' order, into a temporary
    sibling: ``src.txt``, ``tgt.txt``, then ``meta.json`` (``meta``, the counts, the
    ``processes``, the chunks' ``decode_seconds`` summed, and ``decode_wall_seconds``: this
    run's, from its start to the last chunk, the others' included), renamed into place in one
    step; the work directory is removed. Another rank returns what rank 0 made."""
    import torch

    from .._io import atomic_write_dir, write_json
    from ..inference.corpus import assembled, translate_chunks

    directory = Path(directory)
    if (done := load_distilled(directory)) is not None:
        return done
    work = directory.with_name(directory.name + ".work")
    ready = lambda: load_distilled(directory) is not None  # noqa: E731
    both = lambda _, rows: translate([s for s, _ in rows], [r for _, r in rows])  # noqa: E731
    started = time.perf_counter()
    whole = translate_chunks(pairs, total, work=work, translate=both, done=ready, **options)
    wall = time.perf_counter() - started

    def assemble(temp: Path) -> None:
        tally = {"chunks": 0, "seconds": 0.0}
        with (
            open(temp / SRC_FILE, "w", encoding="utf-8", newline="\n") as src,
            open(temp / TGT_FILE, "w", encoding="utf-8", newline="\n") as tgt,
        ):
            for (source, _), target in assembled(pairs, work, tally):
                src.write(_one_line(source) + "\n")
                tgt.write(_one_line(target) + "\n")
        found = {"format": FORMAT, "version": VERSION, **(meta or {}), "pairs": total}
        found.update(chunk_size=options.get("chunk_size", CHUNK_SIZE), chunks=tally["chunks"])
        found.update(processes=options.get("world", 1), decode_seconds=tally["seconds"])
        found.update(threads=torch.get_num_threads())  # each process's, as rank 0's
        found.update(decode_wall_seconds=round(wall, 3))
        write_json(temp / META_FILE, found)  # last: it marks the corpus complete

    if whole:
        try:
            atomic_write_dir(directory, assemble)
        except FileNotFoundError:
            if not ready():  # else another run assembled it and took the chunks
                raise
        shutil.rmtree(work, ignore_errors=True)
    made = load_distilled(directory)
    assert made is not None  # assembled here, or (done()) by another process
    return DistilledCorpus(made.directory, made.meta, cached=not whole)


# -- the teachers ---------------------------------------------------------------------------------


def chunk_targets(
    translator: Any, sources: list[str], references: list[str], *, select: str
) -> list[str]:
    """The teachers' translation of each source: of its n best (the ``translator``'s
    decoding, its ``n_best``), the one with the best sentence chrF against its reference
    (sacreBLEU's ``CHRF().sentence_score``; the higher-ranked one on a tie) for ``select =
    "chrf"``, else the best one. A source the teachers give nothing for translates to ``""``."""
    found = translator.hypotheses(sources, on_too_long=lambda report: None, scored=False)
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
        engine=options.engine,
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
    corpora (with ``weight`` times that corpus's weight) followed by the original corpora
    (:meth:`~attnlab.tasks.files.Files.with_corpora`), and ``data`` as it
    was. ``record`` says what was distilled, for the run's ``results.json``. Each distilled
    corpus is made once (:func:`distill_corpus`, cached by its key) and reused after; under
    ``torchrun`` every process decodes its share of the chunks and rank 0 assembles them."""
    import torch

    from ..data.corpora import ParallelCorpus
    from ..data.progress import progress_printer
    from ..data.textfiles import check_parallel
    from ..train.distributed import launched_world

    if options.digests is None or options.teacher_alpha:
        options.check()  # options not checked with their job: the digests and alpha
    plan = task.disk_plan()
    if options.weight != 1.0 and (plan is None or "temperature" in plan.mixing):
        mixed = "mixes by size ([task] temperature)" if plan else "trains on each pair once"
        raise ValueError(f"[distill] weight: a files job's weights; {task.name} {mixed}")
    root = distilled_root(None if plan is None else plan.cache_dir)
    teachers, decoding = options.teachers, options.decoding
    translation = {"beam_size": decoding.beam_size, "n_best": decoding.n_best}
    translation.update(select=options.select, alpha=decoding.alpha)
    if options.engine != "torch":  # how far CTranslate2's beam collects for attnlab's ranking
        translation.update(engine=options.engine, patience=PATIENCE)
    world = launched_world()[1]
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
        if made is None:
            threads = torch.get_num_threads()
            share = f"process {rank} of {world}, " if world > 1 else ""
            note(
                f"distill {name}: translating {total:,} sources with the teachers, {share}"
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
                rank=rank,
                world=world,
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
                    weight=c.weight * options.weight,
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
                "decode_wall_seconds": m.meta.get("decode_wall_seconds"),
                "processes": m.meta.get("processes", 1),
                "threads": m.meta.get("threads"),
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

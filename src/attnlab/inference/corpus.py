"""Translating a corpus at scale (:func:`translate_chunks`, then :func:`assembled`): in chunks,
length-sorted, durable, resumable, shared by the processes of a ``torchrun`` group.

Rows (a source, then what its translation needs: a reference, constraints) are read in windows
of ``window_chunks * chunk_size`` (memory stays bounded), sorted by source length in a window
and cut every ``chunk_size`` (full batches). Chunk ``n`` goes to the work directory
(``chunk-NNNNNN.json``, atomically, durably) as it finishes, never translated again: a killed
run resumes. A work directory of another ``plan.json`` (the chunking, the row count, the
caller's ``key``: input, model, decoding) is started over. Process ``rank`` of ``world``
translates the chunks ``n % world == rank``; rank 0 then waits for every chunk, another rank
for ``done()``, failing in one line naming the rank that wrote ``rank-R.failed``, or those
whose chunks are missing once none came for ``wait_s`` seconds. The chunks, and the corpus
they make, are the same however a run was cut or shared.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._checks import check_int
from .._io import read_json, write_json

__all__ = ["CHUNK_SIZE", "WAIT_S", "assembled", "translate_chunks", "windows"]

#: Sources translated, then written to disk, at a time; chunks a window sorts together;
#: sources between two progress reports (a chunk can take minutes: a report should not wait);
#: seconds a wait for the other processes goes on with no new chunk.
CHUNK_SIZE, WINDOW_CHUNKS, PROGRESS_LINES, WAIT_S = 2000, 50, 200, 3600.0
PLAN_FILE = "plan.json"
Row = Sequence[str]
T = TypeVar("T")


def windows(rows: Iterable[T], size: int) -> Iterator[list[T]]:
    """``rows`` as lists of ``size`` (the last may be shorter), read as each is asked for."""
    each = iter(rows)
    return iter(lambda: list(itertools.islice(each, size)), [])


def translate_chunks(
    rows: Callable[[], Iterable[Row]],
    total: int,
    *,
    work: str | os.PathLike,
    translate: Callable[[list[int], list[Row]], list[str]],
    chunk_size: int = CHUNK_SIZE,
    window_chunks: int = WINDOW_CHUNKS,
    key: Any = None,
    progress: Callable[[int, int, float, float], object] | None = None,
    progress_lines: int = PROGRESS_LINES,
    note: Callable[[str], object] = lambda line: None,
    rank: int = 0,
    world: int = 1,
    done: Callable[[], bool] = lambda: False,
    wait_s: float = WAIT_S,
) -> bool:
    """Every chunk of the ``total`` rows of ``rows()`` (each call gives them, in order) in
    ``work``: True once this process's share is written and (rank 0) every chunk is there;
    False where ``done()`` came first. ``translate(numbers, rows)`` gives one translation per
    row (``numbers``: their positions from 0), ``progress_lines`` rows at a time;
    ``progress(done, total, lines_per_s, eta_s)`` hears of this process's share after each
    call (:func:`attnlab.data.progress.progress_printer` makes one), ``note`` what resumed."""
    for value, name in ((chunk_size, "chunk_size"), (window_chunks, "window_chunks")):
        check_int(value, name)
    check_int(progress_lines, "progress_lines")
    work, began, size = Path(work), time.time(), chunk_size * window_chunks
    plan = {"chunk_size": chunk_size, "window_chunks": window_chunks, "lines": total}
    plan.update({} if key is None else {"key": key})

    def planned() -> bool:  # the work directory is this plan's
        try:
            return read_json(work / PLAN_FILE) == plan
        except (OSError, ValueError):  # none yet, or damaged
            return False

    if rank == 0 and not planned():  # another plan's chunks (or none yet): start over
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        write_json(work / PLAN_FILE, plan)
    spans = [min(size, total - w) for w in range(0, total, size)]
    sizes = [min(chunk_size, span - k) for span in spans for k in range(0, span, chunk_size)]
    path = [work / f"chunk-{n:06d}.json" for n in range(len(sizes))]

    def wait(ready: Callable[[], bool], blamed: Callable[[], list[int]]) -> None:
        seen, since = -1, time.monotonic()
        while not ready():
            for marker in work.glob("rank-*.failed"):
                if marker.stat().st_mtime > began - 2:  # else an earlier run's (coarse times)
                    why = marker.read_text("utf-8")
                    raise RuntimeError(f"{work}: {marker.stem.replace('-', ' ')} failed: {why}")
            if seen != (seen := sum(1 for _ in work.glob("chunk-*.json"))):
                since = time.monotonic()
            elif time.monotonic() - since > wait_s:
                ranks = ", ".join(map(str, sorted({n % world for n in blamed()}) or [0]))
                why = f"no new chunk for {wait_s:g} s from rank {ranks}: did it fail or hang?"
                raise TimeoutError(f"{work}: {why}")
            time.sleep(0.5)

    if rank != 0:  # rank 0 starts over a work directory of another plan
        wait(lambda: planned() or done(), list)
    mine = range(rank, len(sizes), world)
    share, present = sum(sizes[n] for n in mine), sum(path[n].is_file() for n in mine)
    if present:
        chunks = f"{present:,} chunk{'s' if present != 1 else ''}"
        note(f"resuming: {chunks} of {chunk_size:,} sources decoded by an earlier run")
    started, decoded, lines, number, read = time.perf_counter(), 0, 0, 0, 0

    def report(done: int, translated: int) -> None:  # lines done, of them translated here
        if progress is not None:
            rate = translated / max(time.perf_counter() - started, 1e-9)
            progress(done, share, rate, (share - done) / rate if rate else math.inf)

    try:
        for first, window in ((w * size, v) for w, v in enumerate(windows(rows(), size))):
            read += len(window)
            order = sorted(range(len(window)), key=lambda i, w=window: (len(w[i][0]), i))
            for indices in (order[k : k + chunk_size] for k in range(0, len(order), chunk_size)):
                n, number = number, number + 1
                if n % world != rank or path[n].is_file():  # another's, or an earlier run's
                    lines += len(indices) if n % world == rank else 0  # (no report: rate 0)
                    continue
                clock, targets = time.perf_counter(), []
                numbers, chosen = [first + i for i in indices], [window[i] for i in indices]
                for k in range(0, len(chosen), progress_lines):
                    part = slice(k, k + progress_lines)
                    targets += (found := translate(numbers[part], chosen[part]))
                    if len(found) != len(chosen[part]):
                        raise RuntimeError(f"translate: {len(found)} for {len(chosen[part])}")
                    report(lines + len(targets), decoded + len(targets))
                seconds = time.perf_counter() - clock
                write_json(path[n], {"lines": numbers, "targets": targets, "seconds": seconds})
                lines, decoded = lines + len(indices), decoded + len(indices)
    except BaseException as error:
        if world > 1:  # the others stop waiting, and name this process
            (work / f"rank-{rank}.failed").write_text(f"{type(error).__name__}: {error}", "utf-8")
        raise
    if read != total:
        raise ValueError(f"the corpus has {read:,} rows, not the {total:,} expected")
    missing = lambda: [n for n, p in enumerate(path) if not p.is_file()]  # noqa: E731
    wait((lambda: done() or not missing()) if rank == 0 else done, missing)
    return rank == 0 and not done()


def assembled(
    rows: Callable[[], Iterable[Row]], work: str | os.PathLike, tally: dict | None = None
) -> Iterator[tuple[Row, str]]:
    """Each row of ``rows()`` with its translation, ``(row, target)`` in order, from the chunks
    :func:`translate_chunks` wrote into ``work`` (as its ``plan.json`` cut them); then
    ``tally`` holds the ``chunks`` read and their ``seconds``, summed."""
    plan, number, seconds = read_json(Path(work) / PLAN_FILE), 0, 0.0
    chunk_size, size = plan["chunk_size"], plan["chunk_size"] * plan["window_chunks"]
    for first, window in ((w * size, v) for w, v in enumerate(windows(rows(), size))):
        targets: list[str | None] = [None] * len(window)
        for _ in range(-(-len(window) // chunk_size)):
            record = read_json(Path(work) / f"chunk-{number:06d}.json")
            for line, target in zip(record["lines"], record["targets"], strict=True):
                targets[line - first] = target
            seconds, number = seconds + record["seconds"], number + 1
        for row, target in zip(window, targets, strict=True):
            if target is None:  # not expected: the chunks cover their window
                raise RuntimeError(f"{work}: chunk {number - 1} leaves a line out")
            yield row, target
    if tally is not None:
        tally.update(chunks=number, seconds=seconds)

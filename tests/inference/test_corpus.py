"""Translating a corpus in chunks (attnlab.inference.corpus): the chunks are the same however
many processes share them (each translates the chunks ``n % world == rank``, rank 0 assembles),
a work directory of another key is started over, and a process that waits for another fails
in one line naming the rank that failed or hung. The processes are threads here, on one work
directory (tests/tasks/test_distill.py runs `attnlab train` under torchrun)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from attnlab.inference.corpus import assembled, translate_chunks

ROWS = [(f"{'w ' * (i % 7)}s{i}".strip(), f"r{i}") for i in range(23)]


def upper(numbers: list[int], rows: list) -> list[str]:
    return [f"{n}:{s.upper()}|{r}" for n, (s, r) in zip(numbers, rows, strict=True)]


def run(work: Path, world: int, translate=upper, **options) -> list[object]:
    """Every rank of ``world`` in a thread of its own: each one's result, or what it raised.
    Another rank's ``done()`` is rank 0 having ended (what it makes of the chunks)."""
    results: list[object] = [None] * world

    def rank(r: int) -> None:
        try:
            results[r] = translate_chunks(
                lambda: iter(ROWS), len(ROWS), work=work, translate=translate, chunk_size=3,
                window_chunks=2, rank=r, world=world, done=lambda: results[0] is not None,
                **options,
            )  # fmt: skip
        except Exception as error:  # the test looks at it
            results[r] = error

    threads = [threading.Thread(target=rank, args=(r,), name=f"rank {r}") for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_any_number_of_processes_gives_the_same_chunks_each_translating_its_share(tmp_path):
    expected = [(row, upper([i], [row])[0]) for i, row in enumerate(ROWS)]
    seen: dict[str, list[int]] = {}

    def translate(numbers, rows):
        seen.setdefault(threading.current_thread().name, []).extend(numbers)
        return upper(numbers, rows)

    chunks = {}
    for world in (1, 2, 3):
        seen.clear()
        work = tmp_path / f"w{world}"
        assert run(work, world, translate) == [True] + [False] * (world - 1)  # rank 0 assembles
        assert list(assembled(lambda: iter(ROWS), work)) == expected
        found = sorted(work.glob("chunk-*.json"))
        assert len(found) == 8  # windows of 6 rows: 3 + 3, 3 + 3, 3 + 3, 3 + 2
        chunks[world] = [p.read_text("utf-8").split('"seconds"')[0] for p in found]
        assert sorted(n for numbers in seen.values() for n in numbers) == list(range(23))
        assert len(seen) == world  # every rank translated: chunks r, r + world, ...
    assert chunks[1] == chunks[2] == chunks[3]  # the same lines in the same chunks


def test_a_work_directory_of_another_key_is_started_over(tmp_path):
    work, calls = tmp_path / "w", []

    def counting(numbers, rows):
        calls.append(numbers)
        return [f"B{n}" for n in numbers]

    options = {"work": work, "chunk_size": 5}
    assert translate_chunks(lambda: iter(ROWS), 23, translate=upper, key="A", **options)
    assert translate_chunks(lambda: iter(ROWS), 23, translate=counting, key="B", **options)
    assert sum(map(len, calls)) == 23  # nothing of input A's chunks resumed
    assert [t for _, t in assembled(lambda: iter(ROWS), work)] == [f"B{n}" for n in range(23)]
    calls.clear()
    assert translate_chunks(lambda: iter(ROWS), 23, translate=counting, key="B", **options)
    assert calls == []  # the same key: every chunk is there already


def test_a_failed_process_is_named_by_the_one_that_waits(tmp_path):
    def failing(numbers, rows):
        if 5 in numbers:  # row 5 is in chunk 1: rank 1's of 2
            raise OSError("disk full")
        return upper(numbers, rows)

    results = run(tmp_path / "w", 2, failing, wait_s=60)
    assert isinstance(results[1], OSError)
    assert isinstance(results[0], RuntimeError)
    assert str(results[0]) == f"{tmp_path / 'w'}: rank 1 failed: OSError: disk full"


def test_a_wait_that_sees_no_new_chunk_for_wait_s_names_the_ranks_it_waits_for(tmp_path):
    """Rank 1 of 2 never comes (a process that hangs): rank 0 translates its share, then gives
    up ``wait_s`` seconds after the last chunk, naming rank 1."""
    with pytest.raises(TimeoutError) as error:
        translate_chunks(
            lambda: iter(ROWS), len(ROWS), work=tmp_path / "w", translate=upper, chunk_size=3,
            window_chunks=2, rank=0, world=2, wait_s=1.0,
        )  # fmt: skip
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'w'}: no new chunk for 1 s from rank 1: ")
    assert "\n" not in message
    assert len(list((tmp_path / "w").glob("chunk-*.json"))) == 4  # rank 0's: 0, 2, 4, 6

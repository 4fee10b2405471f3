"""attnlab.data.clean: the cleaning filters, their options, the duplicate finder and the
summary line; and each filter's counts through a whole preparation of a hand-made corpus."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from attnlab.data import clean
from attnlab.data.clean import CleaningOptions, SeenHashes
from attnlab.data.prepare import prepare_corpus
from attnlab.data.shardformat import SRC_OFFSETS, load_meta
from attnlab.data.tokenizer import Tokenizer


class WordTokenizer:
    """One id per white-space word (ids from 10), so that token counts are word counts."""

    vocab_size = 1000

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[10 + len(word) for word in text.split()] for text in texts]

    def fingerprint(self) -> str:
        return "words"


def test_defaults_are_fairseqs() -> None:
    options = CleaningOptions()
    assert options.max_tokens == 250 and options.max_ratio == 1.5
    assert options.drop_empty and options.drop_identical and options.drop_duplicates
    assert options.enabled() == clean.REASONS
    assert CleaningOptions.off().enabled() == ()
    assert CleaningOptions.from_dict(options.to_dict()) == options


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_tokens": 0}, "max_tokens: expected a positive int or None, got 0"),
        ({"max_tokens": 2.5}, "max_tokens: expected a positive int or None, got 2.5"),
        ({"max_ratio": 0.9}, "max_ratio: expected a number >= 1 or None, got 0.9"),
        ({"max_ratio": float("inf")}, "max_ratio: expected a number >= 1 or None, got inf"),
        ({"drop_empty": 1}, "drop_empty: expected a bool, got 1"),
        ({"drop_duplicates": "yes"}, "drop_duplicates: expected a bool, got 'yes'"),
    ],
)
def test_options_are_checked(fields: dict, message: str) -> None:
    with pytest.raises(ValueError) as error:
        CleaningOptions(**fields)
    assert str(error.value) == message


def test_unknown_option_names_the_near_one() -> None:
    with pytest.raises(ValueError, match=r"unknown cleaning fields \['max_token'\]; did you mean"):
        CleaningOptions.from_dict({"max_token": 100})


def test_reasons_of_a_chunk() -> None:
    src = ["a b", "", "same", "one two three four", "x", "a b"]
    tgt = ["c d", "y", "same", "eins", "", "c d"]
    codes = clean.text_reasons(src, tgt, CleaningOptions())
    assert codes.tolist() == [0, clean.EMPTY, clean.IDENTICAL, 0, clean.EMPTY, 0]
    lengths = np.array([2, 0, 1, 4, 1, 2]), np.array([2, 1, 1, 1, 0, 2])
    codes = clean.length_reasons(codes, *lengths, CleaningOptions(max_tokens=3))
    # the 4-token side is too long before its ratio (4 / 1) is looked at
    assert codes.tolist() == [0, clean.EMPTY, clean.IDENTICAL, clean.TOO_LONG, clean.EMPTY, 0]
    codes = clean.length_reasons(np.zeros(3, np.uint8), [3, 2, 0], [2, 1, 0], CleaningOptions())
    assert codes.tolist() == [0, clean.RATIO, 0]  # 3/2 = 1.5 passes; 2/1 fails; 0/0 passes
    assert clean.text_reasons(src, tgt, CleaningOptions.off()).tolist() == [0] * 6


def test_pair_hashes_are_stable_and_pair_level() -> None:
    hashes = clean.pair_hashes(["a", "a", "ab"], ["b", "b", ""])
    assert hashes.dtype == np.uint64
    expected = int.from_bytes(hashlib.blake2b(b"a\nb", digest_size=8).digest(), "little")
    assert hashes[0] == hashes[1] == expected
    assert hashes[2] != hashes[0]  # ("ab", "") is not ("a", "b")


def test_seen_hashes_equal_a_set() -> None:
    rng = np.random.default_rng(0)
    seen, reference = SeenHashes(), set()
    for _ in range(60):
        chunk = rng.integers(0, 5000, size=int(rng.integers(0, 300))).astype(np.uint64)
        mask = seen.first_seen(chunk)
        expected = []
        for value in chunk.tolist():
            expected.append(value not in reference)
            reference.add(value)
        assert mask.tolist() == expected
    assert len(seen) == len(reference)
    assert 17 in seen or 17 not in reference
    assert len(seen._runs) <= 2 * int(np.log2(len(reference))) + 2  # merged, not one per chunk


def test_summary_line() -> None:
    dropped = {"empty": 12001, "identical": 0, "too_long": 40123, "ratio": 20000}
    dropped["duplicate"] = 15873
    line = clean.summary(4_500_000, dropped, CleaningOptions())
    assert line == (
        "cleaning: kept 4,412,003 of 4,500,000 pairs; dropped 12,001 empty, 0 identical, "
        "40,123 too long (> 250 tokens), 20,000 ratio > 1.5, 15,873 duplicates"
    )
    options = CleaningOptions(drop_identical=False, max_ratio=None, max_tokens=80)
    line = clean.summary(10, {"empty": 1, "too_long": 2, "duplicate": 1}, options)
    assert line == (
        "cleaning: kept 6 of 10 pairs; dropped 1 empty, 2 too long (> 80 tokens), 1 duplicate"
    )
    assert clean.summary(5, {}, CleaningOptions.off()) == "cleaning: kept 5 of 5 pairs (no filters)"


def _hand_made(tmp_path: Path) -> tuple[Path, Path, list[tuple[str, str]], list[str]]:
    """A corpus with known reasons: each pair and what the default filters (with max_tokens
    6) do with it."""
    rows = [
        ("a small dog", "ein kleiner hund", "kept"),
        ("", "leer", "empty"),
        ("   ", "  ", "empty"),
        ("only source", "", "empty"),
        ("Berlin", "Berlin", "identical"),
        ("one two three four five six seven", "eins zwei drei vier fünf sechs", "too_long"),
        ("a man", "ein mann läuft schnell", "ratio"),  # 4 / 2 > 1.5
        ("two men run", "zwei männer rennen", "kept"),
        ("a small dog", "ein kleiner hund", "duplicate"),
        ("  a small dog ", "ein kleiner hund\t", "duplicate"),  # the same once stripped
        ("a small dog", "ein hund klein", "kept"),  # another target: not a duplicate
        ("Berlin", "Berlin", "identical"),  # identical, never kept: not a duplicate
        ("x y z", "x y", "kept"),  # 3/2 = 1.5: kept
        ("too long " * 4, "zu lang", "too_long"),
        ("a man", "ein mann läuft schnell", "ratio"),
    ]
    src, tgt = tmp_path / "c.src", tmp_path / "c.tgt"
    src.write_text("".join(f"{s}\n" for s, _, _ in rows), encoding="utf-8")
    tgt.write_text("".join(f"{t}\n" for _, t, _ in rows), encoding="utf-8")
    return src, tgt, [(s.strip(), t.strip()) for s, t, _ in rows], [r for _, _, r in rows]


def test_each_filter_counts_on_a_hand_made_corpus(tmp_path: Path) -> None:
    src, tgt, pairs, reasons = _hand_made(tmp_path)
    tok = WordTokenizer()
    options = CleaningOptions(max_tokens=6)
    result = prepare_corpus(src, tgt, tok, tok, tmp_path / "shards", cleaning=options, workers=1)
    expected = {reason: reasons.count(reason) for reason in clean.REASONS}
    assert result.dropped == expected
    assert result.pairs == reasons.count("kept") == 4
    assert result.summary == (
        "cleaning: kept 4 of 15 pairs; dropped 3 empty, 2 identical, 2 too long (> 6 tokens), "
        "2 ratio > 1.5, 2 duplicates"
    )
    meta = load_meta(result.directory)
    assert meta is not None and meta["dropped"] == expected and meta["filters"] == options.to_dict()
    offsets = np.fromfile(result.directory / SRC_OFFSETS, "<i8")
    kept = [s for (s, _), r in zip(pairs, reasons, strict=True) if r == "kept"]
    assert np.diff(offsets).tolist() == [len(s.split()) for s in kept]


def test_filters_off_keep_every_pair(tmp_path: Path) -> None:
    src, tgt, _, _ = _hand_made(tmp_path)
    tok = WordTokenizer()
    result = prepare_corpus(
        src, tgt, tok, tok, tmp_path / "all", cleaning=CleaningOptions.off(), workers=1
    )
    assert result.pairs == 15 and result.dropped == {}
    assert result.summary == "cleaning: kept 15 of 15 pairs (no filters)"


def test_duplicates_across_chunks(tmp_path: Path) -> None:
    """Pairs repeat across chunk boundaries; the duplicate filter counts what a set would."""
    rng = random.Random(3)
    rows = [(f"s{rng.randrange(300)} a", f"t{rng.randrange(3)} b") for _ in range(2000)]
    (tmp_path / "a").write_text("".join(f"{s}\n" for s, _ in rows), encoding="utf-8")
    (tmp_path / "b").write_text("".join(f"{t}\n" for _, t in rows), encoding="utf-8")
    tok = WordTokenizer()
    result = prepare_corpus(
        tmp_path / "a", tmp_path / "b", tok, tok, tmp_path / "s", workers=1, chunk_lines=97
    )
    assert result.pairs == len(set(rows))
    assert result.dropped["duplicate"] == len(rows) - len(set(rows))


def test_ratio_is_in_tokens_of_the_tokenizer(tmp_path: Path) -> None:
    """The length filters count the tokenizer's ids, not words."""
    (tmp_path / "a").write_text("aaaa bbbb\nab\n", encoding="utf-8")
    (tmp_path / "b").write_text("ab cd\nab cd\n", encoding="utf-8")
    tok = Tokenizer.train(["aaaa bbbb", "ab cd"] * 5, 300)
    counts = [len(tok.encode(t)) for t in ("aaaa bbbb", "ab", "ab cd")]
    result = prepare_corpus(tmp_path / "a", tmp_path / "b", tok, tok, tmp_path / "s", workers=1)
    ratio_fails = [
        max(a, b) > 1.5 * min(a, b) for a, b in ((counts[0], counts[2]), (counts[1], counts[2]))
    ]
    assert result.dropped["ratio"] == sum(ratio_fails)

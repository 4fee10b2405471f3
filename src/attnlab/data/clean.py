"""Cleaning filters for a parallel corpus, with the defaults of fairseq's WMT preparation
(Moses' ``clean-corpus-n.perl -ratio 1.5 ... 1 250`` on the subword-encoded text).

Each pair is kept, or dropped for the first of these reasons (in this order, each with its
off switch in :class:`CleaningOptions`):

* ``empty``: either side is empty once surrounding white space is stripped (on text);
* ``identical``: both sides are the same text: an untranslated copy (on text);
* ``too_long``: either side has more than ``max_tokens`` tokens (default 250; on the
  tokenizer's ids, no special tokens counted);
* ``ratio``: the longer side has more than ``max_ratio`` times the tokens of the shorter
  (default 1.5; longer / shorter, on ids: a side with no tokens against one with some counts
  as infinite);
* ``duplicate``: the same (source, target) text as an earlier kept pair (exact, after
  stripping; memory-bounded: 8 bytes per kept pair, see :class:`SeenHashes`).

:func:`pair_hashes`, :func:`text_reasons` and :func:`length_reasons` compute the reasons for
a chunk of pairs (the preparation runs them in worker processes); :class:`SeenHashes` finds the
duplicates across chunks; :func:`summary` writes the one line a run prints::

    cleaning: kept 4,412,003 of 4,500,000 pairs; dropped 12,001 empty, 0 identical,
    40,123 too long (> 250 tokens), 20,000 ratio > 1.5, 15,873 duplicates
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_bool, check_keys, check_optional_int, check_type, is_number

__all__ = [
    "KEPT",
    "REASONS",
    "CleaningOptions",
    "SeenHashes",
    "length_reasons",
    "pair_hashes",
    "summary",
    "text_reasons",
]

#: The reasons a pair is dropped, in the order they are tried; a pair's reason code is its
#: position here plus one (:data:`KEPT`, 0, for a kept pair).
REASONS = ("empty", "identical", "too_long", "ratio", "duplicate")
KEPT = 0
EMPTY, IDENTICAL, TOO_LONG, RATIO, DUPLICATE = range(1, len(REASONS) + 1)


@dataclass(frozen=True)
class CleaningOptions:
    """Which filters run, and their limits (see the module's docstring for each).

    Attributes:
        drop_empty: drop a pair with an empty side.
        drop_identical: drop a pair whose two sides are the same text.
        max_tokens: the most tokens a side may have (after encoding, no special tokens), or
            None for no limit.
        max_ratio: the most tokens the longer side may have per token of the shorter (>= 1),
            or None for no limit.
        drop_duplicates: drop a pair equal to an earlier kept one.

    ``CleaningOptions.off()`` turns every filter off. Values are checked on construction
    (ValueError naming the field).
    """

    drop_empty: bool = True
    drop_identical: bool = True
    max_tokens: int | None = 250
    max_ratio: float | None = 1.5
    drop_duplicates: bool = True

    def __post_init__(self) -> None:
        for name in ("drop_empty", "drop_identical", "drop_duplicates"):
            check_bool(getattr(self, name), name)
        check_optional_int(self.max_tokens, "max_tokens")
        ratio = self.max_ratio
        if ratio is not None:
            if not (is_number(ratio) and math.isfinite(ratio) and ratio >= 1):
                raise ValueError(f"max_ratio: expected a number >= 1 or None, got {ratio!r}")
            object.__setattr__(self, "max_ratio", float(ratio))

    @classmethod
    def off(cls) -> CleaningOptions:
        """Every filter off: every pair is kept."""
        return cls(False, False, None, None, False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CleaningOptions:
        """From a mapping of fields (a job's table); unknown keys are a ValueError with "did
        you mean" for a near miss."""
        check_type(data, Mapping, "cleaning", "a mapping of fields")
        check_keys(data, [f.name for f in dataclasses.fields(cls)], "cleaning")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready; what a shard directory's meta.json keeps)."""
        return dataclasses.asdict(self)

    def enabled(self) -> tuple[str, ...]:
        """The reasons (:data:`REASONS`) whose filter is on, in order."""
        on = {
            "empty": self.drop_empty,
            "identical": self.drop_identical,
            "too_long": self.max_tokens is not None,
            "ratio": self.max_ratio is not None,
            "duplicate": self.drop_duplicates,
        }
        return tuple(reason for reason in REASONS if on[reason])


def pair_hashes(src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
    """An 8-byte BLAKE2b hash of each (source, target) pair's UTF-8 text, as uint64 (the
    same in every process and run)."""
    out = np.empty(len(src), np.uint64)
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        digest = hashlib.blake2b(s.encode("utf-8") + b"\n" + t.encode("utf-8"), digest_size=8)
        out[i] = int.from_bytes(digest.digest(), "little")
    return out


def text_reasons(src: Sequence[str], tgt: Sequence[str], options: CleaningOptions) -> np.ndarray:
    """The text filters' reason code for each pair of (stripped) lines: ``EMPTY``,
    ``IDENTICAL`` or :data:`KEPT` (uint8)."""
    codes = np.zeros(len(src), np.uint8)
    if options.drop_empty or options.drop_identical:
        for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
            if options.drop_empty and (not s or not t):
                codes[i] = EMPTY
            elif options.drop_identical and s == t:
                codes[i] = IDENTICAL
    return codes


def length_reasons(
    codes: np.ndarray, src_lengths: np.ndarray, tgt_lengths: np.ndarray, options: CleaningOptions
) -> np.ndarray:
    """``codes`` with ``TOO_LONG`` and ``RATIO`` set on the pairs still kept whose token
    counts fail those filters (a new array)."""
    codes = codes.copy()
    src_lengths = np.asarray(src_lengths, np.int64)
    tgt_lengths = np.asarray(tgt_lengths, np.int64)
    if options.max_tokens is not None:
        long = (src_lengths > options.max_tokens) | (tgt_lengths > options.max_tokens)
        codes[(codes == KEPT) & long] = TOO_LONG
    if options.max_ratio is not None:
        longer = np.maximum(src_lengths, tgt_lengths)
        shorter = np.minimum(src_lengths, tgt_lengths)
        # longer > ratio * shorter, exact in floats for these sizes; 0 against 0 passes.
        bad = longer > options.max_ratio * shorter
        codes[(codes == KEPT) & bad] = RATIO
    return codes


class SeenHashes:
    """The pair hashes kept so far, in sorted numpy runs (8 bytes per hash; runs merge like a
    log-structured merge tree, so adding n hashes costs O(n log n) in all).

    :meth:`first_seen` takes a chunk's hashes and says which are new (the first of equal
    hashes in the chunk, and not seen in an earlier chunk), and remembers those.
    """

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(run) for run in self._runs)

    def __contains__(self, value: object) -> bool:
        key = np.uint64(value)  # type: ignore[call-overload]
        for run in self._runs:
            i = int(np.searchsorted(run, key))
            if i < len(run) and run[i] == key:
                return True
        return False

    def first_seen(self, hashes: np.ndarray) -> np.ndarray:
        """A bool mask over ``hashes``: True where the hash is new (added now)."""
        hashes = np.asarray(hashes, np.uint64)
        mask = np.zeros(len(hashes), bool)
        if not len(hashes):
            return mask
        unique, first = np.unique(hashes, return_index=True)
        new = np.ones(len(unique), bool)
        for run in self._runs:
            at = np.searchsorted(run, unique)
            inside = at < len(run)
            new[inside] &= run[at[inside]] != unique[inside]
        mask[first[new]] = True
        self._add(unique[new])
        return mask

    def _add(self, run: np.ndarray) -> None:
        if not len(run):
            return
        self._runs.append(run)
        while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            top = self._runs.pop()
            below = self._runs.pop()
            merged = np.concatenate([below, top])
            merged.sort(kind="stable")  # two sorted runs: timsort merges them in linear time
            self._runs.append(merged)


def summary(total: int, dropped: Mapping[str, int], options: CleaningOptions) -> str:
    """The one line a preparation prints: ``cleaning: kept K of N pairs; dropped A empty,
    B identical, C too long (> 250 tokens), D ratio > 1.5, E duplicates`` (the filters that
    are on; ``(no filters)`` when none is)."""
    kept = total - sum(dropped.values())
    head = f"cleaning: kept {kept:,} of {total:,} pairs"
    enabled = options.enabled()
    if not enabled:
        return head + " (no filters)"
    parts = []
    for reason in enabled:
        count = dropped.get(reason, 0)
        if reason == "too_long":
            parts.append(f"{count:,} too long (> {options.max_tokens} tokens)")
        elif reason == "ratio":
            parts.append(f"{count:,} ratio > {options.max_ratio:g}")
        elif reason == "duplicate":
            parts.append(f"{count:,} duplicate{'' if count == 1 else 's'}")
        else:
            parts.append(f"{count:,} {reason}")
    return f"{head}; dropped " + ", ".join(parts)

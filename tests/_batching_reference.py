"""Frozen, readable copies of the batcher, for tests/data/test_batching.py to hold the fast
one to: the greedy packing one example at a time, and TokenBatcher's batches and padding as
it computed them before issue 40 (lists of lists)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pack_reference(src: Sequence[int], tgt: Sequence[int], budget: int) -> list[int]:
    """The greedy packing, one example at a time (what ``attnlab.data.batching._pack`` must
    equal): an example joins the current batch while the budget holds on both sides, else it
    starts the next."""
    bounds = [0]
    longest_src = longest_tgt = 0
    size = 0
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        s, t = max(longest_src, s), max(longest_tgt, t)
        if size and ((size + 1) * s > budget or (size + 1) * t > budget):
            bounds.append(i)  # the batch ends before example i
            s, t, size = src[i], tgt[i], 0
        size += 1
        longest_src, longest_tgt = s, t
    if size:
        bounds.append(len(src))
    return bounds


def reference_global_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    length_noise: float = 1.0,
) -> list[list[int]]:
    """TokenBatcher's batches as it computed them before issue 40 (a frozen copy: int64
    lengths, lexsort on them, packing one example at a time into lists, shuffling the lists)."""
    src, tgt = np.asarray(src_lengths).astype(np.int64), np.asarray(tgt_lengths).astype(np.int64)
    rng = np.random.default_rng((seed, epoch)) if shuffle else None
    longer = np.maximum(src, tgt)
    if rng is None:
        order = np.lexsort((np.arange(len(src)), src, tgt, longer))
    else:
        noisy = np.floor(longer + rng.uniform(0.0, length_noise, len(src)))
        order = np.lexsort((rng.random(len(src)), src, tgt, noisy))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_src = longest_tgt = 0
    for i in order.tolist():
        s, t = max(longest_src, int(src[i])), max(longest_tgt, int(tgt[i]))
        size = len(current) + 1
        if current and (size * s > max_tokens or size * t > max_tokens):
            batches.append(current)
            current, s, t = [], int(src[i]), int(tgt[i])
        current.append(i)
        longest_src, longest_tgt = s, t
    if current:
        batches.append(current)
    if rng is not None:
        batches = [batches[j] for j in rng.permutation(len(batches)).tolist()]
    return batches


def reference_padding(src: np.ndarray, tgt: np.ndarray, batches: list[list[int]]) -> float:
    real = padded = 0
    for batch in batches:
        if batch:
            s, t = src[batch].astype(np.int64), tgt[batch].astype(np.int64)
            real += int(s.sum() + t.sum())
            padded += len(batch) * int(s.max() + t.max())
    return 1.0 - real / padded if padded else 0.0

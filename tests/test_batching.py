"""attnlab.data.batching: framing, the token budget, bucketing, determinism, sharding, collate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data.batching import (
    Example,
    Examples,
    TokenBatcher,
    collate,
    make_examples,
    make_lm_examples,
)


def corpus_lengths(count: int, *, mean_log: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths shaped like a translation corpus: log-normal targets, sources about as long
    (correlated, +-15%)."""
    rng = np.random.default_rng(seed)
    tgt = np.clip(rng.lognormal(mean_log, 0.45, count).astype(np.int64), 1, 200)
    src = np.clip((tgt * rng.normal(1.0, 0.15, count)).astype(np.int64), 1, 200)
    return src, tgt


# -- make_examples / collate ---------------------------------------------------------------------


def test_make_examples_frames_targets_and_drops_long_pairs() -> None:
    pairs = [([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11]), ([4] * 6, [9]), ([4], [9] * 5)]
    examples = make_examples(pairs, max_len=5)
    # Source 6 > 5: dropped; target tensors len(ids) + 1 = 6 > 5: dropped.
    assert examples.dropped == 2 and len(examples) == 2
    assert examples[0] == Example((5, 6, 7), (1, 8, 9, 2))
    assert examples[1] == Example((5,), (1, 8, 9, 10, 11, 2))
    assert examples.src_lengths.tolist() == [3, 1]
    assert examples.tgt_lengths.tolist() == [3, 5]  # len([bos] + ids)
    assert len(make_examples(pairs, max_len=None)) == 4
    custom = make_examples([([3], [4])], max_len=None, bos_id=7, eos_id=8)
    assert custom[0].tgt == (7, 4, 8)
    lm = make_lm_examples([[4, 5], [6] * 9], max_len=8)
    assert lm.dropped == 1 and lm[0] == Example((), (1, 4, 5, 2))


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([([1], [2]), ([1, 2],)], r"pairs\[1\]: expected a \(src_ids, tgt_ids\) pair"),
        ([([1], [2]), ([1, -2], [3])], r"pairs\[1\]\[0\] \(source\): token ids must be >= 0"),
        ([([1.5], [2])], r"pairs\[0\]\[0\] \(source\): expected a flat sequence of int"),
        ([([1], "abc")], r"pairs\[0\]\[1\] \(target\): expected a sequence of token ids"),
    ],
)
def test_make_examples_errors_name_the_pair(pairs: list, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make_examples(pairs, max_len=None)
    with pytest.raises(ValueError, match="max_len: expected a positive int or None"):
        make_examples([], max_len=0)


def test_collate_pads_right_and_shifts_the_target() -> None:
    examples = make_examples([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])], max_len=None)
    src, tgt_in, tgt_out = collate(examples, [1, 0], pad_id=0)
    assert src.tolist() == [[5, 0, 0], [5, 6, 7]]
    assert tgt_in.tolist() == [[1, 8, 9, 10, 11], [1, 8, 9, 0, 0]]  # [bos] + ids
    assert tgt_out.tolist() == [[8, 9, 10, 11, 2], [8, 9, 2, 0, 0]]  # ids + [eos]
    assert src.dtype == tgt_in.dtype == tgt_out.dtype == torch.int64
    lm_src, lm_in, _ = collate(make_lm_examples([[4, 5]], max_len=None), [0], pad_id=0)
    assert lm_src.shape == (1, 0) and lm_in.tolist() == [[1, 4, 5]]
    with pytest.raises(ValueError, match="indices: expected at least one"):
        collate(examples, [], pad_id=0)


# -- the token budget ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 40)), min_size=1, max_size=120),
    extra=st.integers(0, 200),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 50),
    shuffle=st.booleans(),
    noise=st.sampled_from([1.0, 3.0]),
)
def test_budget_holds_on_both_sides_and_each_example_appears_once(
    lengths: list[tuple[int, int]],
    extra: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    noise: float,
) -> None:
    src = np.array([s for s, _ in lengths])
    tgt = np.array([t for _, t in lengths])
    budget = int(max(src.max(), tgt.max())) + extra
    batcher = TokenBatcher(src, tgt, budget, seed=seed, shuffle=shuffle, length_noise=noise)
    batches = batcher.batches(epoch)
    for batch in batches:
        assert batch
        assert len(batch) * src[batch].max() <= budget
        assert len(batch) * tgt[batch].max() <= budget
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))


def test_padding_is_low_for_corpus_like_lengths() -> None:
    """Multi30k-sized (29,000 pairs of ~13 tokens) at budgets of 1k-4k tokens, and a larger
    corpus (200,000 pairs of ~30 tokens) at the paper's 25,000: under 10% padding."""
    cases = [(29_000, 2.5, 1024), (29_000, 2.5, 4096), (200_000, 3.3, 25_000)]
    for count, mean_log, budget in cases:
        src, tgt = corpus_lengths(count, mean_log=mean_log, seed=count)
        batcher = TokenBatcher(src, tgt, budget, seed=1)
        fraction = batcher.padding_fraction(0)
        assert 0 < fraction < 0.10, (count, budget, fraction)
        # The batches are also full: on average within 15% of the budget on the longer side.
        used = [len(b) * max(src[b].max(), tgt[b].max()) for b in batcher.batches(0)]
        assert np.mean(used) > 0.85 * budget


def test_long_examples_are_reported_not_silently_dropped() -> None:
    with pytest.raises(ValueError, match="max_tokens: example 1's target has 50 tokens"):
        TokenBatcher([3, 4, 5], [3, 50, 5], max_tokens=40)
    with pytest.raises(ValueError, match="src_lengths has 2 entries but tgt_lengths has 3"):
        TokenBatcher([3, 4], [3, 4, 5], max_tokens=40)
    with pytest.raises(ValueError, match="rank: expected 0 <= rank < num_replicas=2"):
        TokenBatcher([3], [3], max_tokens=40, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="length_noise: expected a finite number >= 1"):
        TokenBatcher([3], [3], max_tokens=40, length_noise=0.5)


# -- determinism and variety ---------------------------------------------------------------------


def test_batches_are_a_function_of_seed_and_epoch() -> None:
    src, tgt = corpus_lengths(3000, mean_log=2.5, seed=0)
    a = TokenBatcher(src, tgt, 512, seed=7)
    b = TokenBatcher(src, tgt, 512, seed=7)
    assert a.batches(3) == b.batches(3)
    assert a.batches(0) == TokenBatcher(src, tgt, 512, seed=7).batches(0)  # cache-independent
    assert a.batches(3) != a.batches(4)  # epochs differ in order ...
    assert {tuple(x) for x in a.batches(3)} != {tuple(x) for x in a.batches(4)}  # ... and content
    assert a.batches(3) != TokenBatcher(src, tgt, 512, seed=8).batches(3)
    # More noise mixes neighbouring lengths: more variety, a little more padding.
    noisy = TokenBatcher(src, tgt, 512, seed=7, length_noise=2.0)
    assert a.padding_fraction(0) < noisy.padding_fraction(0) < 0.10


def test_without_shuffle_batches_follow_the_length_order() -> None:
    src, tgt = corpus_lengths(500, mean_log=2.5, seed=1)
    batcher = TokenBatcher(src, tgt, 256, shuffle=False, seed=3)
    batches = batcher.batches(0)
    assert batches == batcher.batches(9) == TokenBatcher(src, tgt, 256, shuffle=False).batches(0)
    flat = [i for batch in batches for i in batch]
    keys = [(max(src[i], tgt[i]), tgt[i], src[i]) for i in flat]
    assert keys == sorted(keys)


# -- sharding among replicas ---------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_shares_cover_each_global_batch_exactly(replicas: int) -> None:
    src, tgt = corpus_lengths(2000, mean_log=2.5, seed=2)
    src[::50] = 150  # long pairs: alone in a batch, so some shares are empty
    alone = TokenBatcher(src, tgt, 256, seed=5)
    shards = [
        TokenBatcher(src, tgt, 256, seed=5, num_replicas=replicas, rank=r) for r in range(replicas)
    ]
    for epoch in (0, 1):
        global_batches = alone.batches(epoch)
        per_rank = [shard.batches(epoch) for shard in shards]
        assert all(len(b) == len(global_batches) for b in per_rank)  # lock-step
        assert all(shard.global_batches(epoch) == global_batches for shard in shards)
        for j, batch in enumerate(global_batches):
            shares = [per_rank[r][j] for r in range(replicas)]
            assert [i for share in shares for i in share] == batch  # in order, exactly once
            sizes = [len(share) for share in shares]
            assert max(sizes) - min(sizes) <= 1
        assert any(not share for batches in per_rank for share in batches)


def test_examples_accept_only_framed_examples() -> None:
    with pytest.raises(TypeError, match=r"examples\[0\]: expected an Example"):
        Examples([((1,), (1, 2))])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"examples\[0\]: the target must be framed"):
        Examples([Example((1,), (1,))])
    with pytest.raises(TypeError, match="examples: expected Examples"):
        TokenBatcher.for_examples([Example((1,), (1, 2))], 10)  # type: ignore[arg-type]

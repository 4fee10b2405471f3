"""attnlab.data.batching: the token budget, bucketing, determinism, sharding; the lean epoch
batches against a frozen copy of the list-based batcher; batching a mixture's draw."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _batching_reference import pack_reference, reference_global_batches, reference_padding
from attnlab.data import batching
from attnlab.data.batching import IndexBatches, TokenBatcher, share
from attnlab.data.mixture import Mixture


def corpus_lengths(count: int, *, mean_log: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths shaped like a translation corpus: log-normal targets, sources about as long
    (correlated, +-15%)."""
    rng = np.random.default_rng(seed)
    tgt = np.clip(rng.lognormal(mean_log, 0.45, count).astype(np.int64), 1, 200)
    src = np.clip((tgt * rng.normal(1.0, 0.15, count)).astype(np.int64), 1, 200)
    return src, tgt


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


# -- the lean batcher: the same batches as the list-of-lists one it replaced ---------------------


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 60)), min_size=1, max_size=300),
    extra=st.integers(0, 400),
    seed=st.integers(0, 2**32 - 1),
    epochs=st.lists(st.integers(0, 1000), min_size=1, max_size=3),
    shuffle=st.booleans(),
    noise=st.sampled_from([1.0, 2.0, 7.5]),
    replicas=st.integers(1, 4),
    compact=st.booleans(),
)
def test_lean_batches_equal_the_reference_batches(
    lengths: list[tuple[int, int]],
    extra: int,
    seed: int,
    epochs: list[int],
    shuffle: bool,
    noise: float,
    replicas: int,
    compact: bool,
) -> None:
    """The same batches, in the same order, and the same shares and padding, as the frozen
    reference, for int64 lengths and for the uint16 lengths of shards."""
    src = np.array([s for s, _ in lengths])
    tgt = np.array([t for _, t in lengths])
    budget = int(max(src.max(), tgt.max())) + extra
    given_src, given_tgt = (src.astype(np.uint16), tgt.astype(np.uint16)) if compact else (src, tgt)
    options = {"seed": seed, "shuffle": shuffle, "length_noise": noise}
    batchers = [
        TokenBatcher(given_src, given_tgt, budget, num_replicas=replicas, rank=r, **options)
        for r in range(replicas)
    ]
    for epoch in epochs:
        expected = reference_global_batches(src, tgt, budget, epoch=epoch, **options)
        for rank, batcher in enumerate(batchers):
            assert batcher.global_batches(epoch) == expected
            shares = [share(b, replicas, rank) for b in expected]
            got = batcher.batches(epoch)
            assert got == shares and list(got) == shares and len(got) == len(shares)
            assert batcher.padding_fraction(epoch) == reference_padding(src, tgt, shares)


def test_the_fast_packing_equals_the_readable_one() -> None:
    """batching._pack (numpy windows) and pack_reference (one example at a time) cut
    the same batches, on sorted and unsorted lengths, small and large budgets, with empty
    sources and examples that fill the budget alone."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        count = int(rng.integers(1, 3000))
        src = rng.integers(0 if trial % 3 == 0 else 1, 80, count)
        tgt = rng.integers(1, 80, count)
        if trial % 2:
            order = np.lexsort((src, tgt, np.maximum(src, tgt)))
            src, tgt = src[order], tgt[order]
        budget = int(max(src.max(), tgt.max()) + rng.choice([0, 5, 100, 2000, 30000]))
        expected = pack_reference(src.tolist(), tgt.tolist(), budget)
        assert batching._pack(src, tgt, budget).tolist() == expected


def test_index_batches_are_a_lean_sequence_of_index_lists() -> None:
    src, tgt = corpus_lengths(3000, mean_log=2.5, seed=3)
    batcher = TokenBatcher(src.astype(np.uint16), tgt.astype(np.uint16), 512, seed=4)
    batches = batcher.batches(2)
    assert isinstance(batches, IndexBatches)
    assert batches.order.dtype == np.int32 and batches.starts.dtype == np.int64
    as_lists = [batches[j] for j in range(len(batches))]
    assert all(type(b) is list and all(type(i) is int for i in b) for b in as_lists)
    assert batches[-1] == as_lists[-1] and batches[3:7] == as_lists[3:7]
    assert isinstance(batches[3:7], IndexBatches) and batches[3:7].order is batches.order
    assert batches == as_lists and as_lists == batches and batches != as_lists[:-1]
    assert batches != batcher.batches(3)
    assert np.array_equal(batches.array(5), as_lists[5]) and batches.sizes().sum() == 3000
    with pytest.raises(IndexError):
        batches[len(batches)]
    batches[0].append(-1)  # items are fresh lists: the cached epoch is not changed
    assert -1 not in batcher.batches(2)[0]
    # The lengths of shards stay uint16: not copied into int64.
    compact = src.astype(np.uint16)
    assert TokenBatcher(compact, tgt, 512).src_lengths is compact


def test_an_epoch_of_millions_of_pairs_is_a_few_arrays() -> None:
    """500,000 pairs: an epoch's batches hold ~4 bytes per pair (the order, int32) plus 16 per
    batch, and the batcher keeps the uint16 lengths given, uncopied."""
    rng = np.random.default_rng(0)
    src = rng.integers(20, 41, 500_000).astype(np.uint16)
    tgt = rng.integers(20, 41, 500_000).astype(np.uint16)
    batcher = TokenBatcher(src, tgt, 25_000, seed=1)
    batches = batcher.batches(0)
    held = batches.order.nbytes + batches.starts.nbytes + batches.stops.nbytes
    assert batches.order.nbytes == 4 * 500_000 and held < 4.1 * 500_000
    assert batcher.src_lengths is src and batcher.tgt_lengths is tgt
    expected = reference_global_batches(src, tgt, 25_000, shuffle=True, seed=1, epoch=0)
    assert batches == expected


def test_a_subclass_may_draw_the_examples_of_each_epoch() -> None:
    """The epoch_indices hook: batches over the drawn examples only (repeats allowed), as the
    reference batches those examples' lengths; without a draw (None), today's batches."""
    src, tgt = corpus_lengths(1000, mean_log=2.5, seed=5)

    class Halves(TokenBatcher):
        def epoch_indices(self, epoch: int) -> np.ndarray | None:
            if epoch == 0:
                return None
            half = np.arange(epoch % 2, len(self), 2)
            return np.concatenate([half, half[:10]])  # the first ten twice

    batcher = Halves(src, tgt, 256, seed=2)
    assert batcher.batches(0) == TokenBatcher(src, tgt, 256, seed=2).batches(0)
    drawn = Halves(src, tgt, 256, seed=2).epoch_indices(3)
    assert drawn is not None
    expected = reference_global_batches(src[drawn], tgt[drawn], 256, shuffle=True, seed=2, epoch=3)
    assert batcher.batches(3) == [[int(drawn[i]) for i in b] for b in expected]
    flat = sorted(i for b in batcher.batches(3) for i in b)
    assert flat == sorted(drawn.tolist())
    # Evaluation (shuffle=False) uses every example once, whatever the hook.
    unshuffled = Halves(src, tgt, 256, shuffle=False)
    assert sorted(i for b in unshuffled.batches(5) for i in b) == list(range(1000))


# -- mixing corpora ------------------------------------------------------------------------------


def test_a_mixed_batcher_packs_each_epochs_draw() -> None:
    src, tgt = corpus_lengths(1500, mean_log=2.5, seed=6)
    mixture = Mixture([500, 1000], temperature=3.0)
    batcher = TokenBatcher(src, tgt, 256, seed=9, mixture=mixture)
    for epoch in (0, 4):
        drawn = mixture.epoch_indices(9, epoch)
        expected = reference_global_batches(
            src[drawn], tgt[drawn], 256, shuffle=True, seed=9, epoch=epoch
        )
        assert batcher.batches(epoch) == [[int(drawn[i]) for i in b] for b in expected]
    assert batcher.batches(0) != batcher.batches(1)
    # Validation batches ignore the mixture: every example once.
    plain = TokenBatcher(src, tgt, 256, shuffle=False, mixture=mixture)
    assert plain.batches(0) == TokenBatcher(src, tgt, 256, shuffle=False).batches(0)
    with pytest.raises(ValueError, match="mixture: its corpora hold 1500 examples, but there"):
        TokenBatcher(src[:10], tgt[:10], 256, mixture=mixture)

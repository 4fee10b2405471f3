"""attnlab.data.mixture: an epoch's counts by weights and by temperature, the seeded draw, and
each corpus's share of a batched epoch."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.data.batching import TokenBatcher
from attnlab.data.mixture import Mixture


def test_mixture_counts_by_weights_and_by_temperature() -> None:
    """An epoch ends when the corpus of largest share per example has been seen once."""
    by_weights = Mixture([1000, 3000], weights=[1, 1])  # the 1,000 once, as many of the 3,000
    assert by_weights.counts.tolist() == [1000, 1000] and by_weights.epoch_size == 2000
    upweighted = Mixture([1000, 3000], weights=[1, 9])  # the 3,000 once, 333 of the 1,000
    assert upweighted.counts.tolist() == [333, 3000] and upweighted.epoch_size == 3333
    proportional = Mixture([1000, 3000])  # T = 1: every example once
    assert proportional.counts.tolist() == [1000, 3000]
    assert Mixture([1000, 3000], weights=[1, 3]).counts.tolist() == [1000, 3000]
    hot = Mixture([100, 10_000], temperature=2.0)  # p ~ n ** 0.5: 10 : 100
    assert hot.probabilities.tolist() == pytest.approx([10 / 110, 100 / 110])
    assert hot.counts.tolist() == [100, 1000] and hot.epoch_size == 1100
    assert Mixture([5, 5, 5], weights=[1, 1, 1], epoch_size=10).counts.tolist() == [4, 3, 3]
    assert Mixture([7, 0], weights=[1, 0]).counts.tolist() == [7, 0]
    assert Mixture([7, 5], weights=[1, 0]).counts.tolist() == [7, 0]
    for bad, message in [
        ({"sizes": []}, "sizes: expected at least one corpus"),
        ({"sizes": [3, 4], "weights": [1]}, "weights: expected 2 finite numbers >= 0"),
        ({"sizes": [3, 4], "weights": [0, 0]}, "every corpus has weight 0"),
        ({"sizes": [3, 0], "weights": [1, 1]}, r"sizes\[1\]: the corpus is empty"),
        ({"sizes": [3, 4], "temperature": 0}, "temperature: expected a number > 0"),
        ({"sizes": [3, 4], "weights": [1, 1], "temperature": 2.0}, "give one of them"),
        ({"sizes": [3, 4], "keys": ["a"]}, "keys: expected 2 keys"),
    ]:
        with pytest.raises(ValueError, match=message):
            Mixture(**bad)  # type: ignore[arg-type]


def test_mixture_draws_without_replacement_then_whole_copies() -> None:
    """A corpus drawn down gives distinct examples; one drawn up, whole copies and a distinct
    remainder; both a function of (seed, epoch) and different between epochs."""
    mixture = Mixture([50, 1000], weights=[1, 1], epoch_size=260)  # 130 of each
    drawn = mixture.epoch_indices(seed=3, epoch=0)
    assert drawn.dtype == np.int32 and len(drawn) == 260
    small, large = drawn[drawn < 50], drawn[drawn >= 50]
    assert len(small) == len(large) == 130
    counts = np.bincount(small, minlength=50)
    assert set(counts.tolist()) == {2, 3} and (counts == 3).sum() == 30  # 2 copies + 30
    assert len(np.unique(large)) == 130 and large.min() >= 50 and large.max() < 1050
    assert np.array_equal(drawn, mixture.epoch_indices(seed=3, epoch=0))
    assert not np.array_equal(drawn, mixture.epoch_indices(seed=3, epoch=1))
    assert not np.array_equal(drawn, mixture.epoch_indices(seed=4, epoch=0))
    assert mixture.to_dict()["counts"] == [130, 130]


@pytest.mark.parametrize(
    ("sizes", "weights", "temperature"),
    [
        ([40_000, 4_500, 900], [0.1, 1.0, 0.5], None),  # the large corpus, lightly weighted
        ([3_000, 50_000], [5.0, 1.0], None),
        ([2_000, 30_000, 7_000], None, 5.0),
        ([12_345, 6_789], [1.0, 1.0], None),
    ],
)
def test_an_epochs_draw_has_the_documented_shares(sizes, weights, temperature) -> None:
    """Each corpus's part of an epoch's draw (and of its batches) is its share ``p_k`` within
    1%; the corpus of largest ``p_k / size_k`` is seen exactly once, the others at most
    once, none of them twice; so in every epoch."""
    mixture = Mixture(sizes, weights=weights, temperature=temperature)
    share = np.asarray(weights if weights is not None else np.power(sizes, 1 / temperature))
    share = share / share.sum()
    fastest = int(np.argmax(share / np.asarray(sizes)))
    lengths = np.random.default_rng(0).integers(1, 40, sum(sizes))
    batcher = TokenBatcher(lengths, lengths, 2048, seed=1, mixture=mixture)
    starts = np.cumsum([0, *sizes])
    for epoch in (0, 1, 7):
        drawn = np.concatenate(list(batcher.batches(epoch)))
        assert len(drawn) == mixture.epoch_size and len(np.unique(drawn)) == len(drawn)
        corpus = np.searchsorted(starts, drawn, side="right") - 1
        counts = np.bincount(corpus, minlength=len(sizes))
        assert counts / len(drawn) == pytest.approx(share, abs=0.01)
        assert np.all(np.abs(counts / len(drawn) / share - 1) < 0.01)
        assert counts[fastest] == sizes[fastest] and np.all(counts <= sizes)
    assert abs(mixture.epoch_size - sizes[fastest] / share[fastest]) <= len(sizes)

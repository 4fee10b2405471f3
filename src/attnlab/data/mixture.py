"""Several corpora as one: :class:`Mixture` draws each training epoch anew from each corpus,
by weights or by temperature (an epoch ends when the corpus drawn fastest for its size has been
seen once); :class:`~attnlab.data.batching.TokenBatcher` then buckets and packs the draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Mixture"]


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (numpy's ints too), else a ValueError naming it."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name}: expected a {kind} int, got {value!r}")
    return int(value)


def index_dtype(count: int) -> type[np.signedinteger[Any]]:
    """The index dtype for ``count`` examples: int32 when it can hold every index."""
    return np.int32 if count <= np.iinfo(np.int32).max else np.int64


class Mixture:
    """Several corpora concatenated into one index space, mixed anew in each epoch.

    Corpus ``k`` holds the indices ``starts[k] .. starts[k] + sizes[k] - 1`` (``starts`` the
    running sums of ``sizes``). Its share of an epoch is ``p_k = weights[k] / sum(weights)``
    or, by temperature, ``p_k ∝ sizes[k] ** (1 / T)`` (``T = 1``: in proportion to the
    sizes; larger ``T``: more even, favouring the small corpora).

    An epoch (as fairseq's sampling weights have it) ends when the corpus drawn fastest for
    its size, the one of largest ``p_k / sizes[k]`` (the first of equals), has been seen
    once: it gives all its ``sizes[k]`` examples, and every other corpus ``j`` gives
    ``counts[j] = round(sizes[k] * p_j / p_k)``, at most its size; ``epoch_size`` is their
    sum. No example appears twice in an epoch, each corpus's share of it is ``p_j`` (to the
    rounding of one example), and a corpus drawn down is a fresh seeded sample each epoch
    (over many epochs, each of its pairs is seen at the same rate). ``T = 1`` (no weights,
    no temperature): every example once. Given ``epoch_size`` instead, ``counts[k]`` is
    ``epoch_size * p_k`` rounded by largest remainder, and a corpus drawn up to more than its
    size is taken whole as many times as ``counts[k] // sizes[k]``, plus a sample of the rest.
    The draw is a function of ``(seed, epoch)`` (:meth:`epoch_indices`), so that a resumed
    run draws the same.

    Example::

        mixture = Mixture([4_500_000, 40_000_000], temperature=5.0)
        batcher = TokenBatcher(src_lengths, tgt_lengths, 25_000, mixture=mixture)

    Args:
        sizes: the examples of each corpus (> 0 for a corpus drawn from).
        weights: each corpus's share of an epoch (non-negative, not all 0); or
        temperature: ``T > 0``; neither: ``T = 1``.
        epoch_size: the examples of an epoch (default: until the corpus of largest
            ``p_k / sizes[k]`` has been seen once, above).
        keys: a fingerprint per corpus (e.g. its shards' key), kept in :meth:`to_dict` so that
            a checkpoint's data fingerprint changes with the corpora.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        weights: Sequence[float] | None = None,
        temperature: float | None = None,
        epoch_size: int | None = None,
        keys: Sequence[str] | None = None,
    ) -> None:
        self.sizes = [check_int(n, f"sizes[{k}]", 0) for k, n in enumerate(sizes)]
        if not self.sizes:
            raise ValueError("sizes: expected at least one corpus, got none")
        if weights is not None and temperature is not None:
            raise ValueError("weights, temperature: give one of them, not both")
        sizes_f = np.array(self.sizes, dtype=np.float64)
        if weights is not None:
            if len(weights) != len(self.sizes) or not all(
                isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < float("inf")
                for w in weights
            ):
                raise ValueError(
                    f"weights: expected {len(self.sizes)} finite numbers >= 0, got {weights!r:.80}"
                )
            share = np.array(weights, dtype=np.float64)
        else:
            if temperature is None:
                temperature = 1.0
            if not (
                isinstance(temperature, (int, float))
                and not isinstance(temperature, bool)
                and 0 < temperature < float("inf")
            ):
                raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
            share = sizes_f ** (1.0 / float(temperature))
        if share.sum() <= 0:
            raise ValueError("weights: every corpus has weight 0 (or is empty); nothing to draw")
        self.weights = [float(w) for w in weights] if weights is not None else None
        self.temperature = float(temperature) if temperature is not None else None
        self.probabilities: np.ndarray = share / share.sum()
        for k, (n, p) in enumerate(zip(self.sizes, self.probabilities.tolist(), strict=True)):
            if n == 0 and p > 0:
                raise ValueError(f"sizes[{k}]: the corpus is empty but has weight {p:.3g}")
        self.total = int(sizes_f.sum())
        if epoch_size is None:
            self.counts = _one_pass(self.probabilities, sizes_f)
            self.epoch_size = int(self.counts.sum())
        else:
            self.epoch_size = check_int(epoch_size, "epoch_size", 1)
            self.counts = _largest_remainder(self.probabilities, self.epoch_size)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        if keys is not None and len(keys) != len(self.sizes):
            raise ValueError(f"keys: expected {len(self.sizes)} keys, got {len(keys)}")
        self.keys = [str(key) for key in keys] if keys is not None else None

    def epoch_indices(self, seed: int, epoch: int) -> np.ndarray:
        """The indices of epoch ``epoch``'s examples, corpus by corpus (each corpus's in
        increasing order), int32 (int64 past 2**31 examples); ``epoch_size`` of them."""
        rng = np.random.default_rng((seed, epoch, _MIXTURE_STREAM))
        dtype = index_dtype(self.total)
        parts = []
        for start, n, count in zip(
            self.starts.tolist(), self.sizes, self.counts.tolist(), strict=False
        ):
            copies, rest = divmod(count, n) if n else (0, 0)
            corpus = np.arange(start, start + n, dtype=dtype)
            parts.extend([corpus] * copies)
            if rest:
                sample = rng.choice(n, rest, replace=False, shuffle=False)
                parts.append(np.sort(sample).astype(dtype) + dtype(start))
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def to_dict(self) -> dict[str, Any]:
        """What the draw depends on (JSON): sizes, weights or temperature, epoch size, counts,
        keys. A run resumed with another mixture is refused (it is in the data fingerprint)."""
        return {
            "sizes": self.sizes,
            "weights": self.weights,
            "temperature": self.temperature,
            "epoch_size": self.epoch_size,
            "counts": self.counts.tolist(),
            "keys": self.keys,
        }

    def __repr__(self) -> str:
        how = f"weights={self.weights}" if self.weights is not None else f"T={self.temperature}"
        return f"Mixture(sizes={self.sizes}, {how}, counts={self.counts.tolist()})"


_MIXTURE_STREAM = 0x6D6978  # "mix": the mixture's random stream, apart from the batcher's


def _one_pass(probabilities: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each corpus's examples in an epoch that ends when the corpus of largest
    ``probability / size`` has been seen once (:class:`Mixture`): that corpus's size, and
    ``size_k * p_j / p_k`` rounded (at most its size) for every other ``j``."""
    rates = np.divide(probabilities, sizes, out=np.zeros_like(probabilities), where=sizes > 0)
    fastest = int(np.argmax(rates))
    exact = sizes[fastest] * probabilities / probabilities[fastest]
    counts = np.minimum(np.floor(exact + 0.5), sizes).astype(np.int64)
    counts[fastest] = int(sizes[fastest])
    return counts


def _largest_remainder(probabilities: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``probabilities`` adding up to ``total`` (the largest
    fractional parts rounded up; ties to the lower index)."""
    exact = probabilities * total
    counts = np.floor(exact).astype(np.int64)
    missing = total - int(counts.sum())
    if missing > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:missing]] += 1
    return counts

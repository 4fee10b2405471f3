"""The tokenizers of a large corpus, trained on a bounded, seeded sample of its lines (several
corpora: in the shares of their mixture), and kept in the shard cache by the files' digests
and the options: :func:`train_tokenizer_on_sample`, :func:`cached_tokenizers`.

The sample is read in a stream (:func:`attnlab.data.textfiles.reservoir_sample`): memory is
bounded by the sample's indices (8 bytes a line) and the trainer's word counts, whatever the
corpus size.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._checks import check_int
from .._io import atomic_write_dir
from .progress import wait_until
from .shardformat import VERSION, cache_root
from .textfiles import check_parallel, count_lines, iter_lines, reservoir_sample

__all__ = [
    "DEFAULT_SAMPLE_SIZE",
    "cached_tokenizers",
    "sample_counts",
    "train_tokenizer_on_sample",
]

PathLike = str | os.PathLike
#: The tokenizer's training sample, in lines of each file (``[tokenizer] sample_size``).
DEFAULT_SAMPLE_SIZE = 1_000_000


def _stream(paths: Sequence[PathLike]) -> Iterator[str]:
    """The lines of ``paths``, one file after the other."""
    for path in paths:
        yield from iter_lines(path)


def _selected_lines(indices: np.ndarray, *sides: Sequence[PathLike]) -> Iterator[str]:
    """The stripped, non-empty lines at ``indices`` (sorted) of each side (its files read as
    one stream), the sides read side by side: line i of the first, then of the second, ..."""
    if not len(indices):
        return
    position = 0
    wanted = int(indices[0])
    for number, lines in enumerate(zip(*(_stream(s) for s in sides), strict=True)):
        if number != wanted:
            continue
        for line in lines:
            line = line.strip()
            if line:
                yield line
        position += 1
        if position == len(indices):
            return
        wanted = int(indices[position])


def train_tokenizer_on_sample(
    src_path: PathLike | Sequence[PathLike],
    tgt_path: PathLike | Sequence[PathLike] | None,
    vocab_size: int,
    *,
    joint: bool = True,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    min_frequency: int = 2,
    name: str = "train",
    weights: Sequence[float] | None = None,
    temperature: float | None = None,
) -> tuple[Any, Any]:
    """Train the BPE :class:`~attnlab.data.tokenizer.Tokenizer` on a seeded sample of
    ``sample_size`` lines of each file (every line when there are no more), read in a stream
    (the memory it takes: the module's docstring). Lines are stripped, empty ones skipped.

    Several corpora with ``weights`` or ``temperature`` (their mixture): the sample follows
    the mixture, as an epoch draws (:class:`~attnlab.data.mixture.Mixture`, on the files'
    line counts): each corpus gives its share of ``min(sample_size, an epoch)`` lines, a
    seeded sample of its own. Without either (``src_path`` and ``tgt_path`` lists), the
    corpora are sampled as one stream, corpus after corpus.

    ``tgt_path`` None: one text file (a language model), one tokenizer. ``joint``: one
    tokenizer over both sides (each sampled pair's source, then its target, as the job
    trains on a corpus in memory), returned twice; else one per side, on the same lines.

    Returns:
        ``(src_tokenizer, tgt_tokenizer)`` (the same object when joint or one file).

    Raises:
        ValueError: the files fail :func:`~attnlab.data.textfiles.check_parallel` (``name``
            starts the message), or bad arguments.
    """
    from .tokenizer import Tokenizer

    check_int(sample_size, "sample_size")
    check_int(seed, "seed", minimum=0)
    srcs = [src_path] if isinstance(src_path, (str, os.PathLike)) else list(src_path)
    tgts = [tgt_path] if isinstance(tgt_path, (str, os.PathLike)) else list(tgt_path or [])
    if tgt_path is not None:
        if len(srcs) != len(tgts):
            raise ValueError(f"{name}: {len(srcs)} source files but {len(tgts)} target files")
        for src, tgt in zip(srcs, tgts, strict=True):
            check_parallel(src, tgt, name, utf8=False)
    counts = sample_counts(srcs, sample_size, weights=weights, temperature=temperature)
    if counts is None:  # one stream
        picks = [(reservoir_sample(*srcs, k=sample_size, seed=seed), srcs, tgts)]
    else:
        picks = [
            (reservoir_sample(src, k=count, seed=_corpus_seed(seed, i)), [src], tgts[i : i + 1])
            for i, (src, count) in enumerate(zip(srcs, counts, strict=True))
            if count > 0
        ]

    def lines(*sides: str) -> Iterator[str]:
        for indices, src_files, tgt_files in picks:
            assert isinstance(indices, np.ndarray)
            files = {"src": src_files, "tgt": tgt_files}
            yield from _selected_lines(indices, *(files[side] for side in sides))

    kwargs = {"min_frequency": min_frequency}
    if tgt_path is None:
        tokenizer = Tokenizer.train(lines("src"), vocab_size, **kwargs)
        return tokenizer, tokenizer
    if joint:
        tokenizer = Tokenizer.train(lines("src", "tgt"), vocab_size, **kwargs)
        return tokenizer, tokenizer
    src = Tokenizer.train(lines("src"), vocab_size, **kwargs)
    tgt = Tokenizer.train(lines("tgt"), vocab_size, **kwargs)
    return src, tgt


def sample_counts(
    paths: Sequence[PathLike],
    sample_size: int,
    *,
    weights: Sequence[float] | None = None,
    temperature: float | None = None,
) -> list[int] | None:
    """How many lines of each corpus (``paths``, one file a corpus) the tokenizers' sample
    takes when it follows their mixture: the counts of an epoch of
    :class:`~attnlab.data.mixture.Mixture` over the files' line counts, scaled down to
    ``sample_size`` lines when an epoch holds more. None: one corpus, or neither ``weights``
    nor ``temperature`` (the sample is then one stream)."""
    from .mixture import Mixture

    if len(paths) < 2 or (weights is None and temperature is None):
        return None
    sizes = [count_lines(path) for path in paths]
    mixture = Mixture(sizes, weights=weights, temperature=temperature)
    scale = min(1.0, sample_size / mixture.epoch_size)
    counts = mixture.counts.tolist()
    return [min(n, int(c * scale + 0.5)) for n, c in zip(sizes, counts, strict=True)]


def _corpus_seed(seed: int, corpus: int) -> int:
    """A seed for corpus ``corpus``'s sample, apart from the others'."""
    return int(np.random.SeedSequence([seed, corpus]).generate_state(1)[0])


def cached_tokenizers(
    src_paths: Sequence[PathLike],
    tgt_paths: Sequence[PathLike],
    vocab_size: int,
    *,
    joint: bool = True,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    min_frequency: int = 2,
    name: str = "train",
    cache_dir: PathLike | None = None,
    weights: Sequence[float] | None = None,
    temperature: float | None = None,
    wait: Callable[[str], object] | None = None,
) -> tuple[Any, Any, bool]:
    """:func:`train_tokenizer_on_sample`'s tokenizers, kept under ``cache_dir`` (default
    :func:`~attnlab.data.shardformat.default_cache_dir`) in ``tokenizers/KEY``, KEY the files'
    digests and the options: a second run on the same files finds them there instead of
    training again. Returns ``(src, tgt, cached)``. The directory is written aside and renamed
    into place (:func:`attnlab._io.atomic_write_dir`). ``wait``: train nothing, but wait for
    another process to put them there, as :func:`~attnlab.data.prepare.cached_corpus` waits."""
    from .tokenizer import load_tokenizers, save_tokenizers

    root = cache_root(cache_dir)
    infos = [
        info.to_dict()
        for src, tgt in zip(src_paths, tgt_paths, strict=True)
        for info in check_parallel(src, tgt, name, utf8=False, cache_dir=root)
    ]
    for info in infos:
        info.pop("path")  # the same bytes elsewhere are the same corpus
    options = {
        "vocab_size": vocab_size, "joint": joint, "sample_size": sample_size, "seed": seed,
        "min_frequency": min_frequency, "version": VERSION,
    }  # fmt: skip
    if len(src_paths) > 1 and (weights is not None or temperature is not None):
        # The sample follows the mixture (older caches sampled the corpora as one stream).
        options["mixing"] = {"weights": weights, "temperature": temperature}
    text = json.dumps({"inputs": infos, "options": options}, sort_keys=True)
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    root = root / "tokenizers"
    directory = root / key
    if not directory.is_dir() and wait is not None:
        where = f"the tokenizers in {directory}"
        wait_until(lambda: True if directory.is_dir() else None, where, wait)
    if directory.is_dir():
        src, tgt = load_tokenizers(directory)
        return src, tgt, True
    src, tgt = train_tokenizer_on_sample(
        list(src_paths),
        list(tgt_paths),
        vocab_size,
        joint=joint,
        sample_size=sample_size,
        seed=seed,
        min_frequency=min_frequency,
        name=name,
        weights=weights,
        temperature=temperature,
    )
    if not directory.is_dir():  # unless another process was quicker
        atomic_write_dir(
            directory, lambda out: save_tokenizers(out, src, None if tgt is src else tgt)
        )
    return src, tgt, False

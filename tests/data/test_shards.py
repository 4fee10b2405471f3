"""attnlab.data.shards: memory-mapped token shards as training examples (issue 40).

* TokenShards: opening, reading, the lengths, the errors, pickling as a path.
* ShardExamples: the same examples, lengths, dropped count and collated tensors as
  make_examples / make_lm_examples and collate over the same pairs; several corpora as one
  index space, mixed; the objective's checks and fingerprint without a loop over examples.
* A DataLoader with 2 workers gives the batches of no workers, the corpus not copied.
* Training: the Trainer on shards = the Trainer on the same examples in memory, bit for bit
  (a Transformer, and a TransformerLM on the targets);
  (slow) a run SIGKILLed mid-epoch and resumed = the uninterrupted run; a resume with other
  corpora or mixture weights is refused; (slow) 2 processes under torchrun share each batch.
"""

from __future__ import annotations

import csv
import hashlib
import json
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import _shard_worker as shard_worker
import _train_worker as worker
from _shards import random_pairs, write_shards
from attnlab.data import shards as shards_module
from attnlab.data.batching import TokenBatcher
from attnlab.data.examples import (
    Examples,
    ExamplesProtocol,
    collate,
    make_examples,
    make_lm_examples,
)
from attnlab.data.shardformat import load_meta
from attnlab.data.shards import ShardExamples, TokenShards, batch_loader
from attnlab.models.transformer import Transformer, TransformerConfig, TransformerLM
from attnlab.train import TrainConfig, Trainer, find_checkpoints
from attnlab.train.objectives.language_model import LanguageModelObjective
from attnlab.train.objectives.translation import TranslationObjective

WORKER = Path(__file__).parents[1] / "_shard_worker.py"


@pytest.fixture
def corpora(tmp_path: Path) -> tuple[list[tuple[list[int], list[int]]], Path, Path]:
    """Two corpora (uint16 and uint32 ids) of 300 and 200 pairs of 1..20 ids (sources 0..20 in
    the second), and their pairs concatenated."""
    first = random_pairs(300, seed=0, longest=20)
    second = random_pairs(200, seed=1, longest=20, empty_sources=True)
    a = write_shards(tmp_path / "a", first)
    b = write_shards(tmp_path / "b", second, dtype="uint32")
    return first + second, a, b


# -- TokenShards ---------------------------------------------------------------------------------


def test_token_shards_map_the_files_and_read_lengths(tmp_path: Path) -> None:
    pairs = [([5, 6, 7], [8, 9]), ([4], [10, 11, 12, 13]), ([], [4])]
    shards = TokenShards(write_shards(tmp_path / "s", pairs, key="k1"))
    assert len(shards) == shards.pairs == 3 and shards.key == "k1"
    assert shards.src(0).tolist() == [5, 6, 7] and shards.tgt(1).tolist() == [10, 11, 12, 13]
    assert shards.src(-1).tolist() == [] and shards.tgt(-1).tolist() == [4]
    assert isinstance(shards.src_ids, np.memmap) and isinstance(shards.tgt_offsets, np.memmap)
    assert shards.src_lengths.tolist() == [3, 1, 0] and shards.tgt_lengths.tolist() == [2, 4, 1]
    assert shards.src_lengths.dtype == np.uint16
    assert (shards.src_max_id, shards.tgt_max_id) == (7, 13)
    with pytest.raises(IndexError, match="pair 3 out of range"):
        shards.src(3)
    wide = TokenShards(write_shards(tmp_path / "w", [([70_000], [1, 2])], dtype="uint32"))
    assert wide.dtype == np.dtype("<u4") and wide.src(0).tolist() == [70_000]
    empty = TokenShards(write_shards(tmp_path / "e", []))
    assert len(empty) == 0 and empty.src_lengths.tolist() == []


def test_token_shards_errors_say_what_is_wrong(tmp_path: Path) -> None:
    pairs = random_pairs(10, seed=2)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        TokenShards(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        TokenShards(tmp_path / "file")
    (tmp_path / "partial").mkdir()
    with pytest.raises(FileNotFoundError, match=r"not prepared \(no meta.json\): an interrupted"):
        TokenShards(tmp_path / "partial")

    def broken(name: str, **meta: object) -> Path:
        directory = write_shards(tmp_path / name, pairs)
        written = json.loads((directory / "meta.json").read_text())
        (directory / "meta.json").write_text(json.dumps({**written, **meta}))
        return directory

    cases = [
        (broken("format", format="other"), "format 'other', expected 'attnlab-shards'"),
        (broken("version", version=2), "version 2; this attnlab reads version 1"),
        (broken("dtype", dtype="int8"), "dtype 'int8', expected one of"),
        (broken("pairs", pairs=11), r"src.offsets: 88 bytes, expected 12 x 8 = 96"),
        (broken("tokens", src_tokens=1), r"src.ids: \d+ bytes, expected 1 x 2 = 2"),
        (broken("key", key=""), "key: expected the preparation's fingerprint"),
    ]
    for directory, message in cases:
        with pytest.raises(ValueError, match=message):
            TokenShards(directory)
        if "bytes" not in message:  # the meta itself: the writer reads it with the same checks
            with pytest.raises(ValueError, match=message):
                load_meta(directory)
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "meta.json").write_text("{")
    with pytest.raises(ValueError, match=r"not a shard directory's meta\.json"):
        TokenShards(tmp_path / "json")
    # Offsets that do not end at the ids' count; offsets that decrease.
    directory = write_shards(tmp_path / "ends", pairs)
    offsets = np.fromfile(directory / "tgt.offsets", "<i8")
    offsets[-1] -= 1
    offsets.tofile(directory / "tgt.offsets")
    with pytest.raises(ValueError, match=r"tgt.offsets: runs from 0 to \d+, expected 0 to"):
        TokenShards(directory)
    directory = write_shards(tmp_path / "order", pairs)
    offsets = np.fromfile(directory / "src.offsets", "<i8")
    offsets[3] = offsets[5]
    offsets.tofile(directory / "src.offsets")
    with pytest.raises(ValueError, match="the offsets decrease at pair 3"):
        TokenShards(directory).src_lengths  # noqa: B018
    (directory / "tgt.ids").unlink()
    with pytest.raises(FileNotFoundError, match=r"tgt.ids: missing, though meta.json is there"):
        TokenShards(directory)


def test_rows_are_read_from_block_offsets_across_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TokenShards.rows finds each pair from every 64th offset (kept while the lengths are
    read, chunk by chunk) and the lengths: the ids the memory maps hold, for corpora of a
    multiple of 64 pairs and not, read in chunks of 128 offsets."""
    monkeypatch.setattr(shards_module, "_CHUNK", 128)
    rng = np.random.default_rng(7)
    for count in (1, 63, 64, 65, 128, 129, 1000):
        pairs_of = random_pairs(count, seed=count, longest=9)
        shards = TokenShards(write_shards(tmp_path / f"c{count}", pairs_of))
        for side in ("src", "tgt"):
            pairs = rng.integers(0, count, 300)
            ids, lengths = shards.rows(side, pairs)
            offsets, mapped = getattr(shards, f"{side}_offsets"), getattr(shards, f"{side}_ids")
            assert np.array_equal(lengths, offsets[pairs + 1] - offsets[pairs])
            expected = [mapped[offsets[p] : offsets[p + 1]] for p in pairs.tolist()]
            assert np.array_equal(ids, np.concatenate(expected))


def mapped_kib(path: Path) -> int | None:
    """The resident KiB of this process's mappings of ``path`` (None without /proc)."""
    smaps = Path("/proc/self/smaps")
    if not smaps.exists():
        return None
    total, current = 0, False
    for line in smaps.read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            current = len(parts) > 5 and parts[5] == str(path)
        elif current and parts[:1] == ["Rss:"]:
            total += int(parts[1])
    return total


def test_collating_leaves_the_mapped_ids_unread(tmp_path: Path) -> None:
    """Collating every example reads the ids through the page cache, not the memory maps:
    none of the ids' pages become resident in this process."""
    directory = write_shards(tmp_path / "s", random_pairs(20_000, seed=8, longest=40))
    examples = ShardExamples(directory, max_len=None)
    batcher = TokenBatcher.for_examples(examples, 2000, seed=0)
    for batch in batcher.batches(0):
        examples.collate(batch, 0)
    for side in ("src", "tgt"):
        resident = mapped_kib((directory / f"{side}.ids").resolve())
        if resident is None:
            pytest.skip("no /proc/self/smaps here")
        assert resident == 0, side


def test_token_shards_pickle_as_their_path(tmp_path: Path) -> None:
    """A few hundred bytes whatever the corpus: unpickling maps the same files again; a
    directory prepared again meanwhile (another key) is refused."""
    directory = write_shards(tmp_path / "s", random_pairs(2000, seed=3, longest=30))
    shards = TokenShards(directory)
    blob = pickle.dumps(shards)
    assert len(blob) < 300 < shards.src_ids.nbytes
    again = pickle.loads(blob)
    assert (
        isinstance(again.src_ids, np.memmap) and again.src_ids.filename == shards.src_ids.filename
    )
    assert np.array_equal(again.tgt_lengths, shards.tgt_lengths)
    write_shards(directory, random_pairs(5, seed=4), key="other")
    with pytest.raises(ValueError, match="prepared again since it was opened"):
        pickle.loads(blob)


# -- ShardExamples = make_examples -------------------------------------------------------------


def assert_same_examples(shards: ShardExamples, expected: Examples, seed: int = 0) -> None:
    """Items, lengths, dropped count, and the tensors of random batches (with repeats)."""
    assert len(shards) == len(expected) and shards.dropped == expected.dropped
    assert list(shards) == list(expected)
    assert shards[-1] == expected[-1] and shards[2:9:3] == expected[2:9:3]
    assert np.array_equal(shards.src_lengths, expected.src_lengths)
    assert np.array_equal(shards.tgt_lengths, expected.tgt_lengths)
    rng = np.random.default_rng(seed)
    for size in [1, 2, 7, 40, len(expected)]:
        indices = rng.integers(0, len(expected), size).tolist()
        want = collate(expected, indices, pad_id=0)
        for got in (shards.collate(indices, 0), collate(shards, np.array(indices), pad_id=0)):
            for a, b in zip(got, want, strict=True):
                assert a.dtype == b.dtype == torch.int64 and torch.equal(a, b)
    got, want = shards.collate([0, 1], pad_id=3), collate(expected, [0, 1], pad_id=3)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("max_len", [None, 21, 12, 5])
def test_shard_examples_are_the_examples_of_make_examples(
    corpora: tuple[list, Path, Path], max_len: int | None
) -> None:
    pairs, a, b = corpora
    assert_same_examples(
        ShardExamples(a, max_len=max_len), make_examples(pairs[:300], max_len=max_len)
    )
    both = ShardExamples([a, TokenShards(b)], max_len=max_len)
    assert_same_examples(both, make_examples(pairs, max_len=max_len), seed=1)
    assert both.corpus_sizes == [
        len(make_examples(pairs[:300], max_len=max_len)),
        len(make_examples(pairs[300:], max_len=max_len)),
    ]
    framed = ShardExamples(a, max_len=max_len, bos_id=7, eos_id=8)
    assert_same_examples(framed, make_examples(pairs[:300], max_len=max_len, bos_id=7, eos_id=8))
    lm = ShardExamples([a, b], max_len=max_len, lm=True)
    assert_same_examples(lm, make_lm_examples([t for _, t in pairs], max_len=max_len), seed=2)


def test_shard_examples_hold_compact_lengths_and_an_index_only_when_dropping(
    corpora: tuple[list, Path, Path],
) -> None:
    _, a, _ = corpora
    shards = TokenShards(a)
    everything = ShardExamples(shards, max_len=None)
    assert everything.src_lengths is shards.src_lengths  # shared, not copied
    assert everything.tgt_lengths.dtype == np.uint16 and everything._kept == [None]
    some = ShardExamples(shards, max_len=10)
    (kept,) = some._kept
    assert kept is not None and kept.dtype == np.int32 and len(kept) == len(some) < len(shards)
    assert some.locate(3) == (0, int(kept[3]))
    with pytest.raises(IndexError, match="example 300 out of range"):
        everything[300]
    with pytest.raises(ValueError, match="indices: expected at least one example index"):
        everything.collate([], 0)
    with pytest.raises(IndexError, match=r"indices: out of range \(300 examples\)"):
        everything.collate([0, 300], 0)
    with pytest.raises(ValueError, match="max_len: expected a positive int or None"):
        ShardExamples(shards, max_len=0)
    with pytest.raises(ValueError, match="shards: expected at least one"):
        ShardExamples([], max_len=None)
    # Lengths past uint16: targets of 65,535 ids are 65,536 tensor positions.
    long = TokenShards(write_shards(a.parent / "long", [([4] * 70_000, [5] * 65_535), ([4], [5])]))
    assert long.src_lengths.dtype == np.uint32 and long.src_lengths.tolist() == [70_000, 1]
    assert long.tgt_lengths.dtype == np.uint16
    assert ShardExamples(long, max_len=None).tgt_lengths.tolist() == [65_536, 2]


def test_pickled_shard_examples_are_a_few_hundred_bytes(corpora: tuple[list, Path, Path]) -> None:
    _, a, b = corpora
    examples = ShardExamples([a, b], max_len=12, weights=[1.0, 3.0])
    blob = pickle.dumps(examples)
    assert len(blob) < 1000
    again = pickle.loads(blob)
    assert again.fingerprint() == examples.fingerprint() and list(again) == list(examples)
    assert np.array_equal(again.tgt_lengths, examples.tgt_lengths)
    assert again.mixture is not None and again.mixture.to_dict() == examples.mixture.to_dict()


def test_mixed_shards_draw_from_each_corpus(corpora: tuple[list, Path, Path]) -> None:
    _, a, b = corpora
    examples = ShardExamples([a, b], max_len=None, weights=[1.0, 3.0], epoch_size=400)
    assert examples.mixture is not None and examples.mixture.counts.tolist() == [100, 300]
    batcher = TokenBatcher.for_examples(examples, 64, seed=5)
    drawn = np.array(sorted(i for batch in batcher.batches(0) for i in batch))
    assert (drawn < 300).sum() == 100 and len(np.unique(drawn[drawn < 300])) == 100
    second = drawn[drawn >= 300]  # 300 of 200: every one once, 100 of them twice
    assert len(second) == 300 and len(np.unique(second)) == 200
    assert sorted(set(np.bincount(second - 300).tolist())) == [1, 2]
    assert batcher.batches(0) == TokenBatcher.for_examples(examples, 64, seed=5).batches(0)
    assert batcher.batches(1) != batcher.batches(0)
    assert ShardExamples([a, b], max_len=None).mixture is None


# -- the objective: checks and fingerprint without a loop over examples ------------------------


def test_the_objective_checks_shards_as_it_checks_examples(
    corpora: tuple[list, Path, Path], tmp_path: Path
) -> None:
    """The same errors, naming the same example, from the shards' largest ids; a dropped pair
    out of the vocabulary is no error (as in memory)."""
    pairs, a, b = corpora
    config = TrainConfig(out=str(tmp_path / "run"), max_steps=1, device="cpu")

    def objective(vocab: int, lm: bool = False) -> TranslationObjective | LanguageModelObjective:
        options = {"vocab_size": vocab, "d_model": 16, "num_heads": 2, "d_ff": 32}
        cls = LanguageModelObjective if lm else TranslationObjective
        model = (TransformerLM if lm else Transformer)(TransformerConfig.preset("tiny", **options))
        return cls(model, config, torch.device("cpu"))

    def error(call: object, *args: object) -> str:
        with pytest.raises(ValueError) as caught:
            call(*args)  # type: ignore[operator]
        return str(caught.value)

    translation = objective(24)
    shards, memory = ShardExamples(a, max_len=None), make_examples(pairs[:300], max_len=None)
    assert translation.prepare(shards, "train_examples") is shards
    small = objective(20)  # ids 20..23 are out
    assert error(small.prepare, shards, "x") == error(small.prepare, memory, "x")
    assert "source id" in error(small.prepare, shards, "x")
    lm_objective = objective(20, lm=True)
    assert "target id" in error(lm_objective.prepare, shards, "x")
    assert error(lm_objective.prepare, shards, "x") == error(lm_objective.prepare, memory, "x")
    # An out-of-vocabulary pair that max_len drops is not checked, in memory or on disk.
    extra = [([4, 5], [6]), ([4] * 30, [23] * 30), ([7], [8, 9])]
    tail = ShardExamples(write_shards(tmp_path / "tail", extra), max_len=20)
    assert objective(22).prepare(tail, "x") is tail
    objective(22).prepare(make_examples(extra, max_len=20), "x")
    both = ShardExamples([a, b], max_len=None)
    message = error(translation.prepare, both, "train_examples")
    assert message == error(
        translation.prepare, make_examples(pairs, max_len=None), "train_examples"
    )
    assert "empty source" in message
    assert objective(24, lm=True).prepare(ShardExamples(b, max_len=None, lm=True), "x")


def test_the_fingerprint_of_shards_is_their_keys_and_options(
    corpora: tuple[list, Path, Path], tmp_path: Path
) -> None:
    _, a, b = corpora
    config = TrainConfig(out=str(tmp_path / "run"), max_steps=1, device="cpu")
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=24, d_model=16, num_heads=2))
    objective = TranslationObjective(model, config, torch.device("cpu"))
    base = objective.fingerprint(ShardExamples([a, b], max_len=12))
    assert base == objective.fingerprint(ShardExamples([a, b], max_len=12))
    moved = Path(shutil.copytree(a, tmp_path / "moved"))  # the same data elsewhere
    assert objective.fingerprint(ShardExamples([moved, b], max_len=12)) == base
    others = [
        ShardExamples([b, a], max_len=12),
        ShardExamples([a, b], max_len=13),
        ShardExamples([a, b], max_len=12, bos_id=3),
        ShardExamples([a, b], max_len=12, weights=[1, 1]),
        ShardExamples([a, b], max_len=12, weights=[1, 2]),
        ShardExamples([a, b], max_len=12, temperature=2.0),
    ]
    prints = {objective.fingerprint(other) for other in others}
    assert len(prints) == len(others) and base not in prints
    memory = make_examples(random_pairs(20, seed=0), max_len=None)  # unchanged in memory
    digest = hashlib.sha256(memory.src_lengths.tobytes() + memory.tgt_lengths.tobytes())
    assert objective.fingerprint(memory) == digest.hexdigest()[:16]


# -- DataLoader workers --------------------------------------------------------------------------


def loader_batches(examples: ShardExamples, **options: object) -> list:
    batcher = TokenBatcher.for_examples(examples, 64, seed=3, num_replicas=2, rank=1)
    batches = batcher.batches(0)
    assert any(len(b) == 0 for b in batches)  # an empty share: None, as the trainer skips it
    return list(batch_loader(examples, batches, pad_id=0, **options))  # type: ignore[arg-type]


def same_batches(got: list, expected: list) -> bool:
    return len(got) == len(expected) and all(
        (a is None and b is None)
        or (a is not None and b is not None and all(map(torch.equal, a, b)))
        for a, b in zip(got, expected, strict=True)
    )


def long_corpus(tmp_path: Path) -> ShardExamples:
    pairs = random_pairs(400, seed=6, longest=10) + [([4] * 60, [5] * 60)] * 3
    return ShardExamples(write_shards(tmp_path / "loader", pairs), max_len=None)


def test_a_dataloader_with_two_workers_gives_the_same_batches(tmp_path: Path) -> None:
    """Forked workers (Linux's default): the batches of no workers, in order."""
    examples = long_corpus(tmp_path)
    alone = loader_batches(examples)
    batcher = TokenBatcher.for_examples(examples, 64, seed=3, num_replicas=2, rank=1)
    direct = [examples.collate(b, 0) if b else None for b in batcher.batches(0)]
    assert same_batches(alone, direct)
    assert same_batches(loader_batches(examples, num_workers=2), alone)


@pytest.mark.slow
def test_spawned_workers_map_the_shards_and_give_the_same_batches(tmp_path: Path) -> None:
    """Spawned workers get the examples pickled (a few hundred bytes: the directories) and
    map the same files; their batches are those of no workers."""
    examples = long_corpus(tmp_path)
    assert len(pickle.dumps(examples)) < 600
    spawned = loader_batches(examples, num_workers=2, multiprocessing_context="spawn")
    assert same_batches(spawned, loader_batches(examples))


# -- training on shards --------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def same_weights(a: Path, b: Path) -> bool:
    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def short_config(out: Path, **overrides: object) -> TrainConfig:
    options = {
        "out": str(out),
        "max_tokens": 96,
        "accumulate": 2,
        "warmup": 4,
        "max_steps": 4,
        "eval_every": 2,
        "checkpoint_every": 2,
        "keep_checkpoints": 2,
        "average_last": 1,
        "log_every": 1,
        "device": "cpu",
        "seed": 2,
    }
    return TrainConfig(**{**options, **overrides})  # type: ignore[arg-type]


@pytest.mark.usefixtures("one_thread")
def test_training_on_shards_is_training_on_the_same_examples_in_memory(tmp_path: Path) -> None:
    """The same batches (the lengths are equal), the same tensors: the same weights."""
    pairs = shard_worker.reversal_pairs(120, seed=0)
    directory = write_shards(tmp_path / "shards", pairs)
    valid = worker.reversal_examples(20, seed=1)
    runs = {
        "memory": make_examples(pairs, max_len=64),
        "shards": ShardExamples(directory, max_len=64),
    }
    for name, train in runs.items():
        trainer = Trainer(
            worker.small_model(dropout=0.1),
            train,
            valid,
            short_config(tmp_path / name),
            progress=False,
            objective=TranslationObjective,
        )
        summary = trainer.train()
        assert summary["steps"] == 4
    assert same_weights(tmp_path / "memory" / "model", tmp_path / "shards" / "model")
    loss = [[r["loss"], r["val_loss"]] for r in read_rows(tmp_path / "memory" / "metrics.csv")]
    assert loss == [
        [r["loss"], r["val_loss"]] for r in read_rows(tmp_path / "shards" / "metrics.csv")
    ]
    state = json.loads((find_checkpoints(tmp_path / "shards")[-1] / "state.json").read_text())
    assert state["data"]["described"]["corpora"][0]["key"] == TokenShards(directory).key


@pytest.mark.usefixtures("one_thread")
def test_a_language_model_trains_on_the_target_side_of_shards(tmp_path: Path) -> None:
    """ShardExamples(lm=True) = make_lm_examples of the targets: the same weights."""
    pairs = shard_worker.reversal_pairs(80, seed=3)
    directory = write_shards(tmp_path / "shards", pairs)
    runs = {
        "memory": make_lm_examples([t for _, t in pairs], max_len=64),
        "shards": ShardExamples(directory, max_len=64, lm=True),
    }
    for name, train in runs.items():
        torch.manual_seed(0)
        config = TransformerConfig.preset("tiny", vocab_size=24, d_model=32, d_ff=64)
        model = TransformerLM(config)
        Trainer(
            model,
            train,
            None,
            short_config(tmp_path / name),
            progress=False,
            objective=LanguageModelObjective,
        ).train()
    assert same_weights(tmp_path / "memory" / "model", tmp_path / "shards" / "model")


@pytest.mark.usefixtures("one_thread")
def test_a_resume_on_other_corpora_or_weights_is_refused(tmp_path: Path) -> None:
    parts = [shard_worker.reversal_pairs(60, seed=s) for s in (0, 1)]
    first, second = (write_shards(tmp_path / f"c{k}", p) for k, p in enumerate(parts))
    out = tmp_path / "run"
    mixed = ShardExamples([first, second], max_len=64, weights=[1.0, 1.0])
    Trainer(
        worker.small_model(),
        mixed,
        None,
        short_config(out, max_steps=2),
        progress=False,
        objective=TranslationObjective,
    ).train()

    def resume(examples: ShardExamples) -> str:
        trainer = Trainer(
            worker.small_model(),
            examples,
            None,
            short_config(out),
            progress=False,
            objective=TranslationObjective,
        )
        with pytest.raises(ValueError, match=r"resume: .* was trained on other data") as caught:
            trainer.train(resume=True)
        return str(caught.value)

    reweighted = resume(ShardExamples([first, second], max_len=64, weights=[3.0, 1.0]))
    assert "mixture.weights [1.0, 1.0] -> [3.0, 1.0]" in reweighted
    swapped = resume(ShardExamples([second, first], max_len=64, weights=[1.0, 1.0]))
    assert "corpora[0].key" in swapped and "mixture.keys" in swapped
    assert "max_len 64 -> 32" in resume(ShardExamples([first, second], max_len=32, weights=[1, 1]))
    # The same corpora and weights resume (and run to the new max_steps).
    same = ShardExamples([first, second], max_len=64, weights=[1.0, 1.0])
    summary = Trainer(
        worker.small_model(),
        same,
        None,
        short_config(out),
        progress=False,
        objective=TranslationObjective,
    ).train(resume=True)
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 4


@pytest.mark.slow
def test_a_run_on_mixed_shards_killed_mid_epoch_resumes_bit_for_bit(tmp_path: Path) -> None:
    """tests/train/test_train.py's SIGKILL test on two shard directories mixed by weights (1, 2):
    the run killed right after its mid-epoch checkpoint at step 6 and resumed logs the same
    rows and ends with the same weights as the uninterrupted run."""
    pairs = shard_worker.reversal_pairs(120, seed=0)
    shards = [
        str(write_shards(tmp_path / "first", pairs[:80])),
        str(write_shards(tmp_path / "second", pairs[80:])),
    ]
    full, killed = tmp_path / "full", tmp_path / "killed"
    command = [sys.executable, str(WORKER), "train"]
    uninterrupted = subprocess.Popen(
        [*command, str(full), *shards], stderr=subprocess.PIPE, text=True
    )
    crash = subprocess.run(
        [*command, str(killed), *shards, "--kill-after", "6"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert crash.returncode == -signal.SIGKILL, crash.stderr
    newest = find_checkpoints(killed)[-1]
    state = json.loads((newest / "state.json").read_text())
    assert 6 <= state["step"] < 14 and state["batch_in_epoch"] > 0  # mid-epoch
    assert state["data"]["described"]["mixture"]["weights"] == [1.0, 2.0]
    resumed = subprocess.run(
        [*command, str(killed), *shards, "--resume"], capture_output=True, text=True, timeout=180
    )
    assert resumed.returncode == 0, resumed.stderr
    _, err = uninterrupted.communicate(timeout=180)
    assert uninterrupted.returncode == 0, err
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["resumed_from_step"] == state["step"] and summary["steps"] == 14

    def table(path: Path) -> list[list[str]]:
        return [[v for k, v in r.items() if k != "tokens_per_s"] for r in read_rows(path)]

    assert table(killed / "metrics.csv") == table(full / "metrics.csv")
    for name in ("model", f"checkpoints/{find_checkpoints(full)[-1].name}"):
        assert same_weights(full / name, killed / name), name


@pytest.mark.slow
def test_two_processes_under_torchrun_share_each_batch_of_the_shards(tmp_path: Path) -> None:
    """torchrun, 2 CPU processes (gloo): each rank's shares, put together in rank order, are
    the global batches of one process, and the ranks train 3 steps together."""
    pairs = shard_worker.reversal_pairs(48, seed=5)
    pairs[::4] = [(ids * 3, ids[::-1] * 3) for ids, _ in pairs[::4]]  # long: alone in a batch
    directory = write_shards(tmp_path / "shards", pairs)
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", str(WORKER), "ddp", str(out), str(directory)]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    shares = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    alone = TokenBatcher.for_examples(ShardExamples(directory, max_len=64), 40, seed=0)
    for epoch in ("0", "1"):
        expected = alone.batches(int(epoch))
        assert len(shares[0][epoch]) == len(shares[1][epoch]) == len(expected)
        for j, batch in enumerate(expected):
            assert shares[0][epoch][j] + shares[1][epoch][j] == batch
        assert any(not share for share in shares[1][epoch])  # an empty share occurs
    summary = json.loads((out / "run" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["world_size"] == 2


def test_both_kinds_of_examples_answer_one_protocol(tmp_path: Path) -> None:
    """ShardExamples is not an Examples that replaces every member: both kinds implement
    ExamplesProtocol, and its questions get the same answers from both."""
    pairs = random_pairs(40, seed=9, vocab=24)
    on_disk = ShardExamples(write_shards(tmp_path / "a", pairs), max_len=10)
    memory = make_examples(pairs, max_len=10)
    assert isinstance(on_disk, ExamplesProtocol) and isinstance(memory, ExamplesProtocol)
    assert not isinstance(on_disk, Examples)
    for side in ("src", "tgt"):
        for bound in (1, 2, 3, 10, 20, 23, 24):
            assert on_disk.first_id_from(side, bound) == memory.first_id_from(side, bound)
    lm = ShardExamples(write_shards(tmp_path / "b", pairs), max_len=None, lm=True)
    assert lm.first_id_from("src", 0) is None and lm.first_id_from("tgt", 2) == 0

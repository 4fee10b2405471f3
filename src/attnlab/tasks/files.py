"""The ``files`` task: your parallel text files, one sentence a line, plain or gzip.

The training split may be millions of pairs: it is never held in memory. The tokenizers learn
from a seeded sample of it (``[tokenizer] sample_size``), then the corpus is encoded once,
cleaned, into token-id shards on disk (:mod:`attnlab.data.prepare`, cached by the files'
digests, the tokenizers and the cleaning options, so a second run or a resumed one reuses
them), and training reads its batches from there (:mod:`attnlab.data.shards`).
``attnlab prepare`` does both ahead of training (:meth:`TranslationTask.prepare`). A start
does not read an unchanged file again for its digest: the cache remembers it by path, inode,
size and modification time (``attnlab train --verify-data`` reads it anyway). Several
training corpora (``corpora``) are mixed by weight or temperature: an epoch ends when the
corpus drawn fastest for its size has been seen once (:class:`~attnlab.data.mixture.Mixture`).
Validation and test stay small, in memory. A job may leave out its test split: then nothing
is scored on test, and the run says so.

One corpus::

    [task]
    name = "files"
    train_src = "wmt14/train.en.gz"
    train_tgt = "wmt14/train.de.gz"
    valid_src = "wmt14/newstest2013.en"
    valid_tgt = "wmt14/newstest2013.de"

Several, mixed (``weight``: each corpus's share of an epoch; or ``temperature = 5.0``: shares
by size**(1/T)); the tokenizers' sample follows the same shares::

    corpora = [
        { name = "europarl", src = "europarl.en", tgt = "europarl.de", weight = 1.0 },
        { name = "paracrawl", src = "paracrawl.en.gz", tgt = "paracrawl.de.gz", weight = 3.0 },
    ]

Cleaning (``[task.clean]``, every filter on by default: empty lines, lines identical on both
sides, more than ``max_tokens`` = 250 tokens on a side, a length ratio above ``max_ratio`` =
1.5, exact duplicates): ``clean = { max_ratio = 2.0 }``, or ``clean = false`` for none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .base import register_task
from .translation import DiskPlan, TrainCorpus, TranslationTask

__all__ = ["Files"]

_CORPUS_KEYS = ("name", "src", "tgt", "weight")


@register_task
@dataclass
class Files(TranslationTask):
    name: str = "files"
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    seed: int = 0
    corpora: list[dict[str, Any]] | None = None
    temperature: float | None = None
    clean: dict[str, Any] | bool = True
    cache_dir: str | None = None

    def _pair(self, split: str) -> tuple[str | None, str | None]:
        return getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt")

    def check(self) -> None:
        """Every file named is there and each pair has the same number of lines; the splits
        (train, or corpora, and valid required), the mixture and the cleaning are whole."""
        from ..data.shardformat import cache_root
        from ..data.textfiles import check_parallel

        corpora = self._corpora()
        for split in ("valid", "test"):
            src, tgt = self._pair(split)
            if split == "valid" and not (src and tgt):
                raise ValueError("[task] valid_src, valid_tgt: required for the 'files' task")
            if bool(src) != bool(tgt):
                raise ValueError(f"[task] {split}_src, {split}_tgt: give both or neither")
        pairs = [(c.option, c.src, c.tgt) for c in corpora]
        pairs += [
            (f"[task] {split}_src, {split}_tgt", *self._pair(split))
            for split in ("valid", "test")
            if self._pair(split)[0]
        ]
        root = cache_root(self.cache_dir)
        for option, src, tgt in pairs:  # their digests, kept, name the caches later
            check_parallel(src, tgt, option, utf8=False, cache_dir=root)
        if self.temperature is not None:
            if not isinstance(self.temperature, (int, float)) or not self.temperature > 0:
                raise ValueError(
                    f"[task] temperature: expected a positive number, got {self.temperature!r}"
                )
            if self.corpora is None:
                raise ValueError("[task] temperature: mixes [task] corpora; give two or more")
        self._cleaning()

    def disk_plan(self) -> DiskPlan:
        corpora, mixing = self._corpora(), {}
        if len(corpora) > 1 and self.temperature is not None:
            mixing = {"temperature": float(self.temperature)}
        elif len(corpora) > 1:
            mixing = {"weights": [c.weight for c in corpora]}
        return DiskPlan(corpora, self._cleaning(), mixing, self.cache_dir, self.seed)

    def _cleaning(self):
        """The :class:`~attnlab.data.clean.CleaningOptions` of ``clean``."""
        from ..data.clean import CleaningOptions

        if self.clean is True:
            return CleaningOptions()
        if self.clean is False:
            return CleaningOptions.off()
        if not isinstance(self.clean, dict):
            raise ValueError(f"[task] clean: expected true, false or a table, got {self.clean!r}")
        try:
            return CleaningOptions.from_dict(self.clean)
        except (TypeError, ValueError) as e:
            raise ValueError(f"[task] clean: {e}") from None

    def _corpora(self) -> list[TrainCorpus]:
        src, tgt = self._pair("train")
        if self.corpora is None:
            if not (src and tgt):
                raise ValueError(
                    "[task] train_src, train_tgt: required for the 'files' task (or [task] corpora)"
                )
            return [TrainCorpus("train", src, tgt, 1.0, "[task] train_src, train_tgt")]
        if src or tgt:
            raise ValueError(
                "[task] corpora, train_src: give the training corpora one way: corpora, or "
                "train_src and train_tgt"
            )
        if not isinstance(self.corpora, list) or not self.corpora:
            raise ValueError(f"[task] corpora: expected a list of tables, got {self.corpora!r}")
        found = []
        for i, entry in enumerate(self.corpora):
            where = f"[task] corpora[{i}]"
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: expected a table (src, tgt, weight, name)")
            unknown = sorted(set(entry) - set(_CORPUS_KEYS))
            if unknown:
                raise ValueError(f"{where}: unknown keys {unknown}; a corpus has {_CORPUS_KEYS}")
            for key in ("src", "tgt"):
                if not isinstance(entry.get(key), str) or not entry[key]:
                    raise ValueError(f"{where} {key}: expected a file, got {entry.get(key)!r}")
            weight = entry.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
                raise ValueError(f"{where} weight: expected a positive number, got {weight!r}")
            name = entry.get("name", f"corpus{i}")
            found.append(TrainCorpus(str(name), entry["src"], entry["tgt"], float(weight), where))
        names = [c.name for c in found]
        if len(set(names)) != len(names):
            raise ValueError(f"[task] corpora: the names must differ, got {names}")
        return found

    def with_corpora(self, corpora: list[TrainCorpus]) -> Files:
        """This task training on ``corpora`` (a student's: :mod:`attnlab.tasks.distill`), with
        their weights, its other options kept."""
        tables = [{"name": c.name, "src": c.src, "tgt": c.tgt, "weight": c.weight} for c in corpora]
        return dataclasses.replace(self, train_src=None, train_tgt=None, corpora=tables)

    def load(self) -> Any:
        from ..data import corpora

        splits = {
            split: corpora.parallel_split(self._pair(split), f"[task] {split}_src, {split}_tgt")
            for split in ("valid", "test")
            if self._pair(split)[0]
        }
        return corpora.ParallelCorpus("files", self.src_lang, self.tgt_lang, splits)

    def describe(self, data: Any) -> str:
        from ..data.textfiles import count_lines

        lines = sum(count_lines(c.src) for c in self._corpora())
        splits = ", ".join(f"{k} {len(v):,}" for k, v in data.splits.items())
        return f"task files {self.src_lang}->{self.tgt_lang}: train {lines:,} (on disk), {splits}"

    def final_split(self, data: Any) -> str | None:
        return "test" if self.test_src else None

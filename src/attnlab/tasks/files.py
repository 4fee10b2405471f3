"""The ``files`` task: plain parallel text files, one sentence a line (``train_src`` /
``train_tgt``, ``valid_*`` and ``test_*`` alike). A job may leave out its test split: then
nothing is scored on test, and the run says so."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import register_task
from .translation import TranslationTask

__all__ = ["Files"]

_SPLITS = ("train", "valid", "test")


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

    def _pair(self, split: str) -> tuple[str | None, str | None]:
        return getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt")

    def check(self) -> None:
        """Both sides of each split given (train and valid required), each file readable."""
        for split in _SPLITS:
            src, tgt = self._pair(split)
            if split != "test" and not (src and tgt):
                raise ValueError(f"[task] {split}_src, {split}_tgt: required for the 'files' task")
            if bool(src) != bool(tgt):
                raise ValueError(f"[task] {split}_src, {split}_tgt: give both or neither")
            for side, path in (("src", src), ("tgt", tgt)):
                if path and not Path(path).is_file():
                    raise FileNotFoundError(f"[task] {split}_{side}: {path}: no such file")

    def load(self) -> Any:
        from ..data import corpora

        self.check()
        pairs = {split: self._pair(split) for split in ("valid", "test")}
        return corpora.parallel_files(
            self._pair("train"),  # type: ignore[arg-type]
            valid=pairs["valid"] if pairs["valid"][0] else None,
            test=pairs["test"] if pairs["test"][0] else None,
            src_lang=self.src_lang,
            tgt_lang=self.tgt_lang,
        )

    def final_split(self, data: Any) -> str | None:
        return "test" if self.test_src else None

"""The ``numbers`` task: English number words to German (or any two languages num2words
speaks), numbers in ``[low, high]``, ``valid_size`` and ``test_size`` of them held out (500
each by default). Offline, and learnt to 100% exact match in minutes (``make demo``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import register_task
from .translation import TranslationTask

__all__ = ["Numbers"]


@register_task
@dataclass
class Numbers(TranslationTask):
    name: str = "numbers"
    low: int = 0
    high: int = 9999
    valid_size: int = 500
    test_size: int = 500
    seed: int = 0

    recipe: ClassVar[str | None] = "numbers.toml"

    def load(self) -> Any:
        from ..data import corpora

        return corpora.numbers(
            src_lang=self.src_lang,
            tgt_lang=self.tgt_lang,
            low=self.low,
            high=self.high,
            seed=self.seed,
            valid_size=self.valid_size,
            test_size=self.test_size,
        )

"""The ``multi30k`` task: Multi30K task 1 (29,000 training pairs of image captions, English,
German, French, Czech), from ``data_dir``, else ``$ATTNLAB_MULTI30K``, else the download cache
(``attnlab download multi30k``); scored on ``test_2016_flickr``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import register_task
from .translation import TranslationTask

__all__ = ["Multi30k"]


@register_task
@dataclass
class Multi30k(TranslationTask):
    name: str = "multi30k"
    data_dir: str | None = None

    recipe: ClassVar[str | None] = "multi30k-en-de.toml"

    def load(self) -> Any:
        from ..data import corpora

        return corpora.multi30k(self.data_dir, src_lang=self.src_lang, tgt_lang=self.tgt_lang)

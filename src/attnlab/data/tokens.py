"""What a tokenizer is to the rest of attnlab: :class:`TokenizerProtocol`, which both kinds
implement, the BPE :class:`attnlab.data.tokenizer.Tokenizer` and Marian's
:class:`attnlab.data.sentencepiece.SentencePieceTokenizer`.

Code that encodes, decodes or labels text takes a ``TokenizerProtocol`` and asks it, never its
class, how it frames ids: its special ids (``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``) and
whether :meth:`~TokenizerProtocol.encode` ends every text in ``eos_id`` (``add_eos``: a
Marian source side does; the BPE tokenizer never adds a special token). This module imports
neither kind, so modules that only need the interface import no tokenizer (and the two kinds
never import each other for their types).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["TokenizerProtocol", "without_framing_eos"]


@runtime_checkable
class TokenizerProtocol(Protocol):
    """A tokenizer of either kind: text to ids and back, its special ids and its framing."""

    @property
    def vocab_size(self) -> int:
        """The number of ids, special tokens included: the model's vocabulary size."""
        ...

    @property
    def pad_id(self) -> int: ...

    @property
    def bos_id(self) -> int:
        """The id the decoder starts from (Marian's is its pad id)."""
        ...

    @property
    def eos_id(self) -> int: ...

    @property
    def unk_id(self) -> int: ...

    @property
    def add_eos(self) -> bool:
        """Whether :meth:`encode` appends :attr:`eos_id` to every text (its framing)."""
        ...

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, framed as :attr:`add_eos` says (no other special token)."""
        ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens dropped."""
        ...

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]: ...

    def tokens(self, text: str) -> list[str]:
        """Readable labels of ``encode(text)``'s ids, one each."""
        ...

    def labels(self, ids: Sequence[int]) -> list[str]:
        """A readable label for each id (special tokens by their names)."""
        ...

    def id_to_token(self, i: int) -> str: ...

    def fingerprint(self) -> str:
        """A digest of everything that decides how it encodes and decodes."""
        ...

    def save(self, path: str | os.PathLike[str]) -> None: ...


def without_framing_eos(tokenizer: TokenizerProtocol, ids: Sequence[int]) -> list[int]:
    """``ids`` (from ``tokenizer.encode``) without the EOS that the tokenizer's framing
    appended (:attr:`TokenizerProtocol.add_eos`); as they are otherwise."""
    out = list(ids)
    if tokenizer.add_eos and out and out[-1] == tokenizer.eos_id:
        out.pop()
    return out

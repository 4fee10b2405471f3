"""What a tokenizer is to the rest of attnlab: :class:`TokenizerProtocol`, which both kinds
implement, the BPE :class:`attnlab.data.tokenizer.Tokenizer` and Marian's
:class:`attnlab.data.sentencepiece.SentencePieceTokenizer`, and the one registry of those
kinds (:data:`KINDS`), which :func:`load_tokenizer` reads a file's kind from.

Code that encodes, decodes or labels text takes a ``TokenizerProtocol`` and asks it, never its
class, how it frames ids: its special ids (``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``) and
whether :meth:`~TokenizerProtocol.encode` ends every text in ``eos_id`` (``add_eos``: a
Marian source side does; the BPE tokenizer never adds a special token). This module imports
neither kind (the registry imports one when it is first asked for), so modules that only need
the interface import no tokenizer, and the two kinds never import each other. Code that must
tell the kinds apart (an export that writes Marian's files) asks a tokenizer's :attr:`kind`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from .._io import read_json

__all__ = [
    "KINDS",
    "TokenizerProtocol",
    "is_tokenizer",
    "load_tokenizer",
    "tokenizer_class",
    "without_framing_eos",
]

#: The kinds of tokenizer, by :attr:`TokenizerProtocol.kind`: each one's class, imported when
#: it is first asked for (only Marian's needs the sentencepiece package loaded).
KINDS = {
    "bpe": "attnlab.data.tokenizer:Tokenizer",
    "sentencepiece": "attnlab.data.sentencepiece:SentencePieceTokenizer",
}
#: The top-level field of a SentencePiece tokenizer's file. A BPE tokenizer's file is Hugging
#: Face's ``tokenizer.json``, which states attnlab's format inside its ``model`` object instead.
_MARKER = "attnlab"


@runtime_checkable
class TokenizerProtocol(Protocol):
    """A tokenizer of either kind: text to ids and back, its special ids and its framing."""

    #: Its kind, a key of :data:`KINDS`: ``"bpe"`` or ``"sentencepiece"``.
    kind: str

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

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenizerProtocol:
        """Read a tokenizer of this kind that :meth:`save` wrote."""
        ...


def without_framing_eos(tokenizer: TokenizerProtocol, ids: Sequence[int]) -> list[int]:
    """``ids`` (from ``tokenizer.encode``) without the EOS that the tokenizer's framing
    appended (:attr:`TokenizerProtocol.add_eos`); as they are otherwise."""
    out = list(ids)
    if tokenizer.add_eos and out and out[-1] == tokenizer.eos_id:
        out.pop()
    return out


def is_tokenizer(value: object) -> bool:
    """Whether ``value`` is a tokenizer of some kind (:class:`TokenizerProtocol`)."""
    return isinstance(value, TokenizerProtocol)


def tokenizer_class(kind: str) -> type[TokenizerProtocol]:
    """The class of tokenizer kind ``kind`` (:data:`KINDS`)."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {sorted(KINDS)}, got {kind!r}")
    module, name = KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return,unused-ignore]


def load_tokenizer(path: str | os.PathLike[str]) -> TokenizerProtocol:
    """Read one tokenizer file of either kind, as the class of its kind loads it: a
    SentencePiece tokenizer when the file says so at its top level (``"attnlab": {"format":
    "sentencepiece", ...}``), else a BPE tokenizer (whose errors it raises for a file that is
    neither)."""
    path = Path(path)
    try:
        data = read_json(path)
    except (OSError, ValueError):
        data = {}  # the BPE loader says what is wrong with it
    kind = "sentencepiece" if _MARKER in data else "bpe"
    return tokenizer_class(kind).load(path)

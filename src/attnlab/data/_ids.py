"""The argument checks that both kinds of tokenizer (:mod:`attnlab.data.tokenizer`'s BPE and
:mod:`attnlab.data.sentencepiece`'s) make on token ids and texts, so that their errors read
alike: each names the argument and, in a sequence, the position."""

from __future__ import annotations

from collections.abc import Sequence

from .._checks import check_type, is_int

__all__ = ["as_id_list", "as_id_rows", "check_id", "check_texts"]


def as_id_list(ids: object, vocab_size: int, name: str) -> list[int]:
    """``ids`` (a sequence of ints, or a 1-D tensor / array) as a list, each checked to be a
    valid id; errors name the argument and the position."""
    if hasattr(ids, "tolist") and not isinstance(ids, (list, tuple)):
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(f"{name}: expected a sequence of token ids, got {type(ids).__name__}")
    for position, token in enumerate(ids):
        if not is_int(token):
            raise TypeError(
                f"{name}[{position}]: expected an int token id, got {type(token).__name__} "
                f"{token!r}"
            )
        if not 0 <= token < vocab_size:
            raise ValueError(
                f"{name}[{position}]: token id {token} is out of range [0, {vocab_size}) for "
                f"this tokenizer"
            )
    return list(ids)


def as_id_rows(batch: object, vocab_size: int) -> list[list[int]]:
    """``batch`` (sequences of ints, or a 2-D tensor / array) as lists of ids, each checked
    (:func:`as_id_list`, the argument named ``batch[i]``)."""
    if hasattr(batch, "tolist") and not isinstance(batch, (list, tuple)):
        batch = batch.tolist()
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
        raise TypeError(f"batch: expected a sequence of id sequences, got {type(batch)}")
    return [as_id_list(ids, vocab_size, f"batch[{i}]") for i, ids in enumerate(batch)]


def check_id(i: object, vocab_size: int, name: str) -> int:
    """``i`` if it is an int id in ``[0, vocab_size)``, else TypeError / ValueError naming it."""
    if not is_int(i):
        raise TypeError(f"{name}: expected an int token id, got {type(i).__name__} {i!r}")
    if not 0 <= i < vocab_size:
        raise ValueError(
            f"{name}: token id {i} is out of range [0, {vocab_size}) for this tokenizer"
        )
    return i


def check_texts(texts: object, name: str) -> list[str]:
    """``texts`` as a list if it is a sequence of strings (not one string), else TypeError
    naming it (and the position of a text that is not a string)."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"{name}: expected a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        check_type(text, str, f"{name}[{i}]", "a string")
    return list(texts)

"""Marian (opus-mt) tokenizers: a SentencePiece model and Marian's own vocabulary.

A Marian translation model (Junczys-Dowmunt et al. 2018; the Helsinki-NLP opus-mt models,
Tiedemann and Thottingal 2020) cuts text with SentencePiece (Kudo and Richardson 2018), but its
ids are not SentencePiece's: ``vocab.json`` maps each piece to the model's id (``</s>`` 0,
``<unk>`` 1, ..., ``<pad>`` last in opus-mt), and a piece that the vocabulary lacks is
``<unk>``. A model usually has two SentencePiece models, ``source.spm`` and ``target.spm``, over
one shared ``vocab.json`` (or a ``target_vocab.json`` beside it when the vocabularies are
separate). :class:`SentencePieceTokenizer` is one side: one SentencePiece model, one vocabulary.

Encoding equals ``transformers.MarianTokenizer`` (transformers 5.24), the reference that opus-mt
models are run with:

* no normalisation beyond the SentencePiece model's own rules (the ``.spm`` file carries them,
  NFKC for opus-mt). MarianTokenizer sets up sacremoses' punctuation normaliser when sacremoses
  is installed, but never calls it while encoding, so whether sacremoses is installed changes
  nothing, here or there;
* the strings of the special tokens (``</s>``, ``<unk>``, ``<pad>``) in the text are those
  tokens: the text is cut at them and each becomes its id, as transformers does (attnlab's
  BPE :class:`~attnlab.data.tokenizer.Tokenizer`, by contrast, reads them as ordinary text);
* a text (or a stretch of it after a special token) that starts with ``>>`` and contains
  ``<<`` begins with a language code, up to that ``<<`` (``>>deu<<``: multilingual models
  read it as the first token); the code is one token, its id when the vocabulary has it and
  ``<unk>`` otherwise, and SentencePiece cuts the rest;
* the source side appends ``</s>`` (:attr:`~SentencePieceTokenizer.add_eos`), as MarianTokenizer
  frames model inputs; the target side does not (attnlab frames decoder targets itself);
* nothing is cut at ``model_max_length`` (transformers cuts only when asked to).

Decoding equals ``MarianTokenizer.decode(ids, skip_special_tokens=True)``: special tokens are
dropped wherever they are (``<unk>`` too, as transformers does), the other pieces are joined
by the SentencePiece model, ``▁`` becomes a space, and the text is stripped. A tokenizer
decodes with its own model, the target's for the target side as Marian itself does;
transformers 5 decodes a shared vocabulary's ids with the source model, which writes the same
text (SentencePiece writes a piece it does not know as it is) unless the two models treat a
piece differently: a byte piece (``<0xC3>``) when only one of them has byte fallback, say.

Marian has no beginning-of-sentence token: its decoder starts from ``<pad>``, so
:attr:`~SentencePieceTokenizer.bos_id` is the pad id.

Files: :meth:`SentencePieceTokenizer.save` writes one JSON file (the SentencePiece model in
base64, the vocabulary in id order, the special tokens, ``add_eos``, ``model_max_length``),
marked ``"attnlab": {"format": "sentencepiece", "version": 1}`` at its top level, under the
names that :func:`attnlab.data.tokenizer.save_tokenizers` uses, so a model directory holds
either kind and :func:`attnlab.data.tokenizer.load_tokenizers` reads both. Marian's own files
are read with :func:`attnlab.data.marian_files.from_marian_dir` and written with
:func:`attnlab.data.marian_files.to_marian_dir`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sentencepiece

from .._checks import check_bool, check_type, is_int
from .._io import atomic_write, read_json
from ._ids import as_id_list, as_id_rows, check_id, check_texts
from .tokens import TokenizerProtocol

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAX_LENGTH_LIMIT",
    "SentencePieceTokenizer",
]

PathLike = str | os.PathLike[str]

#: The format marker's name and version, at the top level of a saved file under "attnlab".
FORMAT_NAME = "sentencepiece"
FORMAT_VERSION = 1
_MARKER_KEY = "attnlab"

#: MarianTokenizer's ``model_max_length`` for a directory whose config does not say.
DEFAULT_MAX_LENGTH = 512
#: The largest ``model_max_length`` kept: transformers' "no limit" is int(1e30).
MAX_LENGTH_LIMIT = 1 << 30
_SPACE_MARK = "▁"  # SentencePiece's word-boundary mark, U+2581


def _language_code(text: str) -> tuple[str | None, str]:
    """``(">>deu<<", " rest")`` for a text that starts with a language code, else
    ``(None, text)``. The code ends at the first ``<<`` after the leading ``>>``, whatever lies
    between, exactly as MarianTokenizer cuts it."""
    if text.startswith(">>"):
        end = text.find("<<")
        if end != -1:
            return text[: end + 2], text[end + 2 :]
    return None, text


def _clean_up_spaces(text: str) -> str:
    """transformers' ``clean_up_tokenization`` (applied when a Marian directory's config sets
    ``clean_up_tokenization_spaces``): the space before some punctuation and English clitics
    removed."""
    for spaced, joined in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(spaced, joined)
    return text


def _vocab_index(vocab: object) -> dict[str, int]:
    """Piece -> id of a vocabulary given as the piece of each id, checked: a sequence of
    distinct non-empty strings (errors name ``vocab`` and the position)."""
    if isinstance(vocab, (str, bytes)) or not isinstance(vocab, Sequence):
        raise TypeError(f"vocab: expected a sequence of piece strings, got {type(vocab).__name__}")
    index: dict[str, int] = {}
    for i, piece in enumerate(vocab):
        if not isinstance(piece, str) or not piece:
            raise TypeError(f"vocab[{i}]: expected a non-empty string, got {piece!r}")
        if piece in index:
            raise ValueError(f"vocab[{i}]: piece {piece!r} is already id {index[piece]}")
        index[piece] = i
    return index


def _saved_data(tok: SentencePieceTokenizer) -> dict[str, Any]:
    """What :meth:`SentencePieceTokenizer.save` writes (and its fingerprint hashes)."""
    return {
        _MARKER_KEY: {"format": FORMAT_NAME, "version": FORMAT_VERSION},
        "add_eos": tok.add_eos,
        "special_tokens": tok.special_tokens,
        "model_max_length": tok.model_max_length,
        "clean_up_tokenization_spaces": tok.clean_up_tokenization_spaces,
        "vocab": tok.vocab,
        "sentencepiece_model": base64.b64encode(tok.model).decode("ascii"),
    }


def _read_saved(path: Path) -> dict[str, Any]:
    """The JSON object of a file that :meth:`SentencePieceTokenizer.save` wrote, its format
    marker checked (errors name the file); the fields are checked by the constructor."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such tokenizer file")
    try:
        data = read_json(path)
    except ValueError as exc:  # "PATH: not UTF-8 text (...)", "PATH: invalid JSON at ...", ...
        what = str(exc).removeprefix(f"{path}: ")
        raise ValueError(f"{path}: not a tokenizer file ({what})") from None
    marker = data.get(_MARKER_KEY)
    expected = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION})
    if not isinstance(marker, dict) or marker.get("format") != FORMAT_NAME:
        raise ValueError(
            f"{path}: not a SentencePiece tokenizer file (its {_MARKER_KEY!r} field is "
            f"{json.dumps(marker)}, expected {expected})"
        )
    version = marker.get("version")
    if not is_int(version) or version < 1:
        raise ValueError(f"{path}: unreadable format version {version!r}, expected {expected}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path}: SentencePiece tokenizer format {version} was written by a newer "
            f"attnlab; this one reads format {FORMAT_VERSION} (upgrade attnlab to read it)"
        )
    return data


class SentencePieceTokenizer(TokenizerProtocol):
    """One side of a Marian tokenizer: a SentencePiece model, Marian's vocabulary over its
    pieces (piece -> id; not the SentencePiece ids) and the special tokens ``</s>`` (eos),
    ``<unk>`` and ``<pad>``, whose ids the vocabulary gives.

    It offers the interface of :class:`attnlab.data.tokenizer.Tokenizer`, so either serves a
    model: ids come out as plain lists of ints; :attr:`bos_id` is the pad id (Marian's decoder
    starts from ``<pad>``). Unlike the BPE tokenizer, :meth:`encode` of the source side
    appends ``</s>`` (:attr:`add_eos`), the framing Marian models are trained with. See the
    module docstring for what encoding and decoding do, exactly as transformers'
    ``MarianTokenizer``.

    Make one with :func:`~attnlab.data.marian_files.from_marian_dir` (both sides of a Marian
    model) or :meth:`load`.

    Example::

        src, tgt = from_marian_dir("opus-mt-en-de")
        src.encode("Two men.")      # [..., src.eos_id]
        tgt.decode(generated_ids)   # "Zwei Männer."
    """

    kind = "sentencepiece"

    def __init__(
        self,
        model: bytes,
        vocab: Sequence[str],
        *,
        add_eos: bool,
        eos_token: str = "</s>",
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        model_max_length: int = DEFAULT_MAX_LENGTH,
        clean_up_tokenization_spaces: bool = False,
    ) -> None:
        """
        Args:
            model: a serialized SentencePiece model (the bytes of a ``.spm`` file).
            vocab: Marian's vocabulary, the piece of each id in id order (``vocab[i]`` is the
                piece of id ``i``); it holds the three special tokens.
            add_eos: :meth:`encode` appends ``eos_token`` (True for a source side).
            eos_token, unk_token, pad_token: the special tokens' strings.
            model_max_length: the longest input the model takes, in tokens (kept and written
                back to Marian's config; :meth:`encode` never cuts).
            clean_up_tokenization_spaces: :meth:`decode` removes the space before ``.``,
                ``,``, ``!``, ``?`` and some English clitics, as transformers does when a
                Marian config sets it (opus-mt configs do not).

        Raises:
            TypeError / ValueError: an argument of the wrong type or value, named.
        """
        check_type(model, (bytes, bytearray), "model", "the bytes of a SentencePiece model")
        try:
            processor = sentencepiece.SentencePieceProcessor(model_proto=bytes(model))
        except RuntimeError:
            raise ValueError(
                f"model: not a serialized SentencePiece model ({len(model)} bytes that do not "
                f"parse)"
            ) from None
        index = _vocab_index(vocab)
        check_bool(add_eos, "add_eos", TypeError)
        specials = {"eos_token": eos_token, "unk_token": unk_token, "pad_token": pad_token}
        for name, token in specials.items():
            if not isinstance(token, str):
                raise TypeError(f"{name}: expected a string, got {token!r}")
            if token not in index:
                raise ValueError(f"{name}: {token!r} is not in the vocabulary")
        if len(set(specials.values())) != len(specials):
            raise ValueError(
                f"eos_token, unk_token, pad_token: expected 3 distinct, got {specials}"
            )
        if not is_int(model_max_length) or not 0 < model_max_length <= MAX_LENGTH_LIMIT:
            raise ValueError(
                f"model_max_length: expected an int in [1, {MAX_LENGTH_LIMIT}], got "
                f"{model_max_length!r}"
            )
        check_bool(clean_up_tokenization_spaces, "clean_up_tokenization_spaces", TypeError)
        self._model = bytes(model)
        self._spm = processor
        self._vocab = list(vocab)
        self._index = index
        self._add_eos = add_eos
        self._eos_token, self._unk_token, self._pad_token = eos_token, unk_token, pad_token
        self._eos_id, self._unk_id, self._pad_id = (index[t] for t in specials.values())
        self._special_names = {index[t]: t for t in specials.values()}
        self._model_max_length = model_max_length
        self._clean_up = clean_up_tokenization_spaces
        # transformers cuts text at the special tokens' strings, longest first where one
        # string starts another.
        ordered = sorted(specials.values(), key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(t) for t in ordered) + ")")

    # -- properties --------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of ids, special tokens included: the model's vocabulary size."""
        return len(self._vocab)

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def bos_id(self) -> int:
        """The pad id: Marian has no beginning-of-sentence token, its decoder starts from
        ``<pad>`` (transformers' ``decoder_start_token_id``)."""
        return self._pad_id

    @property
    def eos_id(self) -> int:
        return self._eos_id

    @property
    def unk_id(self) -> int:
        return self._unk_id

    @property
    def add_eos(self) -> bool:
        """True when :meth:`encode` appends ``</s>`` (a source side)."""
        return self._add_eos

    @property
    def special_tokens(self) -> dict[str, str]:
        """The special tokens' strings: ``{"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}``."""
        return {"eos": self._eos_token, "unk": self._unk_token, "pad": self._pad_token}

    @property
    def model_max_length(self) -> int:
        """The longest input the model takes, in tokens, as Marian's config states it."""
        return self._model_max_length

    @property
    def clean_up_tokenization_spaces(self) -> bool:
        return self._clean_up

    @property
    def model(self) -> bytes:
        """The serialized SentencePiece model (the bytes of its ``.spm`` file)."""
        return self._model

    @property
    def vocab(self) -> list[str]:
        """The piece of every id, in id order (a copy)."""
        return list(self._vocab)

    # -- encoding and decoding ---------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, ending with :attr:`eos_id` when :attr:`add_eos`; as
        ``MarianTokenizer(text)["input_ids"]`` (source) or ``(text_target=text)`` without its
        final ``</s>`` (target). An empty text is ``[eos_id]`` or ``[]``."""
        check_type(text, str, "text", "a string")
        return self._encode(text)

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for part in self._split.split(text):
            if not part:
                continue
            if self._split.fullmatch(part):  # a special token's string
                ids.append(self._index[part])
                continue
            code, rest = _language_code(part)
            if code is not None:
                ids.append(self._index.get(code, self._unk_id))
            pieces = self._spm.encode(rest, out_type=str)
            ids.extend(self._index.get(piece, self._unk_id) for piece in pieces)
        if self._add_eos:
            ids.append(self._eos_id)
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text, as :meth:`encode`."""
        return [self._encode(text) for text in check_texts(texts, "texts")]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (a sequence of ints or a 1-D tensor), special tokens dropped
        wherever they are; as ``MarianTokenizer.decode(ids, skip_special_tokens=True)``.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``, naming its position.
        """
        return self._decode(as_id_list(ids, len(self._vocab), "ids"))

    def _decode(self, ids: list[int]) -> str:
        pieces = [self._vocab[i] for i in ids if i not in self._special_names]
        # SentencePiece writes a piece it does not know as it is, marks included.
        text = self._spm.decode_pieces(pieces).replace(_SPACE_MARK, " ").strip()
        return _clean_up_spaces(text) if self._clean_up else text

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each row of ``batch`` (sequences of ints, or a 2-D tensor)."""
        return [self._decode(row) for row in as_id_rows(batch, len(self._vocab))]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` as readable text, one per id of ``encode(text)`` (so
        ``</s>`` last on a source side): ``▁`` shown as a space (``"▁men"`` -> ``" men"``),
        special tokens by their names. A piece that the vocabulary lacks shows as ``<unk>``."""
        check_type(text, str, "text", "a string")
        return self.labels(self._encode(text))

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The piece of each id as :meth:`tokens` shows it; special tokens by their names
        (``"</s>"``, ``"<pad>"``)."""
        ids = as_id_list(ids, len(self._vocab), "ids")
        return [
            self._special_names[i]
            if i in self._special_names
            else self._vocab[i].replace(_SPACE_MARK, " ")
            for i in ids
        ]

    def id_to_token(self, i: int) -> str:
        """The vocabulary's string of id ``i``, as Marian's ``vocab.json`` spells it
        (``"▁men"``, ``"</s>"``)."""
        return self._vocab[check_id(i, len(self._vocab), "i")]

    # -- files -------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """A SHA-256 hex digest of everything that decides how this tokenizer encodes and
        decodes: two tokenizers with the same fingerprint give the same ids and texts."""
        text = json.dumps(_saved_data(self), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def save(self, path: PathLike) -> None:
        """Write the tokenizer to ``path`` as one JSON file, atomically (a crash never leaves
        a half-written file under that name); the parent directory is created if needed."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_saved_data(self), indent=1, ensure_ascii=False) + "\n"
        atomic_write(path, lambda temp: Path(temp).write_text(text, encoding="utf-8"))

    @classmethod
    def load(cls, path: PathLike) -> SentencePieceTokenizer:
        """Read a tokenizer written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not one (not JSON, no ``attnlab`` marker, another format
                or a newer version, a missing or malformed field); the message names the file.
        """
        path = Path(path)
        data = _read_saved(path)
        try:
            model = base64.b64decode(data["sentencepiece_model"], validate=True)
            specials = data["special_tokens"]
            if not isinstance(specials, dict):
                raise TypeError("special_tokens: expected an object")
            return cls(
                model,
                data["vocab"],
                add_eos=data["add_eos"],
                eos_token=specials["eos"],
                unk_token=specials["unk"],
                pad_token=specials["pad"],
                model_max_length=data["model_max_length"],
                clean_up_tokenization_spaces=data.get("clean_up_tokenization_spaces", False),
            )
        except KeyError as exc:
            raise ValueError(f"{path}: not a valid tokenizer file (no {exc} field)") from None
        except (TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"{path}: not a valid tokenizer file ({exc})") from None

    def __repr__(self) -> str:
        return (
            f"SentencePieceTokenizer(vocab_size={len(self._vocab)}, add_eos={self._add_eos}, "
            f"spm_pieces={self._spm.get_piece_size()})"
        )

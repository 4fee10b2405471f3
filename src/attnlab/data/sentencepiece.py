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
are read with :func:`from_marian_dir` and written with :func:`to_marian_dir`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sentencepiece

from .._checks import is_int
from .._io import atomic_write
from .tokenizer import _as_id_list, _check_id, _check_texts

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MARIAN_CONFIG_FILE",
    "SentencePieceTokenizer",
    "from_marian_dir",
    "to_marian_dir",
]

PathLike = str | os.PathLike[str]

#: The format marker's name and version, at the top level of a saved file under "attnlab".
FORMAT_NAME = "sentencepiece"
FORMAT_VERSION = 1
_MARKER_KEY = "attnlab"

# Marian's file names, as transformers' MarianTokenizer reads and writes them.
SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
VOCAB_FILE, TARGET_VOCAB_FILE = "vocab.json", "target_vocab.json"
MARIAN_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
# MarianTokenizer's defaults, for a directory whose config does not say.
_DEFAULT_SPECIALS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
_DEFAULT_MAX_LENGTH = 512
_SPACE_MARK = "▁"  # SentencePiece's word-boundary mark, U+2581
_MAX_LENGTH_LIMIT = 1 << 30  # transformers' "no limit" is int(1e30); cap what is stored


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


class SentencePieceTokenizer:
    """One side of a Marian tokenizer: a SentencePiece model, Marian's vocabulary over its
    pieces (piece -> id; not the SentencePiece ids) and the special tokens ``</s>`` (eos),
    ``<unk>`` and ``<pad>``, whose ids the vocabulary gives.

    It offers the interface of :class:`attnlab.data.tokenizer.Tokenizer`, so either serves a
    model: ids come out as plain lists of ints; :attr:`bos_id` is the pad id (Marian's decoder
    starts from ``<pad>``). Unlike the BPE tokenizer, :meth:`encode` of the source side
    appends ``</s>`` (:attr:`add_eos`), the framing Marian models are trained with. See the
    module docstring for what encoding and decoding do, exactly as transformers'
    ``MarianTokenizer``.

    Make one with :func:`from_marian_dir` (both sides of a Marian model) or :meth:`load`.

    Example::

        src, tgt = from_marian_dir("opus-mt-en-de")
        src.encode("Two men.")      # [..., src.eos_id]
        tgt.decode(generated_ids)   # "Zwei Männer."
    """

    def __init__(
        self,
        model: bytes,
        vocab: Sequence[str],
        *,
        add_eos: bool,
        eos_token: str = "</s>",
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        model_max_length: int = _DEFAULT_MAX_LENGTH,
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
        if not isinstance(model, (bytes, bytearray)):
            raise TypeError(
                f"model: expected the bytes of a SentencePiece model, got {type(model).__name__}"
            )
        try:
            processor = sentencepiece.SentencePieceProcessor(model_proto=bytes(model))
        except RuntimeError:
            raise ValueError(
                f"model: not a serialized SentencePiece model ({len(model)} bytes that do not "
                f"parse)"
            ) from None
        if isinstance(vocab, (str, bytes)) or not isinstance(vocab, Sequence):
            raise TypeError(
                f"vocab: expected a sequence of piece strings, got {type(vocab).__name__}"
            )
        index: dict[str, int] = {}
        for i, piece in enumerate(vocab):
            if not isinstance(piece, str) or not piece:
                raise TypeError(f"vocab[{i}]: expected a non-empty string, got {piece!r}")
            if piece in index:
                raise ValueError(f"vocab[{i}]: piece {piece!r} is already id {index[piece]}")
            index[piece] = i
        if not isinstance(add_eos, bool):
            raise TypeError(f"add_eos: expected a bool, got {add_eos!r}")
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
        if not is_int(model_max_length) or not 0 < model_max_length <= _MAX_LENGTH_LIMIT:
            raise ValueError(
                f"model_max_length: expected an int in [1, {_MAX_LENGTH_LIMIT}], got "
                f"{model_max_length!r}"
            )
        if not isinstance(clean_up_tokenization_spaces, bool):
            raise TypeError(
                f"clean_up_tokenization_spaces: expected a bool, got "
                f"{clean_up_tokenization_spaces!r}"
            )
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
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, got {type(text).__name__}")
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
        return [self._encode(text) for text in _check_texts(texts, "texts")]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (a sequence of ints or a 1-D tensor), special tokens dropped
        wherever they are; as ``MarianTokenizer.decode(ids, skip_special_tokens=True)``.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``, naming its position.
        """
        return self._decode(_as_id_list(ids, len(self._vocab), "ids"))

    def _decode(self, ids: list[int]) -> str:
        pieces = [self._vocab[i] for i in ids if i not in self._special_names]
        # SentencePiece writes a piece it does not know as it is, marks included.
        text = self._spm.decode_pieces(pieces).replace(_SPACE_MARK, " ").strip()
        return _clean_up_spaces(text) if self._clean_up else text

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each row of ``batch`` (sequences of ints, or a 2-D tensor)."""
        if hasattr(batch, "tolist") and not isinstance(batch, (list, tuple)):
            batch = batch.tolist()
        if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
            raise TypeError(f"batch: expected a sequence of id sequences, got {type(batch)}")
        size = len(self._vocab)
        return [self._decode(_as_id_list(row, size, f"batch[{i}]")) for i, row in enumerate(batch)]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` as readable text, one per id of ``encode(text)`` (so
        ``</s>`` last on a source side): ``▁`` shown as a space (``"▁men"`` -> ``" men"``),
        special tokens by their names. A piece that the vocabulary lacks shows as ``<unk>``."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, got {type(text).__name__}")
        return self.labels(self._encode(text))

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The piece of each id as :meth:`tokens` shows it; special tokens by their names
        (``"</s>"``, ``"<pad>"``)."""
        ids = _as_id_list(ids, len(self._vocab), "ids")
        return [
            self._special_names[i]
            if i in self._special_names
            else self._vocab[i].replace(_SPACE_MARK, " ")
            for i in ids
        ]

    def id_to_token(self, i: int) -> str:
        """The vocabulary's string of id ``i``, as Marian's ``vocab.json`` spells it
        (``"▁men"``, ``"</s>"``)."""
        return self._vocab[_check_id(i, len(self._vocab), "i")]

    # -- files -------------------------------------------------------------------------------

    def _data(self) -> dict[str, Any]:
        return {
            _MARKER_KEY: {"format": FORMAT_NAME, "version": FORMAT_VERSION},
            "add_eos": self._add_eos,
            "special_tokens": self.special_tokens,
            "model_max_length": self._model_max_length,
            "clean_up_tokenization_spaces": self._clean_up,
            "vocab": self._vocab,
            "sentencepiece_model": base64.b64encode(self._model).decode("ascii"),
        }

    def fingerprint(self) -> str:
        """A SHA-256 hex digest of everything that decides how this tokenizer encodes and
        decodes: two tokenizers with the same fingerprint give the same ids and texts."""
        text = json.dumps(self._data(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def save(self, path: PathLike) -> None:
        """Write the tokenizer to ``path`` as one JSON file, atomically (a crash never leaves
        a half-written file under that name); the parent directory is created if needed."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self._data(), indent=1, ensure_ascii=False) + "\n"
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
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such tokenizer file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not a tokenizer file (not UTF-8: {exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a tokenizer file (not JSON: {exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a tokenizer file (not a JSON object)")
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


# -- Marian's own files ----------------------------------------------------------------------


def _write_bytes(content: bytes, path: str) -> None:
    Path(path).write_bytes(content)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a valid JSON file ({exc})") from None


def _token_string(value: object, path: Path, key: str) -> str:
    """A special token as a config writes it: a string, or transformers' AddedToken object."""
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str) or not value:
        raise ValueError(f"{path}: {key} is {json.dumps(value)}, expected a token string")
    return value


def _marian_vocab(path: Path) -> list[str]:
    """Marian's ``vocab.json`` (piece -> id) as the piece of each id, in id order."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a Marian tokenizer directory needs it)")
    data = _read_json(path)
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a JSON object mapping pieces to ids")
    vocab: list[str | None] = [None] * len(data)
    for piece, i in data.items():
        if not is_int(i) or not 0 <= i < len(data) or vocab[i] is not None:
            raise ValueError(
                f"{path}: piece {piece!r} has id {i!r}; expected the ids 0..{len(data) - 1}, "
                f"each once"
            )
        vocab[i] = piece
    return [piece for piece in vocab if piece is not None]


def _check_config_options(config: dict[str, Any], path: Path, specials: set[str]) -> None:
    """Refuse what a Marian config may ask of transformers that this tokenizer does not do:
    more special or added tokens than eos / unk / pad (transformers would cut text at them
    and drop them when decoding), special tokens that swallow spaces, sampled segmentation."""
    for key in ("additional_special_tokens", "extra_special_tokens"):
        if config.get(key):
            raise ValueError(
                f"{path}: {key} {json.dumps(config[key])[:80]} is not supported (attnlab reads "
                f"Marian tokenizers whose special tokens are eos, unk and pad)"
            )
    added = config.get("added_tokens_decoder") or {}
    if not isinstance(added, dict):
        raise ValueError(f"{path}: added_tokens_decoder is not a JSON object")
    for token in added.values():
        content = token.get("content") if isinstance(token, dict) else token
        flags = [
            k
            for k in ("lstrip", "rstrip", "single_word")
            if isinstance(token, dict) and token.get(k)
        ]
        if content not in specials or flags:
            raise ValueError(
                f"{path}: added token {json.dumps(token)} is not supported (attnlab reads "
                f"Marian tokenizers whose added tokens are eos, unk and pad, without "
                f"lstrip / rstrip / single_word)"
            )
    options = config.get("sp_model_kwargs") or {}
    if isinstance(options, dict) and options.get("enable_sampling"):
        raise ValueError(
            f"{path}: sp_model_kwargs enables sampling; attnlab segments text "
            f"deterministically (remove enable_sampling to read it)"
        )


def from_marian_dir(directory: PathLike) -> tuple[SentencePieceTokenizer, SentencePieceTokenizer]:
    """The ``(source, target)`` tokenizers of a Marian directory, as transformers'
    ``MarianTokenizer.from_pretrained(directory)`` reads it.

    Reads ``source.spm``, ``target.spm``, ``vocab.json`` (both sides' vocabulary, unless
    ``tokenizer_config.json`` says ``"separate_vocabs": true``: then ``target_vocab.json`` is
    the target's) and ``tokenizer_config.json`` (``eos_token``, ``unk_token``, ``pad_token``,
    ``model_max_length``, ``clean_up_tokenization_spaces``; ``special_tokens_map.json`` for a
    special token the config does not name). A missing config means MarianTokenizer's defaults:
    ``</s>``, ``<unk>``, ``<pad>``, 512, one shared vocabulary. The source appends ``</s>`` to
    its encodings, the target does not.

    Raises:
        FileNotFoundError: no such directory, or a required file missing (named).
        ValueError: a file that cannot be read as Marian's (named, with the reason), or a
            config that asks for what this tokenizer does not do: special or added tokens
            beyond eos / unk / pad, or sampled segmentation (``sp_model_kwargs``).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory (expected a Marian tokenizer)")
    config_path = directory / MARIAN_CONFIG_FILE
    config = _read_json(config_path) if config_path.is_file() else {}
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: expected a JSON object")
    map_path = directory / SPECIAL_TOKENS_MAP_FILE
    token_map = _read_json(map_path) if map_path.is_file() else {}
    if not isinstance(token_map, dict):
        raise ValueError(f"{map_path}: expected a JSON object")
    specials = {}
    for name, default in _DEFAULT_SPECIALS.items():
        key = f"{name}_token"
        if config.get(key) is not None:
            specials[key] = _token_string(config[key], config_path, key)
        elif token_map.get(key) is not None:
            specials[key] = _token_string(token_map[key], map_path, key)
        else:
            specials[key] = default
    _check_config_options(config, config_path, set(specials.values()))
    max_length = config.get("model_max_length", _DEFAULT_MAX_LENGTH)
    if isinstance(max_length, float) and max_length >= _MAX_LENGTH_LIMIT:
        max_length = _MAX_LENGTH_LIMIT  # transformers writes "no limit" as 1e30
    if not is_int(max_length) or max_length < 1:
        raise ValueError(f"{config_path}: model_max_length is {max_length!r}, expected an int >= 1")
    max_length = min(max_length, _MAX_LENGTH_LIMIT)
    separate = config.get("separate_vocabs", False)
    clean_up = config.get("clean_up_tokenization_spaces", False)
    for key, value in (("separate_vocabs", separate), ("clean_up_tokenization_spaces", clean_up)):
        if not isinstance(value, bool):
            raise ValueError(f"{config_path}: {key} is {json.dumps(value)}, expected true or false")

    models = []
    for name in (SOURCE_SPM, TARGET_SPM):
        if not (directory / name).is_file():
            raise FileNotFoundError(
                f"{directory / name}: no such file (a Marian tokenizer directory needs it)"
            )
        models.append((directory / name).read_bytes())
    src_vocab = _marian_vocab(directory / VOCAB_FILE)
    tgt_vocab = _marian_vocab(directory / TARGET_VOCAB_FILE) if separate else src_vocab
    sides = []
    for model, vocab, add_eos, spm_name, vocab_name in (
        (models[0], src_vocab, True, SOURCE_SPM, VOCAB_FILE),
        (models[1], tgt_vocab, False, TARGET_SPM, TARGET_VOCAB_FILE if separate else VOCAB_FILE),
    ):
        try:
            sides.append(
                SentencePieceTokenizer(
                    model,
                    vocab,
                    add_eos=add_eos,
                    **specials,
                    model_max_length=max_length,
                    clean_up_tokenization_spaces=clean_up,
                )
            )
        except ValueError as exc:
            # The model is the only argument whose fault lies in its own file.
            culprit = spm_name if str(exc).startswith("model:") else vocab_name
            raise ValueError(f"{directory / culprit}: {exc}") from None
    return sides[0], sides[1]


def to_marian_dir(
    directory: PathLike, src: SentencePieceTokenizer, tgt: SentencePieceTokenizer
) -> Path:
    """Write ``src`` and ``tgt`` as a Marian tokenizer directory that transformers'
    ``MarianTokenizer.from_pretrained`` loads and that tokenizes as they do (``directory`` is
    created if needed; existing files of these names are replaced). Returns ``directory``.

    Writes ``source.spm`` and ``target.spm`` (the bytes the tokenizers hold: a directory read
    by :func:`from_marian_dir` gets its files back byte for byte), ``vocab.json`` (plus
    ``target_vocab.json`` and ``"separate_vocabs": true`` when the two vocabularies differ),
    ``tokenizer_config.json`` and ``special_tokens_map.json``.

    Raises:
        TypeError: ``src`` or ``tgt`` is not a :class:`SentencePieceTokenizer`.
        ValueError: ``src`` does not append ``</s>`` (MarianTokenizer always does); their
            special tokens, ``model_max_length`` or ``clean_up_tokenization_spaces`` differ
            (Marian's config holds one of each).
    """
    for name, tok in (("src", src), ("tgt", tgt)):
        if not isinstance(tok, SentencePieceTokenizer):
            raise TypeError(f"{name}: expected a SentencePieceTokenizer, got {type(tok).__name__}")
    if not src.add_eos:
        raise ValueError(
            "src: add_eos is False, but MarianTokenizer appends </s> to every source (a "
            "source side has add_eos=True)"
        )
    for attribute in ("special_tokens", "model_max_length", "clean_up_tokenization_spaces"):
        if getattr(src, attribute) != getattr(tgt, attribute):
            raise ValueError(
                f"tgt: its {attribute} is {getattr(tgt, attribute)!r}, but src's is "
                f"{getattr(src, attribute)!r}; a Marian directory holds one"
            )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    separate = src.vocab != tgt.vocab
    specials = {f"{name}_token": token for name, token in src.special_tokens.items()}
    config = {
        "tokenizer_class": "MarianTokenizer",
        "separate_vocabs": separate,
        "model_max_length": src.model_max_length,
        "clean_up_tokenization_spaces": src.clean_up_tokenization_spaces,
        **specials,
    }
    files: dict[str, bytes] = {SOURCE_SPM: src.model, TARGET_SPM: tgt.model}
    vocabs = {VOCAB_FILE: src.vocab, **({TARGET_VOCAB_FILE: tgt.vocab} if separate else {})}
    for name, vocab in vocabs.items():
        mapping = {piece: i for i, piece in enumerate(vocab)}
        files[name] = json.dumps(mapping, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    files[MARIAN_CONFIG_FILE] = json.dumps(config, indent=2).encode("utf-8") + b"\n"
    files[SPECIAL_TOKENS_MAP_FILE] = json.dumps(specials, indent=2).encode("utf-8") + b"\n"
    for name, content in files.items():
        atomic_write(directory / name, functools.partial(_write_bytes, content))
    if not separate:
        # A target_vocab.json left from an earlier write would mislead a reader of the files.
        (directory / TARGET_VOCAB_FILE).unlink(missing_ok=True)
    return directory

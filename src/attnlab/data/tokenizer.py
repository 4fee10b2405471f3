"""Subword tokenizer: BPE over Unicode characters with byte fallback (Sennrich et al. 2016),
with Hugging Face ``tokenizers``.

The paper encodes sentences with byte-pair encoding (Vaswani et al. 2017, sec. 5.1: "a shared
source-target vocabulary of about 37000 tokens"). attnlab's BPE works on characters: every
character of the training text is a symbol of its own, and merges join symbols into subwords
inside a word (a pre-tokenizer splits text into words, runs of digits, runs of punctuation and
runs of white space, each with at most one leading space; merges never cross those pieces). A
subword is therefore always a whole number of characters, so a model cannot emit half of
"ö" by emitting one subword of it.

A character never seen in training is not ``<unk>``: it is spelled with byte tokens, the UTF-8
bytes of the character, one token each (``<0x00>`` .. ``<0xFF>``, always ids 4..259). So every
text can be encoded and decoding restores it exactly: ``decode(encode(text)) == text``, white
space included. There is no normalizer and no lowercasing, and no space is added in front of a
sentence.

Byte tokens never occur in the training data's own encoding, but a model can still generate
them, and a byte sequence it generates need not be valid UTF-8 (a lone lead byte before
``<eos>``, say). :meth:`Tokenizer.decode` never hides that error and never writes U+FFFD for
it: bytes that do not form a character are written as escapes, ``\\xc3``, as Python's
``errors="backslashreplace"`` does. A complete sequence of byte tokens decodes to its
character, as Hugging Face's ``ByteFallback`` decoder does.

The special tokens have fixed ids that match :class:`attnlab.TransformerConfig`'s defaults:
``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3. :meth:`Tokenizer.encode` never adds them,
and text that happens to contain ``"<eos>"`` is encoded as ordinary characters.

A tokenizer is saved as one JSON file in Hugging Face's ``tokenizer.json`` format (the
``tokenizers`` package loads it as it is), with attnlab's format stated inside its ``model``
object: ``"attnlab": {"format": "bpe-chars-byte-fallback", "version": 2}``. A file without that
field is format 1, the byte-level BPE (GPT-2's byte-level variant) that attnlab wrote before;
it still loads and encodes and decodes exactly as it did. A file whose layout is neither is
refused with a one-line reason. A translation model's tokenizers go in its directory with
:func:`save_tokenizers` (one file when the vocabulary is shared, one per side otherwise) and
come back with :func:`load_tokenizers`. A model directory may instead hold Marian's
SentencePiece tokenizers (:mod:`attnlab.data.sentencepiece`), under the same file names:
:func:`load_tokenizers` gives each file's kind, and both kinds offer the same interface.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import tokenizers as hf

from .._checks import check_type, is_int
from .._io import atomic_write, read_json
from .._rundir import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE, TOKENIZER_FILE
from ._ids import as_id_list, as_id_rows, check_id, check_texts
from .byte_tokens import BYTE_SYMBOLS, BYTE_TOKENS, SYMBOL_TO_BYTE, byte_level_backend, bytes_text
from .tokens import TokenizerProtocol, is_tokenizer, load_tokenizer

__all__ = [
    "BOS_ID",
    "BYTE_TOKENS",
    "EOS_ID",
    "FORMAT_VERSION",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "SRC_TOKENIZER_FILE",
    "TGT_TOKENIZER_FILE",
    "TOKENIZER_FILE",
    "UNK_ID",
    "Tokenizer",
    "load_tokenizer",
    "load_tokenizers",
    "save_tokenizers",
]

PathLike = str | os.PathLike

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0, 1, 2, 3
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

_FIRST_BYTE_ID = len(SPECIAL_TOKENS)
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + BYTE_SYMBOLS

#: The format that :meth:`Tokenizer.train` makes and :meth:`Tokenizer.save` states in the file.
FORMAT_VERSION = 2
_FORMAT_NAME = "bpe-chars-byte-fallback"
_FORMAT_KEY = "attnlab"  # inside the file's "model" object, which `tokenizers` reads past
_FORMATS = {1: "byte-level BPE", 2: "BPE over characters with byte fallback"}
# The pre-tokenizer's pieces: a word (letters with their combining marks), a run of digits or a
# run of other symbols, each with at most one leading space; or a run of white space. Isolated
# matches keep every character, so the pieces always concatenate back to the text.
_PIECES = r" ?[\p{L}\p{M}]+| ?\p{N}+| ?[^\s\p{L}\p{M}\p{N}]+|\s+(?!\S)|\s+"


def _char_backend() -> hf.Tokenizer:
    """An untrained format-2 tokenizer: BPE over characters, bytes for unseen ones."""
    backend = hf.Tokenizer(hf.models.BPE(unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = hf.pre_tokenizers.Split(hf.Regex(_PIECES), behavior="isolated")
    backend.decoder = hf.decoders.Sequence([hf.decoders.ByteFallback(), hf.decoders.Fuse()])
    return backend


def _layout(data: dict[str, Any]) -> dict[str, Any]:
    """What decides how a ``tokenizer.json`` encodes and decodes, apart from its vocabulary
    and merges: normalizer, pre-tokenizer, post-processor, decoder and the model's options."""
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    return {
        "normalizer": data.get("normalizer"),
        "pre_tokenizer": data.get("pre_tokenizer"),
        "post_processor": data.get("post_processor"),
        "decoder": data.get("decoder"),
        "model": {k: v for k, v in model.items() if k not in ("vocab", "merges", _FORMAT_KEY)},
    }


@functools.cache
def _expected_layouts() -> dict[int, dict[str, Any]]:
    return {
        1: _layout(json.loads(byte_level_backend().to_str())),
        2: _layout(json.loads(_char_backend().to_str())),
    }


def _layout_problem(backend: hf.Tokenizer, version: int) -> str | None:
    """Why ``backend`` is not a tokenizer of format ``version`` that this code reads exactly,
    or None. Hugging Face's own serialisation is compared, so defaults it fills in match."""
    layout = _layout(json.loads(backend.to_str()))
    expected = _expected_layouts()[version]
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        if layout[part] != expected[part]:
            actual, wanted = json.dumps(layout[part]), json.dumps(expected[part])
            return f"its {part} is {actual}, expected {wanted}"
    for option, value in expected["model"].items():
        if layout["model"].get(option) != value:
            actual = layout["model"].get(option)
            return f"its model's {option} is {json.dumps(actual)}, expected {json.dumps(value)}"
    if version == 2:
        for byte, token in enumerate(BYTE_TOKENS):
            actual = backend.token_to_id(token)
            if actual != _FIRST_BYTE_ID + byte:
                where = "is missing" if actual is None else f"has id {actual}"
                return f"byte token {token} {where}, expected id {_FIRST_BYTE_ID + byte}"
    return None


def _specials_problem(backend: hf.Tokenizer) -> str | None:
    """Why ``backend`` cannot serve as an attnlab tokenizer, or None."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        actual = backend.token_to_id(token)
        if actual != expected_id:
            where = "is missing" if actual is None else f"has id {actual}"
            return f"special token {token} {where}, expected id {expected_id}"
    return None


def _detect_format(backend: hf.Tokenizer) -> tuple[int | None, str]:
    """``(version, "")`` for a backend laid out as format 2 or 1, else ``(None, why not)``."""
    problems = {}
    for version in (FORMAT_VERSION, 1):
        problem = _layout_problem(backend, version)
        if problem is None:
            return version, ""
        problems[version] = problem
    return None, (
        f"not a tokenizer layout that attnlab reads exactly: as format 2 ({_FORMATS[2]}), "
        f"{problems[2]}; as format 1 ({_FORMATS[1]}), {problems[1]}"
    )


def _format_marker(model: dict[str, Any], path: Path) -> int | None:
    """The format version that a file's ``model`` object states (removed from it), or None."""
    marker = model.pop(_FORMAT_KEY, None)
    if marker is None:
        return None
    version = marker.get("version") if isinstance(marker, dict) else None
    if (
        not isinstance(marker, dict)
        or marker.get("format") != _FORMAT_NAME
        or not is_int(version)
        or version < 2
    ):
        raise ValueError(
            f"{path}: unreadable attnlab format field {json.dumps(marker)}; expected "
            f'{{"format": "{_FORMAT_NAME}", "version": {FORMAT_VERSION}}}'
        )
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path}: tokenizer format {version} was written by a newer attnlab; this one "
            f"reads formats 1 and {FORMAT_VERSION} (upgrade attnlab to read it)"
        )
    return version


class Tokenizer(TokenizerProtocol):
    """A BPE tokenizer with the special tokens ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2 and
    ``<unk>`` 3: BPE over characters with byte fallback (:attr:`format` 2, what :meth:`train`
    makes), or a byte-level BPE saved by an earlier attnlab (format 1).

    Make one with :meth:`train` or :meth:`load`. Ids come out as plain lists of ints:
    ``encode("Zwei Männer")`` -> ``[...]`` with no special tokens; frame them for the decoder
    with ``[tok.bos_id, *ids, tok.eos_id]``.

    Example::

        tok = Tokenizer.train(sentences, vocab_size=8000)
        ids = tok.encode("Two men are outside.")
        assert tok.decode(ids) == "Two men are outside."
        tok.save("run/tokenizer.json")
    """

    kind = "bpe"
    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    unk_id = UNK_ID
    #: :meth:`encode` appends no ``<eos>`` (nor any special token): callers frame the ids
    #: (:class:`attnlab.data.tokens.TokenizerProtocol`).
    add_eos = False

    def __init__(self, backend: hf.Tokenizer) -> None:
        """Wrap a Hugging Face ``tokenizers.Tokenizer`` laid out as attnlab's format 2 or 1,
        whose vocabulary starts with the four special tokens at ids 0..3 (use :meth:`train`
        or :meth:`load` rather than this)."""
        check_type(backend, hf.Tokenizer, "backend", "a tokenizers.Tokenizer")
        problem = _specials_problem(backend)
        if problem is not None:
            raise ValueError(f"backend: {problem}")
        version, problem = _detect_format(backend)
        if version is None:
            raise ValueError(f"backend: {problem}")
        # Text is data: a sentence containing "<eos>" must not turn into the end-of-sentence
        # id. Hugging Face does not save this setting, so it is set on every construction.
        backend.encode_special_tokens = True
        self._backend = backend
        self._format = version
        self._vocab_size = backend.get_vocab_size(with_added_tokens=True)
        # Format 2 decodes in Python (see `decode`): each id's text, or its byte for a byte
        # token, or None for a special token.
        self._pieces: list[str | int | None] = []
        if version == 2:
            byte_of = {token: byte for byte, token in enumerate(BYTE_TOKENS)}
            for i in range(self._vocab_size):
                piece = backend.id_to_token(i)
                self._pieces.append(None if i < len(SPECIAL_TOKENS) else byte_of.get(piece, piece))

    # -- making one ----------------------------------------------------------------------------

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2) -> Tokenizer:
        """Learn BPE merges over the characters of ``texts`` (train on the train split only).

        Every character of ``texts`` becomes a symbol of the vocabulary (so the encoding of
        training text never needs a byte token); merges fill the rest.

        Args:
            texts: the training sentences, any iterable of strings (read once).
            vocab_size: the largest vocabulary wanted: the 4 special tokens, the 256 byte
                tokens, every distinct character of ``texts`` and the merges. A small corpus
                may give fewer: see :attr:`vocab_size`.
            min_frequency: a pair of symbols must occur this often to be merged.

        Raises:
            ValueError: ``vocab_size`` below 260, or below 260 + the number of distinct
                characters in ``texts``; ``min_frequency`` below 1; no non-empty text to
                train on.
            TypeError: ``texts`` is a string, or yields something that is not a string.
        """
        if not is_int(vocab_size):
            raise TypeError(f"vocab_size: expected an int, got {vocab_size!r}")
        if vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(
                f"vocab_size: expected at least {MIN_VOCAB_SIZE} ({len(SPECIAL_TOKENS)} special "
                f"tokens + {BYTE_SYMBOLS} byte tokens), got {vocab_size}"
            )
        if not is_int(min_frequency):
            raise TypeError(f"min_frequency: expected an int, got {min_frequency!r}")
        if min_frequency < 1:
            raise ValueError(f"min_frequency: expected an int >= 1, got {min_frequency}")
        if isinstance(texts, str):
            raise TypeError("texts: expected an iterable of strings, got one str")
        check_type(texts, Iterable, "texts", "an iterable of strings")

        backend = _char_backend()
        trainer = hf.trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            # The byte tokens go in as "special" so that they take ids 4..259 whatever the
            # text; they are made ordinary vocabulary below.
            special_tokens=[*SPECIAL_TOKENS, *BYTE_TOKENS],
            show_progress=False,
        )
        seen = [0]  # non-empty texts
        characters: set[str] = set()

        def checked() -> Iterator[str]:
            for i, text in enumerate(texts):
                check_type(text, str, f"texts[{i}]", "a string")
                if text:
                    seen[0] += 1
                    characters.update(text)
                    yield text

        length = len(texts) if hasattr(texts, "__len__") else None
        backend.train_from_iterator(checked(), trainer=trainer, length=length)
        if seen[0] == 0:
            raise ValueError("texts: no non-empty text to train on")
        needed = MIN_VOCAB_SIZE + len(characters)
        if vocab_size < needed:
            raise ValueError(
                f"vocab_size: {vocab_size} cannot hold the {len(characters)} distinct characters "
                f"of texts beside the {MIN_VOCAB_SIZE} special and byte tokens; expected at "
                f"least {needed}"
            )
        # As added special tokens the byte tokens would be dropped by decoding and matched in
        # raw text by encoding; as plain vocabulary they are what byte fallback produces.
        data = json.loads(backend.to_str())
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in SPECIAL_TOKENS]
        return cls(hf.Tokenizer.from_str(json.dumps(data)))

    @classmethod
    def load(cls, path: PathLike) -> Tokenizer:
        """Read a tokenizer written by :meth:`save`: format 2, which the file states, or a
        byte-level (format 1) file of an earlier attnlab, which loads and works as it did.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not a tokenizer (not JSON, truncated, another format), its
                special tokens are not ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, it
                states a format this attnlab does not read, or its layout is not the one
                attnlab reads exactly (the message says which part differs).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such tokenizer file")
        try:
            data = read_json(path)
        except ValueError as exc:  # "PATH: not UTF-8 text (...)", "PATH: invalid JSON at ..."
            what = str(exc).removeprefix(f"{path}: ")
            raise ValueError(f"{path}: not a tokenizer file ({what})") from None
        if not isinstance(data.get("model"), dict):
            raise ValueError(f'{path}: not a valid tokenizer.json file (no "model" object)')
        stated = _format_marker(data["model"], path)
        try:
            backend = hf.Tokenizer.from_str(json.dumps(data))
        except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
            raise ValueError(f"{path}: not a valid tokenizer.json file ({exc})") from None
        problem = _specials_problem(backend)
        if problem is not None:
            raise ValueError(f"{path}: {problem}")
        if stated is not None:
            problem = _layout_problem(backend, stated)
            if problem is not None:
                raise ValueError(f"{path}: states attnlab tokenizer format {stated}, but {problem}")
        else:
            version, problem = _detect_format(backend)
            if version is None:
                raise ValueError(f"{path}: {problem}")
        return cls(backend)

    def save(self, path: PathLike) -> None:
        """Write the tokenizer to ``path`` as one JSON file (Hugging Face ``tokenizer.json``
        format; format 2 states itself in its ``model`` object), atomically: a crash never
        leaves a half-written file under that name. The parent directory is created if
        needed. A format-1 tokenizer is written as an earlier attnlab wrote it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._format == 1:
            text = self._backend.to_str(pretty=True) + "\n"
        else:
            data = json.loads(self._backend.to_str())
            model = data["model"]
            marker = {"format": _FORMAT_NAME, "version": self._format}
            data["model"] = {"type": model.pop("type"), _FORMAT_KEY: marker, **model}
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        atomic_write(path, lambda temp: Path(temp).write_text(text, encoding="utf-8"))

    # -- using one -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of ids, special tokens included: the model's ``vocab_size``."""
        return self._vocab_size

    @property
    def format(self) -> int:
        """2: BPE over characters with byte fallback; 1: byte-level BPE (an older file)."""
        return self._format

    @property
    def backend(self) -> hf.Tokenizer:
        """The underlying Hugging Face tokenizer (read it; changing it voids the guarantees).
        Its own ``decode`` writes U+FFFD for bytes that are not valid UTF-8, where
        :meth:`decode` writes escapes."""
        return self._backend

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without special tokens."""
        check_type(text, str, "text", "a string")
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text, as :meth:`encode`; runs in parallel threads."""
        texts = check_texts(texts, "texts")
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (a sequence of ints or a 1-D tensor). Special tokens are
        dropped wherever they are (decoding does not stop at ``<eos>``).

        Consecutive byte tokens (special tokens between them dropped first) decode as UTF-8;
        a byte that is not part of a valid character comes out as an escape, ``\\xc3``, never
        as U+FFFD and never silently dropped. A model that emits a lone lead byte made an
        error, and the text shows it.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``, naming its position.
        """
        ids = as_id_list(ids, self._vocab_size, "ids")
        if self._format == 1:
            return self._backend.decode(ids, skip_special_tokens=True)
        return self._decode_pieces(ids)

    def _decode_pieces(self, ids: list[int]) -> str:
        parts: list[str] = []
        pending = bytearray()  # a run of byte tokens
        for i in ids:
            piece = self._pieces[i]
            if piece is None:  # a special token
                continue
            if isinstance(piece, int):
                pending.append(piece)
                continue
            if pending:
                parts.append(bytes_text(pending))
                pending.clear()
            parts.append(piece)
        if pending:
            parts.append(bytes_text(pending))
        return "".join(parts)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each row of ``batch`` (sequences of ints, or a 2-D tensor)."""
        rows = as_id_rows(batch, self._vocab_size)
        if self._format == 1:
            return self._backend.decode_batch(rows, skip_special_tokens=True)
        return [self._decode_pieces(row) for row in rows]

    def tokens(self, text: str) -> list[str]:
        """The subword pieces of ``text`` as readable text, one per id of ``encode(text)``:
        labels for pictures. Spaces are kept (``"Two men"`` -> ``["Two", " men"]``), so
        ``"".join(tokens(text)) == text`` unless a piece holds part of a multi-byte
        character (a byte token); such bytes are shown escaped (``"\\xc3"``)."""
        check_type(text, str, "text", "a string")
        return self.labels(self.encode(text))

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The subword piece of each id, as :meth:`tokens` shows it; special tokens appear as
        their names (``"<eos>"``). For labelling generated ids, which need not be the
        segmentation that :meth:`encode` would give their text."""
        ids = as_id_list(ids, self._vocab_size, "ids")
        return [SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else self._readable(i) for i in ids]

    def _readable(self, i: int) -> str:
        if self._format == 1:
            piece = self._backend.id_to_token(i)
            return bytes_text(bytes(SYMBOL_TO_BYTE[symbol] for symbol in piece))
        piece = self._pieces[i]
        return bytes_text(bytes([piece])) if isinstance(piece, int) else piece

    def id_to_token(self, i: int) -> str:
        """The vocabulary's string of id ``i``, as the saved file spells it (format 2:
        ``" men"``, ``"<0xC3>"``; format 1: GPT-2's byte symbols, ``"Ġmen"``)."""
        token = self._backend.id_to_token(check_id(i, self._vocab_size, "i"))
        if token is None:  # a hole in the ids: the file loads, but the export would be wrong
            raise ValueError(f"i: this tokenizer has no token for id {i}")
        return str(token)

    def fingerprint(self) -> str:
        """A SHA-256 hex digest of the tokenizer's Hugging Face serialisation (everything that
        decides how it encodes and decodes): equal for tokenizers that work alike."""
        return hashlib.sha256(self._backend.to_str().encode("utf-8")).hexdigest()

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self._vocab_size}, format={self._format})"


def save_tokenizers(
    directory: PathLike,
    src: TokenizerProtocol,
    tgt: TokenizerProtocol | None = None,
) -> None:
    """Write a translation model's tokenizers into ``directory`` (created if needed), each a
    BPE :class:`Tokenizer` or a :class:`~attnlab.data.sentencepiece.SentencePieceTokenizer`.

    ``tgt`` None (or the same object as ``src``) means a joint vocabulary, shared by both
    sides as in the paper: one file, ``tokenizer.json``. Otherwise ``src_tokenizer.json`` and
    ``tgt_tokenizer.json`` (a Marian model's two SentencePiece models over one vocabulary are
    two tokenizers). Files of the other layout left from an earlier save are removed, so
    :func:`load_tokenizers` never sees both.
    """
    if not is_tokenizer(src):
        raise TypeError(
            f"src: expected a Tokenizer or SentencePieceTokenizer, got {type(src).__name__}"
        )
    if tgt is not None and not is_tokenizer(tgt):
        raise TypeError(
            f"tgt: expected a Tokenizer, SentencePieceTokenizer or None, got {type(tgt).__name__}"
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if tgt is None or tgt is src:
        src.save(directory / TOKENIZER_FILE)
        stale = (SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE)
    else:
        src.save(directory / SRC_TOKENIZER_FILE)
        tgt.save(directory / TGT_TOKENIZER_FILE)
        stale = (TOKENIZER_FILE,)
    for name in stale:
        (directory / name).unlink(missing_ok=True)


def load_tokenizers(directory: PathLike) -> tuple[TokenizerProtocol, TokenizerProtocol]:
    """Read the tokenizers that :func:`save_tokenizers` wrote: ``(src, tgt)``, each of the
    kind its file holds (:func:`load_tokenizer`). With a joint vocabulary both are the same
    object.

    Raises:
        FileNotFoundError: the directory holds neither layout, or only one of the two
            per-side files (the message names what is missing).
        ValueError: both layouts are present, or a file is not a valid tokenizer.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory (expected tokenizer files)")
    joint = directory / TOKENIZER_FILE
    sides = (directory / SRC_TOKENIZER_FILE, directory / TGT_TOKENIZER_FILE)
    present = [path.is_file() for path in sides]
    if joint.is_file():
        if any(present):
            raise ValueError(
                f"{directory}: holds both {TOKENIZER_FILE} (joint vocabulary) and per-side "
                f"tokenizer files; remove the ones that do not belong to the model"
            )
        tokenizer = load_tokenizer(joint)
        return tokenizer, tokenizer
    if not any(present):
        raise FileNotFoundError(
            f"{directory}: no {TOKENIZER_FILE}, nor {SRC_TOKENIZER_FILE} and {TGT_TOKENIZER_FILE}"
        )
    if not all(present):
        missing = sides[present.index(False)]
        raise FileNotFoundError(f"{missing}: no such tokenizer file (its other side exists)")
    return load_tokenizer(sides[0]), load_tokenizer(sides[1])

"""Subword tokenizer: byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant) with
Hugging Face ``tokenizers``.

The paper encodes sentences with byte-pair encoding (Vaswani et al. 2017, sec. 5.1: "a shared
source-target vocabulary of about 37000 tokens"). Byte-level BPE starts from the 256 byte
values, so every text can be encoded (``<unk>`` never occurs) and decoding restores it exactly:
``decode(encode(text)) == text``, white space included. There is no normalizer and no
lowercasing, and no space is added in front of a sentence.

The special tokens have fixed ids that match :class:`attnlab.TransformerConfig`'s defaults:
``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3. :meth:`Tokenizer.encode` never adds them,
and text that happens to contain ``"<eos>"`` is encoded as ordinary characters.

A tokenizer is saved as one JSON file in Hugging Face's ``tokenizer.json`` format; a
translation model's tokenizers go in its directory with :func:`save_tokenizers` (one file when
the vocabulary is shared, one per side otherwise) and come back with :func:`load_tokenizers`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import tokenizers as hf

from .._io import atomic_write

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "SRC_TOKENIZER_FILE",
    "TGT_TOKENIZER_FILE",
    "TOKENIZER_FILE",
    "UNK_ID",
    "Tokenizer",
    "load_tokenizers",
    "save_tokenizers",
]

PathLike = str | os.PathLike

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0, 1, 2, 3
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
TOKENIZER_FILE = "tokenizer.json"  # a joint (shared) vocabulary
SRC_TOKENIZER_FILE = "src_tokenizer.json"
TGT_TOKENIZER_FILE = "tgt_tokenizer.json"

_BYTE_SYMBOLS = 256
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + _BYTE_SYMBOLS


def _byte_symbols() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable character that stands for each byte
    in a token string -> the byte. Printable Latin-1 bytes stand for themselves; the others
    (control characters, space, ...) are shifted to U+0100 and up (space is "Ġ")."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    symbols = {chr(b): b for b in printable}
    shifted = (b for b in range(_BYTE_SYMBOLS) if b not in set(printable))
    symbols.update({chr(_BYTE_SYMBOLS + i): b for i, b in enumerate(shifted)})
    return symbols


_SYMBOL_TO_BYTE = _byte_symbols()


def _as_id_list(ids: object, vocab_size: int, name: str) -> list[int]:
    """``ids`` (a sequence of ints, or a 1-D tensor / array) as a list, each checked to be a
    valid id; errors name the argument and the position."""
    if hasattr(ids, "tolist") and not isinstance(ids, (list, tuple)):
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(f"{name}: expected a sequence of token ids, got {type(ids).__name__}")
    for position, token in enumerate(ids):
        if not isinstance(token, int) or isinstance(token, bool):
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


def _check_texts(texts: object, name: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"{name}: expected a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}]: expected a string, got {type(text).__name__}")
    return list(texts)


def _specials_problem(backend: hf.Tokenizer) -> str | None:
    """Why ``backend`` cannot serve as an attnlab tokenizer, or None."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        actual = backend.token_to_id(token)
        if actual != expected_id:
            where = "is missing" if actual is None else f"has id {actual}"
            return f"special token {token} {where}, expected id {expected_id}"
    return None


class Tokenizer:
    """A byte-level BPE tokenizer with the special tokens ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2
    and ``<unk>`` 3.

    Make one with :meth:`train` or :meth:`load`. Ids come out as plain lists of ints:
    ``encode("Zwei Männer")`` -> ``[...]`` with no special tokens; frame them for the decoder
    with ``[tok.bos_id, *ids, tok.eos_id]``.

    Example::

        tok = Tokenizer.train(sentences, vocab_size=8000)
        ids = tok.encode("Two men are outside.")
        assert tok.decode(ids) == "Two men are outside."
        tok.save("run/tokenizer.json")
    """

    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __init__(self, backend: hf.Tokenizer) -> None:
        """Wrap a Hugging Face ``tokenizers.Tokenizer`` whose vocabulary starts with the four
        special tokens at ids 0..3 (use :meth:`train` or :meth:`load` rather than this)."""
        if not isinstance(backend, hf.Tokenizer):
            raise TypeError(
                f"backend: expected a tokenizers.Tokenizer, got {type(backend).__name__}"
            )
        problem = _specials_problem(backend)
        if problem is not None:
            raise ValueError(f"backend: {problem}")
        # Text is data: a sentence containing "<eos>" must not turn into the end-of-sentence
        # id. Hugging Face does not save this setting, so it is set on every construction.
        backend.encode_special_tokens = True
        self._backend = backend
        self._vocab_size = backend.get_vocab_size(with_added_tokens=True)

    # -- making one ----------------------------------------------------------------------------

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2) -> Tokenizer:
        """Learn byte-level BPE merges from ``texts`` (train on the train split only).

        Args:
            texts: the training sentences, any iterable of strings (read once).
            vocab_size: the largest vocabulary wanted, specials and the 256 byte symbols
                included (so at least 260). A small corpus may give fewer: see
                :attr:`vocab_size`.
            min_frequency: a pair of symbols must occur this often to be merged.

        Raises:
            ValueError: ``vocab_size`` below 260 or ``min_frequency`` below 1; no non-empty
                text to train on.
            TypeError: ``texts`` is a string, or yields something that is not a string.
        """
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
            raise TypeError(f"vocab_size: expected an int, got {vocab_size!r}")
        if vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(
                f"vocab_size: expected at least {MIN_VOCAB_SIZE} ({len(SPECIAL_TOKENS)} special "
                f"tokens + {_BYTE_SYMBOLS} byte symbols), got {vocab_size}"
            )
        if not isinstance(min_frequency, int) or isinstance(min_frequency, bool):
            raise TypeError(f"min_frequency: expected an int, got {min_frequency!r}")
        if min_frequency < 1:
            raise ValueError(f"min_frequency: expected an int >= 1, got {min_frequency}")
        if isinstance(texts, str):
            raise TypeError("texts: expected an iterable of strings, got one str")
        if not isinstance(texts, Iterable):
            raise TypeError(f"texts: expected an iterable of strings, got {type(texts).__name__}")

        backend = hf.Tokenizer(hf.models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = hf.decoders.ByteLevel()
        trainer = hf.trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        seen = [0]  # non-empty texts

        def checked() -> Iterator[str]:
            for i, text in enumerate(texts):
                if not isinstance(text, str):
                    raise TypeError(f"texts[{i}]: expected a string, got {type(text).__name__}")
                if text:
                    seen[0] += 1
                    yield text

        length = len(texts) if hasattr(texts, "__len__") else None
        backend.train_from_iterator(checked(), trainer=trainer, length=length)
        if seen[0] == 0:
            raise ValueError("texts: no non-empty text to train on")
        return cls(backend)

    @classmethod
    def load(cls, path: PathLike) -> Tokenizer:
        """Read a tokenizer written by :meth:`save` (any Hugging Face ``tokenizer.json`` with
        the four special tokens at ids 0..3 loads).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not a tokenizer (not JSON, truncated, another format), or
                its special tokens are not ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such tokenizer file")
        try:
            backend = hf.Tokenizer.from_str(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not a tokenizer file (not UTF-8: {exc.reason})") from None
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise ValueError(f"{path}: not a valid tokenizer.json file ({exc})") from None
        problem = _specials_problem(backend)
        if problem is not None:
            raise ValueError(f"{path}: {problem}")
        return cls(backend)

    def save(self, path: PathLike) -> None:
        """Write the tokenizer to ``path`` as one JSON file (Hugging Face ``tokenizer.json``
        format), atomically: a crash never leaves a half-written file under that name. The
        parent directory is created if needed."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self._backend.to_str(pretty=True) + "\n"
        atomic_write(path, lambda temp: Path(temp).write_text(text, encoding="utf-8"))

    # -- using one -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of ids, special tokens included: the model's ``vocab_size``."""
        return self._vocab_size

    @property
    def backend(self) -> hf.Tokenizer:
        """The underlying Hugging Face tokenizer (read it; changing it voids the guarantees)."""
        return self._backend

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without special tokens."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, got {type(text).__name__}")
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text, as :meth:`encode`; runs in parallel threads."""
        texts = _check_texts(texts, "texts")
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (a sequence of ints or a 1-D tensor). Special tokens are
        dropped wherever they are (decoding does not stop at ``<eos>``).

        Raises:
            ValueError: an id outside ``[0, vocab_size)``, naming its position.
        """
        return self._backend.decode(
            _as_id_list(ids, self._vocab_size, "ids"), skip_special_tokens=True
        )

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each row of ``batch`` (sequences of ints, or a 2-D tensor)."""
        if hasattr(batch, "tolist") and not isinstance(batch, (list, tuple)):
            batch = batch.tolist()
        if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
            raise TypeError(f"batch: expected a sequence of id sequences, got {type(batch)}")
        rows = [_as_id_list(ids, self._vocab_size, f"batch[{i}]") for i, ids in enumerate(batch)]
        return self._backend.decode_batch(rows, skip_special_tokens=True)

    def tokens(self, text: str) -> list[str]:
        """The subword pieces of ``text`` as readable text, one per id of ``encode(text)``:
        labels for pictures. Spaces are kept (``"Two men"`` -> ``["Two", " men"]``), so
        ``"".join(tokens(text)) == text`` unless a piece holds part of a multi-byte
        character; such bytes are shown escaped (``"\\xc3"``)."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, got {type(text).__name__}")
        pieces = self._backend.encode(text, add_special_tokens=False).tokens
        return [self._readable(piece) for piece in pieces]

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The subword piece of each id, as :meth:`tokens` shows it; special tokens appear as
        their names (``"<eos>"``). For labelling generated ids, which need not be the
        segmentation that :meth:`encode` would give their text."""
        ids = _as_id_list(ids, self._vocab_size, "ids")
        return [
            SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else self._readable(piece)
            for i, piece in zip(ids, map(self._backend.id_to_token, ids), strict=True)
        ]

    @staticmethod
    def _readable(piece: str) -> str:
        raw = bytes(_SYMBOL_TO_BYTE[symbol] for symbol in piece)
        return raw.decode("utf-8", errors="backslashreplace")

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self._vocab_size})"


def save_tokenizers(directory: PathLike, src: Tokenizer, tgt: Tokenizer | None = None) -> None:
    """Write a translation model's tokenizers into ``directory`` (created if needed).

    ``tgt`` None (or the same object as ``src``) means a joint vocabulary, shared by both
    sides as in the paper: one file, ``tokenizer.json``. Otherwise ``src_tokenizer.json`` and
    ``tgt_tokenizer.json``. Files of the other layout left from an earlier save are removed,
    so :func:`load_tokenizers` never sees both.
    """
    if not isinstance(src, Tokenizer):
        raise TypeError(f"src: expected a Tokenizer, got {type(src).__name__}")
    if tgt is not None and not isinstance(tgt, Tokenizer):
        raise TypeError(f"tgt: expected a Tokenizer or None, got {type(tgt).__name__}")
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


def load_tokenizers(directory: PathLike) -> tuple[Tokenizer, Tokenizer]:
    """Read the tokenizers that :func:`save_tokenizers` wrote: ``(src, tgt)``. With a joint
    vocabulary both are the same object.

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
        tokenizer = Tokenizer.load(joint)
        return tokenizer, tokenizer
    if not any(present):
        raise FileNotFoundError(
            f"{directory}: no {TOKENIZER_FILE}, nor {SRC_TOKENIZER_FILE} and {TGT_TOKENIZER_FILE}"
        )
    if not all(present):
        missing = sides[present.index(False)]
        raise FileNotFoundError(f"{missing}: no such tokenizer file (its other side exists)")
    return Tokenizer.load(sides[0]), Tokenizer.load(sides[1])

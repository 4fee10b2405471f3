"""Marian's own tokenizer files: a directory as transformers' ``MarianTokenizer`` reads and
writes it (``source.spm``, ``target.spm``, ``vocab.json``, ``tokenizer_config.json``, ...),
read into the two :class:`~attnlab.data.sentencepiece.SentencePieceTokenizer` sides of a
Marian model with :func:`from_marian_dir` and written back with :func:`to_marian_dir`.
(attnlab's own one-file format is :meth:`SentencePieceTokenizer.save
<attnlab.data.sentencepiece.SentencePieceTokenizer.save>`.)
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from .._checks import is_int
from .._io import atomic_write, read_json
from .sentencepiece import DEFAULT_MAX_LENGTH, MAX_LENGTH_LIMIT, SentencePieceTokenizer

__all__ = [
    "MARIAN_CONFIG_FILE",
    "SOURCE_SPM",
    "SPECIAL_TOKENS_MAP_FILE",
    "TARGET_SPM",
    "TARGET_VOCAB_FILE",
    "VOCAB_FILE",
    "from_marian_dir",
    "to_marian_dir",
]

PathLike = str | os.PathLike[str]

# Marian's file names, as transformers' MarianTokenizer reads and writes them.
SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
VOCAB_FILE, TARGET_VOCAB_FILE = "vocab.json", "target_vocab.json"
MARIAN_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
# MarianTokenizer's defaults, for a directory whose config does not say.
_DEFAULT_SPECIALS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}


def _write_bytes(content: bytes, path: str) -> None:
    Path(path).write_bytes(content)


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
    data = read_json(path)
    if not data:
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
    config = read_json(config_path) if config_path.is_file() else {}
    map_path = directory / SPECIAL_TOKENS_MAP_FILE
    token_map = read_json(map_path) if map_path.is_file() else {}
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
    max_length = config.get("model_max_length", DEFAULT_MAX_LENGTH)
    if isinstance(max_length, float) and max_length >= MAX_LENGTH_LIMIT:
        max_length = MAX_LENGTH_LIMIT  # transformers writes "no limit" as 1e30
    if not is_int(max_length) or max_length < 1:
        raise ValueError(f"{config_path}: model_max_length is {max_length!r}, expected an int >= 1")
    max_length = min(max_length, MAX_LENGTH_LIMIT)
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
        if getattr(tok, "kind", None) != "sentencepiece":
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

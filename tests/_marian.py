"""Marian (opus-mt) tokenizer directories built in the test, from SentencePiece models trained
on a slice of Multi30K, or on the numbers task's sentences where no Multi30K may be needed
(``corpus="numbers"``: made by num2words, always there): what
``transformers.MarianTokenizer.from_pretrained`` reads, laid out as the Helsinki-NLP opus-mt
repositories have it (``source.spm``, ``target.spm``, ``vocab.json`` [+ ``target_vocab.json``],
``tokenizer_config.json``, ``special_tokens_map.json``). Shared by the tokenizer tests, the
model parity tests and the docs examples' stand-in opus-mt model.

The vocabulary is Marian's, not SentencePiece's: ``</s>`` 0, ``<unk>`` 1, any language codes
(``>>deu<<``), then the pieces, ``<pad>`` last; so a piece's Marian id is never its spm id.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
from collections.abc import Sequence
from pathlib import Path

from _paths import MULTI30K_DIR

#: Lines of each training side (Multi30K's, or the numbers task's) that the SentencePiece
#: models learn from.
TRAIN_LINES = 3000
#: What the SentencePiece models can learn from: Multi30K (tests marked needs_multi30k) or
#: the numbers task (no data needed).
CORPORA = ("multi30k", "numbers")
EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
# SentencePiece's own special pieces, which Marian's vocabulary spells its own way.
_SPM_SPECIALS = ("<unk>", "<s>", "</s>")


def multi30k_lines(lang: str, count: int = TRAIN_LINES, split: str = "train") -> list[str]:
    """The first ``count`` lines of Multi30K's ``split`` in ``lang`` ("en", "de", "fr"). The
    caller is marked ``needs_multi30k`` (tests/_paths.py), which skips it without the files."""
    with gzip.open(MULTI30K_DIR / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(count), f, strict=False)]


def numbers_lines(lang: str, count: int = TRAIN_LINES) -> list[str]:
    """The first ``count`` training sentences of the numbers task written in ``lang`` ("three
    hundred and forty-two", "dreihundertzweiundvierzig"): made by num2words, needing no data."""
    from attnlab.data.corpora import numbers

    other = "de" if lang == "en" else "en"
    return [source for source, _ in numbers(src_lang=lang, tgt_lang=other)["train"][:count]]


@functools.cache
def train_spm(
    lang: str, vocab_size: int = 1000, lines: int = TRAIN_LINES, corpus: str = "multi30k"
) -> bytes:
    """A SentencePiece unigram model (serialized) of ``vocab_size`` pieces trained on the first
    ``lines`` training lines in ``lang`` of ``corpus`` (one of :data:`CORPORA`); the same bytes
    for the same arguments within a test session (cached), well under a second to train. The
    numbers task's few words hold fewer pieces than that (63 in English): its model has as
    many as they hold, up to ``vocab_size``."""
    import sentencepiece as spm

    if corpus not in CORPORA:
        raise ValueError(f"corpus: expected one of {CORPORA}, got {corpus!r}")
    text = multi30k_lines(lang, lines) if corpus == "multi30k" else numbers_lines(lang, lines)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        hard_vocab_limit=corpus == "multi30k",
    )
    return model.getvalue()


def _pieces(model: bytes) -> list[str]:
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    return [p for p in pieces if p not in _SPM_SPECIALS]


def marian_vocab(
    piece_lists: Sequence[Sequence[str]],
    language_codes: Sequence[str] = (),
    omit_every: int | None = None,
) -> dict[str, int]:
    """Marian's vocabulary over the pieces of one or more spm models: ``</s>`` 0, ``<unk>`` 1,
    the language codes, each piece once (in order of first appearance), ``<pad>`` last.
    ``omit_every=n`` leaves out every n-th piece, as a Marian vocabulary built from its
    training data lacks spm pieces that the data never used (they encode as ``<unk>``)."""
    tokens = [EOS, UNK, *language_codes]
    seen = set(tokens)
    count = 0
    for pieces in piece_lists:
        for piece in pieces:
            if piece in seen:
                continue
            seen.add(piece)
            count += 1
            if omit_every is not None and count % omit_every == 0:
                continue
            tokens.append(piece)
    tokens.append(PAD)
    return {token: i for i, token in enumerate(tokens)}


def write_marian_tokenizer_dir(
    directory: str | Path,
    *,
    separate_vocabs: bool,
    source_lang: str = "en",
    target_lang: str = "de",
    vocab_size: int = 1000,
    language_codes: Sequence[str] = (),
    omit_every: int | None = None,
    model_max_length: int = 512,
    corpus: str = "multi30k",
) -> Path:
    """Write a Marian tokenizer directory into ``directory`` (created if needed) and return it.

    ``source.spm`` / ``target.spm`` are unigram models of ``vocab_size`` pieces trained on the
    ``source_lang`` / ``target_lang`` sides of ``corpus`` (Multi30K, or ``"numbers"``: the
    numbers task, for a directory that needs no data; see :func:`train_spm`). With
    ``separate_vocabs`` False one ``vocab.json`` covers the pieces of both models (as most
    opus-mt models have it); with True, ``vocab.json`` holds the source pieces and
    ``target_vocab.json`` the target pieces, and ``tokenizer_config.json`` says
    ``"separate_vocabs": true``. ``language_codes`` (such as ``">>deu<<"``) go into the source
    vocabulary right after ``<unk>``; ``omit_every`` leaves some pieces out of the
    vocabularies (see :func:`marian_vocab`).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    source = train_spm(source_lang, vocab_size, corpus=corpus)
    target = train_spm(target_lang, vocab_size, corpus=corpus)
    (directory / "source.spm").write_bytes(source)
    (directory / "target.spm").write_bytes(target)
    if separate_vocabs:
        vocabs = {
            "vocab.json": marian_vocab([_pieces(source)], language_codes, omit_every),
            "target_vocab.json": marian_vocab([_pieces(target)], (), omit_every),
        }
    else:
        shared = marian_vocab([_pieces(source), _pieces(target)], language_codes, omit_every)
        vocabs = {"vocab.json": shared}
    for name, vocab in vocabs.items():
        (directory / name).write_text(json.dumps(vocab, ensure_ascii=False, indent=2), "utf-8")
    config = {
        "source_lang": source_lang,
        "target_lang": target_lang,
        "separate_vocabs": separate_vocabs,
        "model_max_length": model_max_length,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "tokenizer_class": "MarianTokenizer",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2), "utf-8")
    specials = {"eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2), "utf-8")
    return directory

"""The byte-level BPE tokenizer: exact round trips (property tests), special tokens, files,
errors, and speed on Multi30K when its files are present."""

from __future__ import annotations

import json
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _paths import MULTI30K_DIR
from attnlab.data import corpora, numbers
from attnlab.data.tokenizer import (
    SPECIAL_TOKENS,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    TOKENIZER_FILE,
    Tokenizer,
    load_tokenizers,
    save_tokenizers,
)

SENTENCES = [
    "Zwei junge Männer stehen draußen.",
    "Two young men are standing outside.",
    "Ein Mädchen in einem rosa Kleid klettert, 3 Stufen hoch!",
    "A girl (in a pink dress) climbs 3 steps?",
    "Größe, Übung, Ärger; ß: 'quoted' \"double\" -- end.",
]


def _corpus() -> list[str]:
    pairs = numbers(high=399, valid_size=1, test_size=1)["train"]
    return [side for pair in pairs for side in pair] + SENTENCES * 20


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.train(_corpus(), vocab_size=420)


# ---------------------------------------------------------------------------------------------
# Round trips

TRAINED_CHARS = sorted(set("".join(_corpus())))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([*TRAINED_CHARS, " ", " ", "\t"]), max_size=80))
def test_round_trip_on_the_trained_alphabet(tok, text):
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80))
def test_round_trip_on_any_ascii(tok, text):
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_round_trip_on_any_unicode_never_needs_unk(tok, text):
    ids = tok.encode(text)
    assert tok.unk_id not in ids
    assert tok.decode(ids) == text


@pytest.mark.parametrize(
    "text",
    ["", " ", "  leading", "trailing  ", "a  b   c", "\tTab", "Ärger über Öl.", "1234567890"],
)
def test_round_trip_examples(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_batch_matches_single(tok):
    ids = tok.encode_batch(SENTENCES)
    assert ids == [tok.encode(s) for s in SENTENCES]
    assert tok.decode_batch(ids) == SENTENCES
    assert tok.decode_batch([]) == []


# ---------------------------------------------------------------------------------------------
# Special tokens and vocabulary


def test_special_token_ids_are_fixed(tok):
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.backend.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert 260 < tok.vocab_size <= 420
    assert tok.vocab_size == tok.backend.get_vocab_size()


def test_encode_adds_no_specials_and_decode_drops_them(tok):
    ids = tok.encode("Zwei Männer")
    assert min(ids) >= len(SPECIAL_TOKENS)
    framed = [tok.bos_id, *ids, tok.eos_id, tok.pad_id, tok.pad_id]
    assert tok.decode(framed) == "Zwei Männer"
    assert tok.decode([tok.bos_id, *ids[:1], tok.eos_id, *ids[1:]]) == "Zwei Männer"  # no stop


def test_special_token_text_is_ordinary_text(tok):
    text = "a <eos> b <pad><bos><unk>"
    ids = tok.encode(text)
    assert not set(ids) & {0, 1, 2, 3}
    assert tok.decode(ids) == text
    assert tok.encode_batch([text]) == [ids]


def test_decode_accepts_tensors(tok):
    ids = tok.encode(SENTENCES[0])
    assert tok.decode(torch.tensor(ids)) == SENTENCES[0]
    batch = torch.full((2, len(ids) + 2), tok.pad_id)
    batch[:, : len(ids)] = torch.tensor(ids)
    assert tok.decode_batch(batch) == [SENTENCES[0]] * 2


def test_tokens_and_labels_are_readable(tok):
    pieces = tok.tokens("Zwei  Männer stehen")
    assert "".join(pieces) == "Zwei  Männer stehen"
    assert len(pieces) == len(tok.encode("Zwei  Männer stehen"))
    assert not any("Ġ" in p or "Ã" in p for p in pieces)
    ids = tok.encode("Männer")
    assert tok.labels([tok.bos_id, *ids, tok.eos_id]) == ["<bos>", *tok.tokens("Männer"), "<eos>"]
    # A character split across pieces shows its bytes escaped, one label per id.
    split = [tok.backend.token_to_id("Ã"), tok.backend.token_to_id("¤")]  # "ä" = C3 A4
    assert tok.labels(split) == ["\\xc3", "\\xa4"]
    assert tok.decode(split) == "ä"


def test_training_is_deterministic(tok):
    again = Tokenizer.train(_corpus(), vocab_size=420)
    assert again.backend.to_str() == tok.backend.to_str()


def test_train_accepts_a_generator_and_skips_empty_texts():
    texts = (s for s in ["", *SENTENCES, ""])
    small = Tokenizer.train(texts, vocab_size=300, min_frequency=1)
    assert small.decode(small.encode(SENTENCES[2])) == SENTENCES[2]
    assert small.vocab_size == 300


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("texts", "kwargs", "exc", "pattern"),
    [
        (SENTENCES, {"vocab_size": 259}, ValueError, r"vocab_size: expected at least 260 \(4"),
        (SENTENCES, {"vocab_size": 300.0}, TypeError, r"vocab_size: expected an int"),
        (SENTENCES, {"vocab_size": 300, "min_frequency": 0}, ValueError, r"min_frequency"),
        ([], {"vocab_size": 300}, ValueError, r"texts: no non-empty text to train on"),
        (["", ""], {"vocab_size": 300}, ValueError, r"texts: no non-empty text"),
        ("one text", {"vocab_size": 300}, TypeError, r"texts: expected an iterable of strings"),
        (["ok", 5], {"vocab_size": 300}, TypeError, r"texts\[1\]: expected a string, got int"),
    ],
)
def test_train_errors(texts, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        Tokenizer.train(texts, **kwargs)


def test_encode_decode_errors(tok):
    with pytest.raises(ValueError, match=rf"ids\[1\]: token id {tok.vocab_size} is out of range"):
        tok.decode([5, tok.vocab_size])
    with pytest.raises(ValueError, match=r"ids\[0\]: token id -1 is out of range"):
        tok.decode([-1])
    with pytest.raises(ValueError, match=r"batch\[1\]\[0\]: token id 99999 is out of range"):
        tok.decode_batch([[5], [99999]])
    with pytest.raises(TypeError, match=r"ids\[0\]: expected an int token id, got float"):
        tok.decode([1.0])
    with pytest.raises(TypeError, match=r"text: expected a string, got bytes"):
        tok.encode(b"bytes")
    with pytest.raises(TypeError, match=r"texts\[1\]: expected a string"):
        tok.encode_batch(["ok", None])
    with pytest.raises(TypeError, match=r"texts: expected a list of strings, got str"):
        tok.encode_batch("abc")


# ---------------------------------------------------------------------------------------------
# Files


def test_save_load_round_trip(tok, tmp_path):
    path = tmp_path / "sub" / "tok.json"
    tok.save(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["tok.json"]  # no temporaries
    assert json.loads(path.read_text(encoding="utf-8"))["model"]["type"] == "BPE"
    loaded = Tokenizer.load(path)
    assert loaded.vocab_size == tok.vocab_size
    assert loaded.encode_batch(SENTENCES) == tok.encode_batch(SENTENCES)
    assert loaded.encode("<eos>") == tok.encode("<eos>")  # the setting survives loading
    assert loaded.backend.to_str() == tok.backend.to_str()


def test_load_errors_name_the_file(tok, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.json: no such tokenizer file"):
        Tokenizer.load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    tok.save(broken)
    broken.write_text(broken.read_text(encoding="utf-8")[:500], encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: not a valid tokenizer\.json file"):
        Tokenizer.load(broken)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x80\x81")
    with pytest.raises(ValueError, match=r"binary\.json: not a tokenizer file"):
        Tokenizer.load(binary)
    swapped = tmp_path / "swapped.json"
    data = json.loads(tok.backend.to_str())
    vocab = data["model"]["vocab"]
    vocab["<pad>"], vocab["<eos>"] = vocab["<eos>"], vocab["<pad>"]
    for added in data["added_tokens"]:
        added["id"] = vocab[added["content"]]
    swapped.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"swapped\.json: special token <pad> has id 2"):
        Tokenizer.load(swapped)


def test_save_tokenizers_joint_and_separate(tok, tmp_path):
    other = Tokenizer.train(SENTENCES, vocab_size=280, min_frequency=1)
    save_tokenizers(tmp_path, tok)
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOKENIZER_FILE]
    src, tgt = load_tokenizers(tmp_path)
    assert src is tgt
    assert src.encode(SENTENCES[0]) == tok.encode(SENTENCES[0])

    save_tokenizers(tmp_path, tok, other)  # replaces the joint file
    assert sorted(p.name for p in tmp_path.iterdir()) == [SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE]
    src, tgt = load_tokenizers(tmp_path)
    assert (src.vocab_size, tgt.vocab_size) == (tok.vocab_size, other.vocab_size)

    save_tokenizers(tmp_path, tok, tok)  # the same object on both sides is joint
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOKENIZER_FILE]


def test_load_tokenizers_errors(tok, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere: no such directory"):
        load_tokenizers(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json, nor src_tokenizer\.json"):
        load_tokenizers(tmp_path)
    tok.save(tmp_path / SRC_TOKENIZER_FILE)
    with pytest.raises(FileNotFoundError, match=r"tgt_tokenizer\.json: no such tokenizer file"):
        load_tokenizers(tmp_path)
    tok.save(tmp_path / TOKENIZER_FILE)
    with pytest.raises(ValueError, match=r"holds both tokenizer\.json"):
        load_tokenizers(tmp_path)
    with pytest.raises(TypeError, match=r"tgt: expected a Tokenizer or None, got str"):
        save_tokenizers(tmp_path, tok, "tgt")


# ---------------------------------------------------------------------------------------------
# Multi30K: a real vocabulary, and speed


@pytest.mark.skipif(not MULTI30K_DIR.is_dir(), reason=f"no Multi30K files in {MULTI30K_DIR}")
def test_multi30k_joint_vocabulary_is_fast_and_exact():
    corpus = corpora.multi30k(MULTI30K_DIR, download=False)
    train = [side for pair in corpus["train"] for side in pair]
    start = time.perf_counter()
    tok = Tokenizer.train(train, vocab_size=8000)
    train_seconds = time.perf_counter() - start
    assert tok.vocab_size == 8000
    sources = [src for src, _ in corpus["train"]]
    start = time.perf_counter()
    ids = tok.encode_batch(sources)
    encode_seconds = time.perf_counter() - start
    assert tok.decode_batch(ids) == sources
    held_out = [side for split in ("valid", "test") for pair in corpus[split] for side in pair]
    assert tok.decode_batch(tok.encode_batch(held_out)) == held_out
    tokens_per_sentence = sum(map(len, ids)) / len(ids)
    assert 10 < tokens_per_sentence < 20  # ~13 words a caption; BPE keeps most whole
    # Generous bounds (about 10x what 2 cores take) so that a busy machine does not fail them.
    assert train_seconds < 30, train_seconds
    assert encode_seconds < 10, encode_seconds

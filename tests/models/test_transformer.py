"""The models and their config: parameter counts, tied weights, embeddings, save / load, masks.

Models are the "tiny" preset (or smaller) unless a preset is the point. Tolerances: 1e-5 absolute
for float32 outputs compared across batches or inputs, exact (``torch.equal``) where the numbers
must be the same bits (a save / load round trip, tied storage, masked attention weights).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import Tensor, nn

import attnlab.models.saved
from _helpers import tiny, token_ids
from attnlab import (
    AttentionMaps,
    Transformer,
    TransformerConfig,
    TransformerEncoder,
    TransformerLM,
    causal_mask,
    count_parameters,
    load_pretrained,
)
from attnlab.nn.positional import sinusoidal_table

ATOL = 1e-5
MODELS = {"transformer": Transformer, "lm": TransformerLM, "encoder": TransformerEncoder}
MODEL_TYPES = list(MODELS)
POSITIONAL_KINDS = ["sinusoidal", "learned", "rotary", "alibi", "none"]
FIELDS = {f.name for f in dataclasses.fields(TransformerConfig)}


# -- helpers ---------------------------------------------------------------------------------


def build(model_type: str, config: TransformerConfig | None = None, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MODELS[model_type](config or tiny()).eval()


def inputs(model_type: str, seed: int = 0) -> tuple[Tensor, ...]:
    """A small batch for the model type; the second row is padded (pad_id 0) at the end."""
    if model_type == "transformer":
        src, tgt = token_ids(2, 9, seed), token_ids(2, 7, seed + 1)
        src[1, 6:] = 0
        tgt[1, 5:] = 0
        return src, tgt
    ids = token_ids(2, 8, seed)
    ids[1, 5:] = 0
    return (ids,)


def pad_right(ids: Tensor, length: int) -> Tensor:
    return F.pad(ids, (0, length - ids.shape[1]), value=0)


def tied_parameters(model: nn.Module) -> list[Tensor]:
    """The token matrices and the output projection of a model, in a fixed order."""
    if isinstance(model, Transformer):
        return [model.src_embed.token.weight, model.tgt_embed.token.weight, model.lm_head.weight]
    return [model.embed.token.weight, model.lm_head.weight]


# -- parameter counts --------------------------------------------------------------------------

PRESET_TYPES = [
    pytest.param(name, model_type, id=f"{name}-{model_type}")
    for name in TransformerConfig.preset_names()
    for model_type in MODEL_TYPES
    if not (name == "minilm-l6" and model_type != "encoder")
]
BIG_PRESETS = ("paper-base", "paper-big")


@pytest.mark.parametrize(("name", "model_type"), PRESET_TYPES)
def test_count_parameters_of_every_preset(name: str, model_type: str):
    """count_parameters == num_parameters() == the sum over parameters (tied ones once). The
    paper's models are built on the meta device (shapes only, no memory, no init time); the
    paper-size test below builds the real ones once."""
    config = TransformerConfig.preset(name)
    if name in BIG_PRESETS:
        with torch.device("meta"):
            model = MODELS[model_type](config)
    else:
        model = build(model_type, config)
    total = sum(p.numel() for p in model.parameters())
    assert count_parameters(config, model_type) == model.num_parameters() == total


@pytest.mark.parametrize("model_type", ["transformer", "lm"])
def test_minilm_preset_has_no_decoder(model_type: str):
    config = TransformerConfig.preset("minilm-l6")
    assert config.num_decoder_layers == 0
    with pytest.raises(
        ValueError, match=r"^num_decoder_layers: .* needs at least one layer, got 0"
    ):
        MODELS[model_type](config)


def test_minilm_count_matches_the_real_checkpoint():
    """all-MiniLM-L6-v2's BertModel holds 22,713,216 parameters; without its pooler
    (384 x 384 + 384 = 147,840, not part of the sentence embedding) that is 22,565,376."""
    config = TransformerConfig.preset("minilm-l6")
    assert count_parameters(config, "encoder") == 22_713_216 - 147_840


@pytest.mark.slow  # builds the paper's base and big models (213M parameters)
def test_paper_models_have_the_papers_size():
    """Vaswani et al. 2017, Table 3: base 65M, big 213M (vocabulary of 37,000 shared tokens);
    the paper rounds and does not state every bias, so within 5%. Each is built once, for real."""
    for name, paper in (("paper-base", 65e6), ("paper-big", 213e6)):
        config = TransformerConfig.preset(name)
        assert config.vocab_size == 37000
        counted = count_parameters(config, "transformer")
        assert abs(counted - paper) / paper < 0.05, (name, counted)
        model = Transformer(config)
        assert model.num_parameters() == counted
        del model
    assert count_parameters(TransformerConfig.preset("paper-base")) == 63_082_496


VARIATIONS = {
    "norm_first": {"norm_first": True},
    "learned": {"positional": "learned"},
    "rotary": {"positional": "rotary"},
    "alibi": {"positional": "alibi"},
    "none": {"positional": "none"},
    "untied-vocab": {"share_embeddings": False, "tgt_vocab_size": 700},
    "unshared-untied": {"share_embeddings": False, "tie_output": False},
    "tie_output-false": {"tie_output": False},
    "unshared-same-vocab": {"share_embeddings": False},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "no-bias": {"bias": False},
    "embedding_norm": {"embedding_norm": True},
    "type_vocab_size": {"type_vocab_size": 3},
    "all": {
        "norm_first": True,
        "positional": "learned",
        "share_embeddings": False,
        "tie_output": False,
        "num_kv_heads": 2,
        "bias": False,
        "embedding_norm": True,
        "type_vocab_size": 2,
    },
}


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("variation", list(VARIATIONS))
def test_count_parameters_of_variations(variation: str, model_type: str):
    config = tiny(**VARIATIONS[variation])
    if model_type != "transformer" and "tgt_vocab_size" in VARIATIONS[variation]:
        pytest.skip("a single-stack model has one vocabulary (refusal tested below)")
    model = build(model_type, config)
    total = sum(p.numel() for p in model.parameters())
    assert count_parameters(config, model_type) == model.num_parameters() == total


@pytest.mark.parametrize("model_type", ["lm", "encoder"])
def test_single_stack_models_refuse_a_target_vocabulary(model_type: str):
    config = tiny(share_embeddings=False, tgt_vocab_size=700, tie_output=False)
    pattern = r"^tgt_vocab_size: Transformer(LM|Encoder) has one vocabulary \(vocab_size=1000\)"
    with pytest.raises(ValueError, match=pattern):
        build(model_type, config)
    with pytest.raises(ValueError, match=pattern):
        count_parameters(config, model_type)


def test_count_parameters_lm_with_untied_output():
    config = tiny(share_embeddings=False, tie_output=False)
    model = build("lm", config)
    assert model.lm_head.weight.shape == (config.vocab_size, config.d_model)
    assert count_parameters(config, "lm") == model.num_parameters()


def test_count_parameters_bad_arguments():
    with pytest.raises(ValueError, match=r"^model_type: expected one of"):
        count_parameters(tiny(), "decoder")
    with pytest.raises(TypeError, match=r"^config: expected a TransformerConfig, got dict"):
        count_parameters(tiny().to_dict())


# -- tied weights ------------------------------------------------------------------------------


def test_transformer_shared_and_tied_weights_are_one_parameter():
    model = build("transformer")
    src, tgt, head = tied_parameters(model)
    assert src is tgt is head
    assert src.data_ptr() == tgt.data_ptr() == head.data_ptr()
    names = [n for n, _ in model.named_parameters()]
    assert "src_embed.token.weight" in names
    assert "tgt_embed.token.weight" not in names and "lm_head.weight" not in names


def test_tied_gradient_is_the_sum_of_its_three_uses():
    """A gradient step on the tied model moves the one matrix by the sum of the gradients that an
    untied copy with the same weights gets for its source embedding, target embedding and output
    projection (1e-5)."""
    tied = build("transformer")
    untied = Transformer(tiny(share_embeddings=False, tie_output=False))
    untied.load_state_dict(tied.state_dict())  # state_dict lists the tied matrix under each name
    src, tgt = inputs("transformer")
    for model in (tied, untied):
        model.train()
        logits = model(src, tgt[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0).backward()
    expected = sum(p.grad for p in tied_parameters(untied))
    torch.testing.assert_close(tied.lm_head.weight.grad, expected, atol=ATOL, rtol=ATOL)

    before = tied.lm_head.weight.detach().clone()
    torch.optim.SGD(tied.parameters(), lr=0.5).step()
    src_w, tgt_w, head_w = tied_parameters(tied)
    assert src_w is tgt_w is head_w
    torch.testing.assert_close(head_w.detach(), before - 0.5 * expected, atol=ATOL, rtol=ATOL)
    assert (head_w.detach() - before).abs().max() > 1e-4


def test_transformer_untied_variants_are_distinct():
    model = build("transformer", tiny(share_embeddings=False, tgt_vocab_size=700))
    src, tgt, head = tied_parameters(model)
    assert src is not tgt and src.data_ptr() != tgt.data_ptr()
    assert head is tgt  # tie_output ties the output to the *target* embedding
    assert src.shape == (1000, 64) and tgt.shape == (700, 64)

    model = build("transformer", tiny(tie_output=False))
    src, tgt, head = tied_parameters(model)
    assert src is tgt
    assert head is not tgt and head.data_ptr() != tgt.data_ptr()
    assert not torch.equal(head, tgt)  # initialised independently


def test_lm_tied_and_untied():
    model = build("lm")
    embed, head = tied_parameters(model)
    assert embed is head and embed.data_ptr() == head.data_ptr()
    ids = inputs("lm")[0]
    model.train()
    F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
    before = head.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    assert (embed.detach() - before).abs().max() > 1e-4
    assert torch.equal(embed, model.lm_head.weight)

    untied = build("lm", tiny(tie_output=False))
    embed, head = tied_parameters(untied)
    assert embed is not head and embed.data_ptr() != head.data_ptr()


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_output": False},
        {"share_embeddings": False, "tie_output": False},
        {"share_embeddings": False, "tgt_vocab_size": 700},
    ],
)
@pytest.mark.parametrize("model_type", ["transformer", "lm"])
def test_ties_survive_save_and_load(tmp_path: Path, model_type: str, overrides: dict):
    if model_type == "lm" and "tgt_vocab_size" in overrides:
        pytest.skip("a decoder-only model has one vocabulary")
    model = build(model_type, tiny(**overrides))
    loaded = type(model).from_pretrained(model.save_pretrained(tmp_path))
    for ours, theirs in zip(tied_parameters(model), tied_parameters(loaded), strict=True):
        assert torch.equal(ours, theirs)
    pointers = [p.data_ptr() for p in tied_parameters(model)]
    loaded_pointers = [p.data_ptr() for p in tied_parameters(loaded)]
    # the same pattern of sharing: position i and j share storage after loading iff before
    for i in range(len(pointers)):
        for j in range(len(pointers)):
            same = pointers[i] == pointers[j]
            assert (loaded_pointers[i] == loaded_pointers[j]) is same, (i, j)


# -- embeddings --------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_embeddings_are_scaled_by_sqrt_d_model(model_type: str):
    """Sec. 3.4: "we multiply those weights by sqrt(d_model)"; without positions and dropout the
    embedding is exactly the scaled row."""
    model = build(model_type, tiny(positional="none"))
    embed = model.src_embed if model_type == "transformer" else model.embed
    ids = token_ids(2, 6, seed=3)
    with torch.no_grad():
        expected = embed.token.weight[ids] * math.sqrt(64)
        assert torch.equal(embed(ids), expected)
    unscaled = build(model_type, tiny(positional="none", scale_embeddings=False))
    embed = unscaled.src_embed if model_type == "transformer" else unscaled.embed
    with torch.no_grad():
        assert torch.equal(embed(ids), embed.token.weight[ids])


def test_embeddings_add_the_sinusoidal_table():
    model = build("transformer")
    ids = token_ids(2, 6, seed=4)
    table = sinusoidal_table(6, 64).float()
    with torch.no_grad():
        expected = model.tgt_embed.token.weight[ids] * 8.0 + table
        torch.testing.assert_close(model.tgt_embed(ids), expected, atol=1e-6, rtol=0)


def test_embedding_dropout_only_in_training():
    model = build("lm", tiny(dropout=0.3, positional="none"))
    ids = token_ids(2, 50, seed=5)
    with torch.no_grad():
        clean = model.embed(ids)
        model.train()
        noisy = model.embed(ids)
    kept = noisy != 0
    torch.testing.assert_close(noisy[kept], clean[kept] / 0.7, atol=1e-5, rtol=1e-5)
    assert 0.2 < 1 - kept.float().mean() < 0.4


# -- save / load round trip --------------------------------------------------------------------


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_save_load_round_trip_is_bit_exact(tmp_path: Path, model_type: str, positional: str):
    extra = {"type_vocab_size": 2, "embedding_norm": True} if model_type == "encoder" else {}
    config = tiny(positional=positional, **extra)
    model = build(model_type, config)
    model.train()  # saved in training mode, loaded in eval mode
    assert model.save_pretrained(tmp_path) == tmp_path
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]

    loaded = MODELS[model_type].from_pretrained(tmp_path)
    assert type(loaded) is MODELS[model_type]
    assert loaded.config == config
    assert not loaded.training and not any(m.training for m in loaded.modules())
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert list(state) == list(loaded_state)
    for name, tensor in state.items():
        assert torch.equal(tensor, loaded_state[name]), name

    model.eval()
    with torch.no_grad():
        assert torch.equal(model(*inputs(model_type)), loaded(*inputs(model_type)))
    anything = load_pretrained(tmp_path)
    assert type(anything) is MODELS[model_type] and not anything.training


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_config_json_holds_model_type_and_every_field(tmp_path: Path, model_type: str):
    config = tiny(norm_first=True, layer_norm_eps=1e-12, num_kv_heads=2)
    build(model_type, config).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert data.pop("model_type") == model_type
    assert isinstance(data.pop("attnlab_version"), str)
    assert set(data) == FIELDS
    assert data == config.to_dict()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_weights_file_is_safetensors_not_pickle(tmp_path: Path, model_type: str):
    """A safetensors file: an 8-byte little-endian header length, a JSON header, then raw data
    filling the rest of the file exactly; no pickle (no zip ``PK``, no ``\\x80`` opcode)."""
    model = build(model_type)
    model.save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    raw = path.read_bytes()
    assert raw[:2] != b"PK" and raw[:1] != b"\x80"
    size = int.from_bytes(raw[:8], "little")
    assert 8 + size < len(raw)
    header = json.loads(raw[8 : 8 + size])
    assert header.pop("__metadata__") == {"format": "pt", "model_type": model_type}
    assert max(entry["data_offsets"][1] for entry in header.values()) == len(raw) - 8 - size
    seen, expected_names = set(), []
    for name, tensor in model.state_dict(keep_vars=True).items():  # tied ones once, first name
        if id(tensor) not in seen:
            seen.add(id(tensor))
            expected_names.append(name)
    assert set(header) == set(expected_names)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "pt", "model_type": model_type}
        assert set(f.keys()) == set(expected_names)
        for name in expected_names:
            assert torch.equal(f.get_tensor(name), model.state_dict()[name]), name
            assert header[name]["dtype"] == "F32"


def test_from_pretrained_device_argument(tmp_path: Path):
    build("lm").save_pretrained(tmp_path)
    loaded = TransformerLM.from_pretrained(tmp_path, device="cpu")
    assert loaded.lm_head.weight.device.type == "cpu" and not loaded.training


# -- load errors: each names the file (and the key) --------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A saved tiny Transformer."""
    directory = tmp_path / "model"
    build("transformer").save_pretrained(directory)
    return directory


def esc(path: Path) -> str:
    """A path as a regex that matches it literally."""
    return re.escape(str(path))


def _edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_load_missing_directory(tmp_path: Path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=f"^model directory not found: {esc(missing)}$"):
        Transformer.from_pretrained(missing)
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        load_pretrained(missing)


def test_load_missing_config(saved: Path):
    (saved / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=f"^{esc(saved / 'config.json')}: missing"):
        Transformer.from_pretrained(saved)


def test_load_invalid_json(saved: Path):
    (saved / "config.json").write_text('{"d_model": 64,\n  oops}', encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{esc(saved / 'config.json')}: invalid JSON at line 2"):
        load_pretrained(saved)


def test_load_config_not_an_object(saved: Path):
    (saved / "config.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{esc(saved / 'config.json')}: expected a JSON object"):
        load_pretrained(saved)


def test_load_unknown_config_field(saved: Path):
    _edit_config(saved, d_modle=64)
    with pytest.raises(ValueError, match=rf"^{esc(saved / 'config.json')}: .*\['d_modle'\]"):
        Transformer.from_pretrained(saved)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"d_model": 63}, r"d_model: 63 is not divisible by num_heads=4"),
        ({"dropout": 1.5}, r"dropout: expected a number in \[0, 1\), got 1\.5"),
        ({"d_model": 64.0}, r"d_model: expected a positive int, got 64\.0"),
        ({"activation": "tanh"}, r"activation: expected one of"),
        ({"model_type": "gpt"}, r"model_type: expected one of .*got 'gpt'"),
    ],
    ids=["d_model-divisible", "dropout", "float-int", "activation", "model_type"],
)
def test_load_invalid_config_value(saved: Path, changes: dict, pattern: str):
    _edit_config(saved, **changes)
    with pytest.raises(ValueError, match=f"^{esc(saved / 'config.json')}: {pattern}"):
        load_pretrained(saved)


def test_load_missing_weights(saved: Path):
    (saved / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=f"^{esc(saved / 'model.safetensors')}: missing"):
        Transformer.from_pretrained(saved)


@pytest.mark.parametrize("keep", ["half", "5 bytes", "empty"])
def test_load_truncated_weights(saved: Path, keep: str):
    path = saved / "model.safetensors"
    raw = path.read_bytes()
    path.write_bytes({"half": raw[: len(raw) // 2], "5 bytes": raw[:5], "empty": b""}[keep])
    with pytest.raises(ValueError, match=f"^{esc(path)}: not a readable safetensors file"):
        Transformer.from_pretrained(saved)


def test_load_weights_of_another_config(saved: Path, tmp_path: Path):
    """Weights saved with vocab_size 500 do not fit a config with 1000: the message names the
    file, the key and both shapes."""
    other = tmp_path / "other"
    build("transformer", tiny(vocab_size=500)).save_pretrained(other)
    shutil.copy(other / "model.safetensors", saved / "model.safetensors")
    path = saved / "model.safetensors"
    pattern = (
        rf"^{esc(path)}: src_embed\.token\.weight: shape \(500, 64\) does not match the config's "
    )
    with pytest.raises(ValueError, match=pattern + r"\(1000, 64\)"):
        Transformer.from_pretrained(saved)


def test_load_unknown_weight_key(saved: Path):
    path = saved / "model.safetensors"
    state = safetensors.torch.load_file(path)
    state["decoder.layers.0.extra.weight"] = torch.zeros(3)
    safetensors.torch.save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(
        ValueError, match=rf"^{esc(path)}: unknown weights \['decoder\.layers\.0\.extra"
    ):
        Transformer.from_pretrained(saved)


def test_load_missing_weight_key(saved: Path):
    path = saved / "model.safetensors"
    state = safetensors.torch.load_file(path)
    del state["encoder.layers.1.norm2.bias"]
    safetensors.torch.save_file(state, path)
    with pytest.raises(
        ValueError, match=rf"^{esc(path)}: missing weights \['encoder\.layers\.1\.norm2"
    ):
        Transformer.from_pretrained(saved)


def test_load_integer_weights(saved: Path):
    path = saved / "model.safetensors"
    state = safetensors.torch.load_file(path)
    state["encoder.layers.0.norm1.weight"] = torch.ones(64, dtype=torch.int64)
    safetensors.torch.save_file(state, path)
    with pytest.raises(
        ValueError, match=rf"^{esc(path)}: encoder\.layers\.0\.norm1\.weight: dtype"
    ):
        Transformer.from_pretrained(saved)


def test_load_other_model_type(saved: Path):
    pattern = (
        rf"^{esc(saved / 'config.json')}: holds a 'transformer' model \(Transformer\), not 'lm'"
    )
    with pytest.raises(ValueError, match=pattern):
        TransformerLM.from_pretrained(saved)
    with pytest.raises(ValueError, match=r"not 'encoder' \(TransformerEncoder\)"):
        TransformerEncoder.from_pretrained(saved)
    assert type(load_pretrained(saved)) is Transformer


# -- atomic writes -----------------------------------------------------------------------------


def test_save_twice_into_the_same_directory(tmp_path: Path):
    build("lm", seed=1).save_pretrained(tmp_path)
    second = build("lm", seed=2)
    second.save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]  # no temp files
    loaded = TransformerLM.from_pretrained(tmp_path)
    for name, tensor in second.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_failed_weights_write_keeps_the_previous_file(tmp_path: Path, monkeypatch):
    """The writer dies after writing part of its (temporary) file: the previous
    model.safetensors and config.json are intact, byte for byte, and no temp file remains."""
    build("lm", seed=1).save_pretrained(tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    written: list[str] = []

    def dying_save(tensors, filename, metadata=None):
        written.append(str(filename))
        Path(filename).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{partial")
        raise OSError("disk full")

    # attnlab's one safetensors writer, as the model's save calls it.
    monkeypatch.setattr(attnlab.models.saved, "save_safetensors", dying_save)
    with pytest.raises(OSError, match="disk full"):
        build("lm", seed=2).save_pretrained(tmp_path)
    # It wrote a temporary name in a temporary directory beside the model's, now gone.
    assert len(written) == 1 and Path(written[0]).parent.parent == tmp_path.parent
    assert Path(written[0]).name != "model.safetensors"
    assert not Path(written[0]).parent.exists()
    assert not list(tmp_path.parent.glob(f".{tmp_path.name}.*"))
    assert sorted(os.listdir(tmp_path)) == sorted(before)
    for name, content in before.items():
        assert (tmp_path / name).read_bytes() == content, name
    monkeypatch.undo()
    TransformerLM.from_pretrained(tmp_path)  # still loads


def test_saved_files_respect_the_umask(tmp_path: Path):
    umask = os.umask(0o022)
    try:
        build("lm").save_pretrained(tmp_path)
    finally:
        os.umask(umask)
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


# -- masks: padding does not leak, the decoder does not look ahead -----------------------------


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_transformer_padding_does_not_leak(positional: str):
    model = build("transformer", tiny(positional=positional))
    src_a, tgt_a = token_ids(1, 5, seed=10), token_ids(1, 4, seed=11)
    src_b, tgt_b = token_ids(1, 9, seed=12), token_ids(1, 7, seed=13)
    src = torch.cat([pad_right(src_a, 9), src_b])
    tgt = torch.cat([pad_right(tgt_a, 7), tgt_b])
    with torch.no_grad():
        alone = model(src_a, tgt_a)
        batched = model(src, tgt)
        other = model(src_b, tgt_b)
    torch.testing.assert_close(batched[:1, :4], alone, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(batched[1:], other, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_lm_right_padding_does_not_leak(positional: str):
    model = build("lm", tiny(positional=positional))
    a, b = token_ids(1, 5, seed=14), token_ids(1, 9, seed=15)
    with torch.no_grad():
        alone = model(a)
        batched = model(torch.cat([pad_right(a, 9), b]))
    torch.testing.assert_close(batched[:1, :5], alone, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(batched[1:], model(b).detach(), atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("positional", ["rotary", "alibi", "none"])
def test_lm_left_padding_does_not_leak_with_relative_positions(positional: str):
    """Left padding (pads before real tokens) is masked as keys. With relative positions (or
    none) a left-padded sentence gives the same logits as alone; absolute positions would
    shift."""
    model = build("lm", tiny(positional=positional))
    a, b = token_ids(1, 5, seed=25), token_ids(1, 9, seed=26)
    with torch.no_grad():
        alone = model(a)
        batched = model(torch.cat([F.pad(a, (4, 0), value=0), b]))
    torch.testing.assert_close(batched[:1, 4:], alone, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(batched[1:], model(b).detach(), atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_pad_embedding_never_reaches_real_positions(model_type: str):
    """Pads inside, before and after real tokens: moving the pad token's embedding row leaves
    every real position's output unchanged (1e-5); the output column of the pad token itself
    moves with it when tied, so it is left out."""
    model = build(model_type, tiny(positional="rotary"))
    src, tgt = token_ids(2, 7, seed=27), token_ids(2, 6, seed=28)
    src[0, 2], src[1, 5:] = 0, 0  # interior, trailing
    tgt[0, 2], tgt[1, :2] = 0, 0  # interior, leading

    def run() -> Tensor:
        if model_type == "transformer":
            return model(src, tgt)[..., 1:]
        return model(tgt)[..., 1:] if model_type == "lm" else model(src)

    embed = model.src_embed if model_type == "transformer" else model.embed
    with torch.no_grad():
        before = run()
        embed.token.weight[0] += 5 * torch.randn(64)
        after = run()
    real = (src if model_type == "encoder" else tgt) != 0
    torch.testing.assert_close(after[real], before[real], atol=ATOL, rtol=ATOL)
    assert (after[~real] - before[~real]).abs().max() > 1e-3  # the pads themselves did move


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_encoder_attention_mask_keeps_padding_out(positional: str):
    """The attention_mask (not the ids) decides: the padded positions hold random real ids."""
    model = build("encoder", tiny(positional=positional, type_vocab_size=2))
    a, b = token_ids(1, 5, seed=16), token_ids(1, 9, seed=17)
    filler = token_ids(1, 4, seed=18)
    ids = torch.cat([torch.cat([a, filler], dim=1), b])
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 5:] = 0
    with torch.no_grad():
        alone = model(a)
        batched = model(ids, attention_mask=mask)
        pooled_alone = model.embed_sentences(a)
        pooled = model.embed_sentences(ids, attention_mask=mask)
        unmasked = model(ids)  # no mask: the filler is attended to and changes the result
    torch.testing.assert_close(batched[:1, :5], alone, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(pooled[:1], pooled_alone, atol=ATOL, rtol=ATOL)
    assert (unmasked[:1, :5] - alone).abs().max() > 1e-3


def test_fully_padded_rows_give_finite_outputs():
    """A source of only pad tokens leaves every query without a key: zeros, never NaN."""
    model = build("transformer")
    src = torch.cat([token_ids(1, 6, seed=19), torch.zeros(1, 6, dtype=torch.long)])
    tgt = token_ids(2, 4, seed=20)
    encoder = build("encoder")
    with torch.no_grad():
        assert torch.isfinite(model(src, tgt)).all()
        assert torch.isfinite(encoder.embed_sentences(src)).all()


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
@pytest.mark.parametrize("model_type", ["transformer", "lm"])
def test_changing_a_future_token_does_not_change_earlier_logits(model_type: str, positional: str):
    model = build(model_type, tiny(positional=positional))
    src, tgt = token_ids(2, 6, seed=21), token_ids(2, 8, seed=22)
    changed = tgt.clone()
    changed[:, 5] = torch.where(tgt[:, 5] == 500, 501, 500)

    def run(ids: Tensor) -> Tensor:
        return model(src, ids) if model_type == "transformer" else model(ids)

    with torch.no_grad():
        before, after = run(tgt), run(changed)
    torch.testing.assert_close(after[:, :5], before[:, :5], atol=ATOL, rtol=ATOL)
    assert (after[:, 5:] - before[:, 5:]).abs().amax(dim=(1, 2)).min() > 1e-3


# -- T7: without positions the encoder is blind to order --------------------------------------


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_encoder_permutation_equivariance_only_without_positions(positional: str):
    model = build("encoder", tiny(positional=positional))
    ids = token_ids(2, 10, seed=23)
    perm = torch.tensor([3, 7, 0, 9, 1, 5, 2, 8, 6, 4])
    with torch.no_grad():
        out = model(ids)
        permuted = model(ids[:, perm])
    gap = (permuted - out[:, perm]).abs().max()
    if positional == "none":
        assert gap <= ATOL
    else:
        assert gap > 1e-2


# -- attention maps ----------------------------------------------------------------------------


def _check_maps(
    maps: list[Tensor], shape: tuple[int, ...], allowed: Tensor, rows: Tensor | None = None
) -> None:
    """Each map has ``shape``; in the query ``rows`` checked (default all) the blocked keys are
    exactly 0 and the row sums to 1 (1e-6); a query with no allowed key has an all-zero row."""
    allowed = allowed.expand(shape)
    rows = torch.ones(shape[:-1], dtype=torch.bool) if rows is None else rows.expand(shape[:-1])
    has_key = allowed.any(-1)
    for w in maps:
        assert w.shape == shape
        assert not w.requires_grad
        assert torch.all(w[~allowed & rows[..., None]] == 0)  # blocked keys exactly 0
        sums = w.sum(-1)
        torch.testing.assert_close(sums[rows & has_key], torch.ones_like(sums[rows & has_key]))
        assert torch.all(sums[rows & ~has_key] == 0)


def test_transformer_attention_maps():
    """With trailing target pads the decoder adds no key mask (the look-ahead mask already hides
    them from every real token): only the real query rows are checked for pad keys there."""
    model = build("transformer")
    src, tgt = inputs("transformer")
    maps = model.attention(src, tgt)
    assert isinstance(maps, AttentionMaps)
    assert len(maps.encoder) == 2 and len(maps.decoder) == 2 and len(maps.cross) == 2
    src_real, tgt_real = (src != 0)[:, None, None, :], (tgt != 0)[:, None, None, :]
    _check_maps(maps.encoder, (2, 4, 9, 9), src_real)
    real_queries = (tgt != 0)[:, None, :]
    _check_maps(maps.decoder, (2, 4, 7, 7), tgt_real & causal_mask(7), real_queries)
    _check_maps(maps.decoder, (2, 4, 7, 7), causal_mask(7))  # every row: causal, sums to 1
    _check_maps(maps.cross, (2, 4, 7, 9), src_real)


@pytest.mark.parametrize("side", ["right", "left"])
def test_lm_attention_maps(side: str):
    """Right padding: causal alone hides the pads from real tokens. Left padding: the pads are
    masked as keys for every query; the leading pad queries have no key and an all-zero row."""
    model = build("lm")
    ids = token_ids(2, 8, seed=24)
    if side == "right":
        ids[1, 5:] = 0
    else:
        ids[1, :3] = 0
    maps = model.attention(ids)
    assert maps.encoder == [] and maps.cross == [] and len(maps.decoder) == 2
    real_keys = (ids != 0)[:, None, None, :]
    if side == "right":
        _check_maps(maps.decoder, (2, 4, 8, 8), real_keys & causal_mask(8), (ids != 0)[:, None])
        _check_maps(maps.decoder, (2, 4, 8, 8), causal_mask(8))
    else:
        _check_maps(maps.decoder, (2, 4, 8, 8), real_keys & causal_mask(8))


def test_encoder_attention_maps():
    model = build("encoder", tiny(num_encoder_layers=3))
    (ids,) = inputs("encoder")
    maps = model.attention(ids)
    assert maps.decoder == [] and maps.cross == [] and len(maps.encoder) == 3
    _check_maps(maps.encoder, (2, 4, 8, 8), (ids != 0)[:, None, None, :])


# -- config validation -------------------------------------------------------------------------

BAD_CONFIGS = [
    (
        "d_model-divisible",
        lambda: TransformerConfig(d_model=10, num_heads=4),
        r"^d_model: 10 is not divisible by num_heads=4",
    ),
    (
        "preset-unknown",
        lambda: TransformerConfig.preset("huge"),
        r"^preset: unknown name 'huge'; expected one of \['paper-base'",
    ),
    (
        "vocab_size-negative",
        lambda: tiny(vocab_size=-5),
        r"^vocab_size: expected a positive int, got -5",
    ),
    ("d_ff-zero", lambda: tiny(d_ff=0), r"^d_ff: expected a positive int, got 0"),
    (
        "num_encoder_layers-negative",
        lambda: tiny(num_encoder_layers=-1),
        r"^num_encoder_layers: expected a non-negative int, got -1",
    ),
    ("max_len-zero", lambda: tiny(max_len=0), r"^max_len: expected a positive int, got 0"),
    (
        "tgt_vocab_size-zero",
        lambda: tiny(share_embeddings=False, tgt_vocab_size=0),
        r"^tgt_vocab_size: expected a positive int, got 0",
    ),
    (
        "dropout-one",
        lambda: tiny(dropout=1.0),
        r"^dropout: expected a number in \[0, 1\), got 1\.0",
    ),
    (
        "attention_dropout-negative",
        lambda: tiny(attention_dropout=-0.1),
        r"^attention_dropout: expected a number in \[0, 1\)",
    ),
    (
        "positional-unknown",
        lambda: tiny(positional="relative"),
        r"^positional: expected one of \['sinusoidal', 'learned', 'rotary', 'alibi', 'none'\]",
    ),
    (
        "activation-unknown",
        lambda: tiny(activation="tanh"),
        r"^activation: expected one of \['gelu', 'gelu_tanh', 'relu', 'silu'\], got 'tanh'",
    ),
    (
        "share-different-vocab",
        lambda: tiny(tgt_vocab_size=700),
        r"^share_embeddings: needs one vocabulary, but vocab_size=1000 and tgt_vocab_size=700",
    ),
    (
        "pad_id-vocab",
        lambda: tiny(pad_id=1000),
        r"^pad_id: 1000 is not a token id of vocab_size=1000",
    ),
    (
        "eos_id-tgt-vocab",
        lambda: tiny(share_embeddings=False, tgt_vocab_size=2),
        r"^eos_id: 2 is not a token id of tgt_vocab_size=2",
    ),
    ("pad_id-negative", lambda: tiny(pad_id=-1), r"^pad_id: expected a non-negative int, got -1"),
    (
        "rotary-odd-head-dim",
        lambda: tiny(d_model=12, num_heads=4, positional="rotary"),
        r"^positional: rotary needs an even head dim, d_model / num_heads = 3",
    ),
    (
        "num_kv_heads-divisor",
        lambda: tiny(num_kv_heads=3),
        r"^num_kv_heads: 3 does not divide num_heads=4",
    ),
    (
        "layer_norm_eps-zero",
        lambda: tiny(layer_norm_eps=0),
        r"^layer_norm_eps: expected a positive number, got 0",
    ),
    (
        "preset-override-unknown",
        lambda: TransformerConfig.preset("tiny", dmodel=64),
        r"^overrides: unknown config fields \['dmodel'\]",
    ),
    (
        "from_dict-unknown",
        lambda: TransformerConfig.from_dict({"d_model": 64, "depth": 3}),
        r"unknown config fields \['depth'\]",
    ),
    ("bool-for-int", lambda: tiny(d_model=True), r"^d_model: expected a positive int, got True"),
    (
        "bool-for-layers",
        lambda: tiny(num_decoder_layers=False),
        r"^num_decoder_layers: expected a non-negative int, got False",
    ),
    (
        "float-for-int",
        lambda: tiny(num_heads=4.0),
        r"^num_heads: expected a positive int, got 4\.0",
    ),
    ("int-for-bool", lambda: tiny(norm_first=1), r"^norm_first: expected a bool, got 1"),
    ("str-for-bool", lambda: tiny(bias="yes"), r"^bias: expected a bool, got 'yes'"),
    ("bool-for-dropout", lambda: tiny(dropout=False), r"^dropout: expected a number"),
]


@pytest.mark.parametrize(
    ("call", "pattern"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_config_is_rejected_naming_the_field(call, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        call()
    assert type(info.value) is ValueError


def test_from_dict_needs_a_mapping():
    with pytest.raises(TypeError, match=r"^data: expected a mapping of config fields, got list"):
        TransformerConfig.from_dict([("d_model", 64)])


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_models_revalidate_a_mutated_config(model_type: str):
    config = tiny()
    config.d_model = 66  # dataclass fields can be assigned after construction
    with pytest.raises(ValueError, match=r"^d_model: 66 is not divisible by num_heads=4"):
        MODELS[model_type](config)
    with pytest.raises(TypeError, match=r"^config: expected a TransformerConfig, got dict"):
        MODELS[model_type](tiny().to_dict())


def test_layerless_models_are_refused():
    with pytest.raises(ValueError, match=r"^num_encoder_layers: TransformerEncoder needs at least"):
        TransformerEncoder(tiny(num_encoder_layers=0))
    with pytest.raises(ValueError, match=r"^num_encoder_layers: Transformer needs at least"):
        Transformer(tiny(num_encoder_layers=0))
    assert TransformerLM(tiny(num_encoder_layers=0)).num_parameters() > 0  # the LM needs none


@pytest.mark.parametrize("name", TransformerConfig.preset_names())
def test_config_json_round_trip(name: str):
    config = TransformerConfig.preset(name)
    again = TransformerConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.to_dict() == config.to_dict()
    odd = TransformerConfig.preset(name, share_embeddings=False, tgt_vocab_size=321, max_len=7)
    assert TransformerConfig.from_dict(json.loads(json.dumps(odd.to_dict()))) == odd


# -- bad model inputs --------------------------------------------------------------------------

_IDS = token_ids(2, 5, seed=30)


@functools.cache
def _model(kind: str) -> nn.Module:
    """The models the bad-input cases call, built once on first use."""
    if kind == "encoder":
        return build("encoder", tiny(positional="learned"))
    if kind == "typed":
        return build("encoder", tiny(type_vocab_size=2))
    return build(kind)


BAD_INPUTS = [
    (
        "transformer-float-src",
        lambda: _model("transformer")(_IDS.float(), _IDS),
        TypeError,
        r"^src_ids: expected an integer dtype, got torch\.float32",
    ),
    (
        "transformer-float-tgt",
        lambda: _model("transformer")(_IDS, _IDS.float()),
        TypeError,
        r"^tgt_ids: expected an integer dtype",
    ),
    (
        "lm-float",
        lambda: _model("lm")(_IDS.double()),
        TypeError,
        r"^ids: expected an integer dtype",
    ),
    (
        "encoder-bool",
        lambda: _model("encoder")(_IDS > 5),
        TypeError,
        r"^input_ids: expected an integer dtype",
    ),
    (
        "transformer-1d-src",
        lambda: _model("transformer")(_IDS[0], _IDS),
        ValueError,
        r"^src_ids: expected shape \(B, T\), got \(5,\)",
    ),
    (
        "lm-1d",
        lambda: _model("lm")(_IDS[0]),
        ValueError,
        r"^ids: expected shape \(B, T\), got \(5,\)",
    ),
    (
        "encoder-3d",
        lambda: _model("encoder")(_IDS[None]),
        ValueError,
        r"^input_ids: expected shape \(B, T\), got \(1, 2, 5\)",
    ),
    (
        "lm-list",
        lambda: _model("lm")([[3, 4]]),
        TypeError,
        r"^ids: expected a \(B, T\) integer tensor",
    ),
    (
        "transformer-src-vocab",
        lambda: _model("transformer")(_IDS + 995, _IDS),
        ValueError,
        r"^src_ids: token id \d+ is outside the vocabulary \[0, 1000\)",
    ),
    (
        "transformer-tgt-vocab",
        lambda: _model("transformer")(_IDS, _IDS + 995),
        ValueError,
        r"^tgt_ids: token id \d+ is outside the vocabulary \[0, 1000\)",
    ),
    (
        "lm-vocab",
        lambda: _model("lm")(_IDS + 995),
        ValueError,
        r"^ids: token id \d+ is outside the vocabulary \[0, 1000\)",
    ),
    (
        "encoder-negative",
        lambda: _model("encoder")(_IDS - 1000),
        ValueError,
        r"^input_ids: token id -\d+ is outside the vocabulary",
    ),
    (
        "lm-empty",
        lambda: _model("lm")(_IDS[:, :0]),
        ValueError,
        r"^ids: empty batch or sequence, shape \(2, 0\)",
    ),
    (
        "transformer-batch-mismatch",
        lambda: _model("transformer")(_IDS, token_ids(3, 4, seed=31)),
        ValueError,
        r"^tgt_ids: batch size 3 differs from src_ids' 2",
    ),
    (
        "token_type_ids-without-types",
        lambda: _model("encoder")(_IDS, token_type_ids=torch.zeros_like(_IDS)),
        ValueError,
        r"^token_type_ids: this model has no token types \(type_vocab_size=0\)",
    ),
    (
        "token_type_ids-range",
        lambda: _model("typed")(_IDS, token_type_ids=torch.full_like(_IDS, 2)),
        ValueError,
        r"^token_type_ids: token id 2 is outside the vocabulary \[0, 2\)",
    ),
    (
        "token_type_ids-shape",
        lambda: _model("typed")(_IDS, token_type_ids=torch.zeros(2, 4).long()),
        ValueError,
        r"^token_type_ids: expected shape \(2, 5\) like input_ids, got \(2, 4\)",
    ),
    (
        "attention_mask-shape",
        lambda: _model("encoder")(_IDS, attention_mask=torch.ones(2, 4)),
        ValueError,
        r"^attention_mask: expected shape \(2, 5\) like input_ids, got \(2, 4\)",
    ),
    (
        "attention_mask-float",
        lambda: _model("encoder")(_IDS, attention_mask=torch.ones(2, 5)),
        ValueError,
        r"^attention_mask: expected bool or 0/1 integers",
    ),
    (
        "attention_mask-two",
        lambda: _model("encoder")(_IDS, attention_mask=torch.full((2, 5), 2)),
        ValueError,
        r"^attention_mask: expected bool or 0/1 integers",
    ),
    (
        "learned-beyond-max_len",
        lambda: _model("encoder")(token_ids(1, 129, seed=32)),
        ValueError,
        r"positions 0\.\.128 exceed max_len=128",
    ),
    (
        "decode-memory-batch",
        lambda: _model("transformer").decode(_IDS, torch.randn(3, 4, 64)),
        ValueError,
        r"^memory: expected shape \(B=2, S, d_model=64\)",
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_model_input_raises_naming_the_argument(call, exc, pattern):
    with torch.no_grad(), pytest.raises(exc, match=pattern) as info:
        call()
    assert type(info.value) is exc


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_float64_model_loads_back_in_float64(tmp_path: Path, model_type: str):
    model = build(model_type).double()
    loaded = MODELS[model_type].from_pretrained(model.save_pretrained(tmp_path))
    assert {p.dtype for p in loaded.parameters()} == {torch.float64}
    with torch.no_grad():
        assert torch.equal(loaded(*inputs(model_type)), model(*inputs(model_type)))


def test_whole_transformer_matches_torch_nn_transformer_with_the_same_embeddings():
    """attnlab.Transformer with torch's stacks (from_torch) and torch's embedding matrix equals
    nn.Embedding + sinusoidal encoding + nn.Transformer + tied nn.Linear: logits in eval mode
    with padded sources and targets, and every gradient in training mode (dropout 0)."""
    import math

    from attnlab import Decoder, Encoder, SinusoidalPositionalEncoding

    torch.manual_seed(0)
    d, vocab = 32, 50
    ref = nn.Transformer(d, 4, 2, 2, 64, dropout=0.0, batch_first=True)
    embed = nn.Embedding(vocab, d)
    position = SinusoidalPositionalEncoding(d)
    config = TransformerConfig.preset(
        "tiny", vocab_size=vocab, d_model=d, d_ff=64, dropout=0.0, max_len=64
    )
    ours = Transformer(config)
    ours.encoder = Encoder.from_torch(ref.encoder)
    ours.decoder = Decoder.from_torch(ref.decoder)
    with torch.no_grad():
        ours.src_embed.token.weight.copy_(embed.weight)

    def reference(src: Tensor, tgt: Tensor) -> Tensor:
        src_pad, tgt_pad = src == 0, tgt == 0  # torch: True = ignore
        y = ref(
            position(embed(src) * math.sqrt(d)),
            position(embed(tgt) * math.sqrt(d)),
            tgt_mask=torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).triu(1),
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return F.linear(y, embed.weight)

    src = token_ids(3, 9, seed=1, vocab=vocab)
    tgt = token_ids(3, 7, seed=2, vocab=vocab)
    src[1, 6:] = 0
    tgt[2, 4:] = 0
    real = tgt != 0
    ours.train()
    ref.train()
    ours_logits, ref_logits = ours(src, tgt), reference(src, tgt)
    torch.testing.assert_close(ours_logits[real], ref_logits[real], rtol=0, atol=1e-5)
    loss = lambda logits: F.cross_entropy(logits[real], tgt[real])  # noqa: E731
    loss(ours_logits).backward()
    loss(ref_logits).backward()
    grads = [(ours.src_embed.token.weight, embed.weight)]
    for stack in ("encoder", "decoder"):
        mine = dict(getattr(ours, stack).named_parameters())
        for name, param in getattr(ref, stack).named_parameters():
            name = name.replace("in_proj_", "in_proj.").replace("multihead_attn", "cross_attn")
            grads.append((mine[name.replace("linear", "ff.linear")], param))
    assert len(grads) == 1 + len(list(ref.parameters()))
    for a, b in grads:
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=0)

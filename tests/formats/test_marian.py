"""Importing transformers Marian (opus-mt) models: the weights and the config.

Random ``MarianMTModel`` s built by transformers itself, in the shapes opus-mt uses (swish,
relu and gelu; sqrt(d_model) embedding scale on and off; shared and separate vocabularies;
two sizes), saved with ``save_pretrained`` and imported. Each must compute transformers'
function: logits on padded batches within 1e-5, greedy output token for token equal to
``generate(num_beams=1)``, beam-4 output equal to ``generate(num_beams=4)`` where the length
penalties coincide (attnlab's ``alpha = 0``, transformers' ``length_penalty = 0``: both rank
by log-probability; see :mod:`attnlab.formats`). Exporting the imported model back gives every
tensor bit for bit. What attnlab cannot represent is refused, naming the field, before
anything is written. Tokenizers and text: tests/formats/test_marian_text.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from attnlab import beam_search, greedy_search
from attnlab.formats.marian import (
    _marian_weights,
    from_huggingface,
    marian_permutation,
    read_marian_config,
)

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # transformers' generate on several models: tens of seconds

LOGITS_TOLERANCE = 1e-5
MAX_NEW = 12


@dataclass(frozen=True)
class Shape:
    """One random Marian model: its activation, scale, vocabularies and size."""

    name: str
    activation: str
    scale_embedding: bool
    shared: bool
    d_model: int
    layers: int
    heads: int
    ffn: int
    vocab: int = 90
    target_vocab: int = 70

    def config(self):
        vocab = self.vocab if self.shared else self.target_vocab
        pad = vocab - 1  # Marian's pad is the last id (of the smaller vocabulary when two)
        return transformers.MarianConfig(
            vocab_size=self.vocab,
            decoder_vocab_size=None if self.shared else self.target_vocab,
            share_encoder_decoder_embeddings=self.shared,
            d_model=self.d_model,
            encoder_layers=self.layers,
            decoder_layers=self.layers,
            encoder_attention_heads=self.heads,
            decoder_attention_heads=self.heads,
            encoder_ffn_dim=self.ffn,
            decoder_ffn_dim=self.ffn,
            activation_function=self.activation,
            scale_embedding=self.scale_embedding,
            pad_token_id=pad,
            decoder_start_token_id=pad,
            eos_token_id=0,
            forced_eos_token_id=None,
            max_position_embeddings=128,
        )


SHAPES = [
    Shape("swish-scaled-shared-small", "swish", True, True, 32, 2, 4, 64),
    Shape("relu-unscaled-separate-small", "relu", False, False, 32, 2, 4, 64),
    Shape("gelu-scaled-separate-larger", "gelu", True, False, 64, 3, 8, 128),
    Shape("swish-unscaled-shared-larger", "swish", False, True, 64, 3, 8, 128),
]


def random_marian(shape: Shape, directory: Path, seed: int = 0):
    """A random MarianMTModel saved by transformers in ``directory``: its final logits bias
    random too (opus-mt's is zero, a random one proves the mapping), EOS made likely enough
    that some rows finish early."""
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(shape.config()).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(std=0.5)
        model.final_logits_bias[0, 0] += 2.0  # EOS (id 0)
    model.save_pretrained(directory)
    return model


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: s.name)
def pair(request, tmp_path_factory):
    """``(shape, transformers model, attnlab model, directory)``."""
    shape = request.param
    directory = tmp_path_factory.mktemp(shape.name)
    hf = random_marian(shape, directory)
    return shape, hf, from_huggingface(directory), directory


def padded_sources(shape: Shape, seed: int = 1) -> tuple[torch.Tensor, list[list[int]]]:
    """Source ids of several lengths, each ending in EOS as Marian frames them: a right-padded
    ``(B, S)`` tensor and the rows as lists."""
    g = torch.Generator().manual_seed(seed)
    pad = shape.config().pad_token_id
    rows = []
    for length in (7, 3, 11, 1, 5):
        body = torch.randint(1, pad, (length,), generator=g).tolist()
        rows.append([*body, 0])
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return ids, rows


def hf_generate(hf, ids: torch.Tensor, pad: int, beams: int) -> list[list[int]]:
    """transformers' search, in attnlab's form: no decoder start, nothing from EOS on."""
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids,
            attention_mask=(ids != pad).long(),
            num_beams=beams,
            do_sample=False,
            length_penalty=0.0,
            early_stopping="never",
            max_new_tokens=MAX_NEW,
            bad_words_ids=[[pad]],  # opus-mt's generation config: pad is never generated
            forced_eos_token_id=None,
        )
    rows = []
    for row in out.tolist():
        row = row[1:]
        rows.append(row[: row.index(0)] if 0 in row else [t for t in row if t != pad])
    return rows


def test_config_fields(pair):
    shape, hf, model, _ = pair
    c = model.config
    assert c.activation == {"swish": "silu", "relu": "relu", "gelu": "gelu"}[shape.activation]
    assert c.scale_embeddings is shape.scale_embedding
    assert c.share_embeddings is shape.shared
    assert c.target_vocab_size == (shape.vocab if shape.shared else shape.target_vocab)
    assert c.output_bias and c.tie_output and not c.norm_first
    assert (c.pad_id, c.bos_id, c.eos_id) == (hf.config.pad_token_id,) * 2 + (0,)
    assert c.decoder_starts_from_pad


def test_logits_on_padded_batches(pair):
    shape, hf, model, _ = pair
    src, _ = padded_sources(shape)
    pad = hf.config.pad_token_id
    g = torch.Generator().manual_seed(2)
    tgt = torch.randint(1, pad, (src.shape[0], 9), generator=g)
    tgt[:, 0] = pad  # the decoder starts from pad
    tgt[1, 6:] = pad  # a shorter target, right-padded
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt).logits
    real = torch.ones_like(tgt, dtype=torch.bool)
    real[1, 6:] = False  # positions after a row's end are never read
    torch.testing.assert_close(ours[real], theirs[real], atol=LOGITS_TOLERANCE, rtol=0)


@pytest.mark.parametrize("beams", [1, 4])
def test_search_equals_generate(pair, beams):
    shape, hf, model, _ = pair
    src, rows = padded_sources(shape)
    theirs = hf_generate(hf, src, hf.config.pad_token_id, beams)
    if beams == 1:
        ours = greedy_search(model, rows, max_new_tokens=MAX_NEW).tolist()
    else:
        ours = beam_search(model, rows, beam_size=4, alpha=0.0, max_new_tokens=MAX_NEW).tolist()
    assert ours == theirs
    assert any(len(r) < MAX_NEW for r in ours), "no row finished early: EOS never tested"


def test_export_gives_back_every_tensor_bit_for_bit(pair):
    _, _, model, directory = pair
    from safetensors.torch import load_file

    original = load_file(str(directory / "model.safetensors"))
    exported = _marian_weights(model)
    assert sorted(exported) == sorted(original)
    for name, tensor in original.items():
        assert torch.equal(exported[name], tensor), name


def test_the_permutation_is_inverted():
    perm = marian_permutation(8)
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert torch.argsort(perm)[perm].tolist() == list(range(8))


def test_fp16_weights_are_widened(tmp_path):
    shape = SHAPES[0]
    hf = random_marian(shape, tmp_path / "fp32")
    hf.half().save_pretrained(tmp_path / "fp16")
    model = from_huggingface(tmp_path / "fp16")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    src, _ = padded_sources(shape)
    tgt = torch.full((src.shape[0], 1), hf.config.pad_token_id)
    with torch.no_grad():
        half = hf.float()(
            input_ids=src, attention_mask=(src != tgt[0, 0]).long(), decoder_input_ids=tgt
        ).logits
    torch.testing.assert_close(model(src, tgt), half, atol=LOGITS_TOLERANCE, rtol=0)


def test_pytorch_model_bin_is_read_weights_only(tmp_path):
    shape = SHAPES[1]
    hf = random_marian(shape, tmp_path / "a")
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "config.json").write_text((tmp_path / "a" / "config.json").read_text())
    torch.save(hf.state_dict(), directory / "pytorch_model.bin")
    model = from_huggingface(directory)
    reference = from_huggingface(tmp_path / "a")
    expected = reference.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def _write_config(directory: Path, **changes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = SHAPES[0].config().to_dict()
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"model_type": "bart"}, "model_type='bart'"),
        ({"normalize_before": True}, "normalize_before=True"),
        ({"static_position_embeddings": False}, "static_position_embeddings=False"),
        ({"decoder_attention_heads": 2}, "decoder_attention_heads=2"),
        ({"decoder_ffn_dim": 32}, "decoder_ffn_dim=32"),
        ({"activation_function": "tanh"}, "activation_function='tanh'"),
        ({"d_model": 30}, "d_model"),
    ],
)
def test_what_attnlab_cannot_represent_is_named(tmp_path, changes, named):
    directory = _write_config(tmp_path / "m", **changes)
    with pytest.raises(ValueError) as caught:
        read_marian_config(directory)
    message = str(caught.value)
    assert named in message and "\n" not in message


def test_not_a_marian_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        read_marian_config(tmp_path)
    directory = _write_config(tmp_path / "m")
    with pytest.raises(FileNotFoundError, match=r"no model\.safetensors or pytorch_model\.bin"):
        from_huggingface(directory)


def test_a_missing_or_foreign_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    random_marian(SHAPES[0], tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    name = "model.encoder.layers.1.fc1.weight"
    save_file({k: v for k, v in weights.items() if k != name}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=f"no '{name}'"):
        from_huggingface(tmp_path)
    weights["model.encoder.layernorm_embedding.weight"] = torch.ones(32)
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="layernorm_embedding"):
        from_huggingface(tmp_path)

"""The Vision Transformer (attnlab.models.vision): config and presets, patches, the 2-D sin-cos
table, the model's shapes and input checks, permutation invariance without positions, save / load,
the closed-form parameter count (ViT-B/16: 86,567,656), attention rollout, and its pictures.

Models are tiny (8x8 or 12x12 images); tolerances are stated where floats are compared.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import attnlab
from attnlab.instruments import viz
from attnlab.models.saved import read_config
from attnlab.models.transformer import TransformerLM, count_parameters
from attnlab.models.vision import (
    PatchEmbedding,
    VisionConfig,
    VisionTransformer,
    attention_rollout,
    class_token_rollout,
    count_vit_parameters,
    patchify,
    sincos_2d_table,
)

POSITIONAL = ["learned", "sinusoidal", "none"]


def small(**overrides) -> VisionConfig:
    """12x12 RGB images in 3x3 patches of 4x4: a non-trivial channel count and grid."""
    fields = {
        "image_size": 12,
        "patch_size": 4,
        "in_channels": 3,
        "num_classes": 5,
        "d_model": 32,
        "num_heads": 2,
        "d_ff": 48,
        "num_layers": 2,
        "dropout": 0.0,
    }
    return VisionConfig(**{**fields, **overrides})


def build(config: VisionConfig, seed: int = 0) -> VisionTransformer:
    """A model in eval mode whose zero-initialised head is replaced by random weights, so that
    its logits carry information."""
    torch.manual_seed(seed)
    model = VisionTransformer(config).eval()
    with torch.no_grad():
        nn.init.normal_(model.head.weight, std=0.5)
        nn.init.normal_(model.head.bias, std=0.5)
    return model


def images_for(config: VisionConfig, batch: int = 2, seed: int = 1) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    size = (batch, config.in_channels, config.image_size, config.image_size)
    return torch.randn(size, generator=generator)


def permute_patches(images: Tensor, patch_size: int, order: Tensor) -> Tensor:
    """The images with their ``patch_size`` blocks rearranged: block ``i`` (row-major) of the
    result is block ``order[i]`` of ``images``."""
    b, c, h, w = images.shape
    g = h // patch_size
    blocks = images.reshape(b, c, g, patch_size, g, patch_size).permute(0, 2, 4, 1, 3, 5)
    blocks = blocks.reshape(b, g * g, c, patch_size, patch_size)[:, order]
    blocks = blocks.reshape(b, g, g, c, patch_size, patch_size).permute(0, 3, 1, 4, 2, 5)
    return blocks.reshape(b, c, h, w)


# -- config ------------------------------------------------------------------------------------


def test_presets_and_derived_sizes():
    assert VisionConfig.preset_names() == ["digits", "vit-ti16", "vit-s16", "vit-b16", "vit-l16"]
    digits = VisionConfig.preset("digits")
    assert (digits.image_size, digits.patch_size, digits.in_channels) == (8, 2, 1)
    assert (digits.grid_size, digits.num_patches, digits.num_classes) == (4, 16, 10)
    base = VisionConfig.preset("vit-b16")
    assert base == VisionConfig()  # the defaults are ViT-B/16
    assert (base.grid_size, base.num_patches, base.layer_norm_eps) == (14, 196, 1e-6)
    large = VisionConfig.preset("vit-l16", num_classes=10)
    assert (large.d_model, large.num_heads, large.d_ff, large.num_layers) == (1024, 16, 4096, 24)
    assert large.num_classes == 10


def test_config_round_trips_through_a_dict():
    config = small(positional="sinusoidal", bias=False)
    data = config.to_dict()
    assert "PRESETS" not in data
    assert VisionConfig.from_dict(data) == config
    with pytest.raises(ValueError, match=r"unknown config fields \['vocab_size'\]"):
        VisionConfig.from_dict({**data, "vocab_size": 3})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"image_size": 30, "patch_size": 16},
            r"^image_size: 30 is not divisible by patch_size=16",
        ),
        ({"d_model": 30, "num_heads": 4}, r"^d_model: 30 is not divisible by num_heads=4"),
        ({"d_model": 6, "num_heads": 2, "positional": "sinusoidal"}, r"^d_model: 6 .* by 4"),
        ({"dropout": 1.0}, r"^dropout: expected a number in \[0, 1\)"),
        ({"attention_dropout": -0.1}, r"^attention_dropout: expected a number in \[0, 1\)"),
        ({"num_layers": 0}, r"^num_layers: expected a positive int, got 0"),
        ({"patch_size": 2.0}, r"^patch_size: expected a positive int, got 2.0"),
        ({"in_channels": True}, r"^in_channels: expected a positive int, got True"),
        ({"positional": "rotary"}, r"^positional: expected one of \['learned', 'sinusoidal'"),
        ({"activation": "swish"}, r"^activation: expected one of"),
        ({"layer_norm_eps": 0}, r"^layer_norm_eps: expected a positive number"),
        ({"bias": 1}, r"^bias: expected a bool, got 1"),
    ],
)
def test_config_errors_name_the_field(overrides: dict, message: str):
    with pytest.raises(ValueError, match=message):
        small(**overrides)


def test_preset_errors():
    with pytest.raises(ValueError, match=r"^preset: unknown name 'vit-h14'; expected one of"):
        VisionConfig.preset("vit-h14")
    with pytest.raises(ValueError, match=r"^overrides: unknown config fields \['heads'\]"):
        VisionConfig.preset("digits", heads=2)
    with pytest.raises(TypeError, match=r"^config: expected a VisionConfig, got dict"):
        VisionTransformer(small().to_dict())


# -- patches -----------------------------------------------------------------------------------


def test_patchify_order_is_row_major_then_channel_major():
    images = torch.arange(2 * 3 * 12 * 12, dtype=torch.float32).reshape(2, 3, 12, 12)
    patches = patchify(images, 4)  # (2, 9, 48)
    assert patches.shape == (2, 9, 3 * 4 * 4)
    for r in range(3):
        for c in range(3):
            block = images[:, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4]  # (B, C, 4, 4)
            assert torch.equal(patches[:, 3 * r + c], block.reshape(2, -1))


def test_conv_patch_embedding_is_patchify_then_linear():
    torch.manual_seed(0)
    embed = PatchEmbedding(12, 4, 3, 32)
    with torch.no_grad():
        embed.proj.bias.normal_()
    images = torch.randn(2, 3, 12, 12)
    weight = embed.proj.weight.reshape(32, -1)  # (d, C*P*P)
    expected = patchify(images, 4) @ weight.T + embed.proj.bias
    torch.testing.assert_close(embed(images), expected, atol=1e-6, rtol=0)


def test_patchify_errors():
    with pytest.raises(ValueError, match=r"^images: 10x12 is not divisible into 4x4 patches"):
        patchify(torch.zeros(1, 3, 10, 12), 4)
    with pytest.raises(ValueError, match=r"^images: expected shape \(B, C, H, W\), got \(3, 12"):
        patchify(torch.zeros(3, 12, 12), 4)
    with pytest.raises(ValueError, match=r"^patch_size: expected a positive int, got 0"):
        patchify(torch.zeros(1, 3, 12, 12), 0)


# -- the 2-D sin-cos table ---------------------------------------------------------------------


def test_sincos_2d_table_rows_and_columns():
    grid, d = 5, 16
    table = sincos_2d_table(grid, d)
    assert table.shape == (grid * grid, d) and table.dtype == torch.float64
    half = d // 2
    by_position = table.reshape(grid, grid, d)  # (row, column, d)
    # The first half is a function of the row alone, the second of the column alone.
    assert torch.equal(by_position[:, :, :half], by_position[:, :1, :half].expand(-1, grid, -1))
    assert torch.equal(by_position[:, :, half:], by_position[:1, :, half:].expand(grid, -1, -1))
    # Each half is the 1-D encoding [sin(p w), cos(p w)] with w_k = 10000^(-k / (d / 4)).
    omega = 10000.0 ** (-torch.arange(d // 4, dtype=torch.float64) / (d // 4))
    position = torch.arange(grid, dtype=torch.float64)[:, None] * omega
    one_d = torch.cat([position.sin(), position.cos()], dim=1)  # (grid, d / 2)
    torch.testing.assert_close(by_position[:, 0, :half], one_d, atol=1e-12, rtol=0)
    torch.testing.assert_close(by_position[0, :, half:], one_d, atol=1e-12, rtol=0)
    # sin^2 + cos^2 = 1 per frequency and axis: every row has norm sqrt(d / 2).
    norms = torch.full((grid * grid,), math.sqrt(half), dtype=torch.float64)
    torch.testing.assert_close(table.norm(dim=1), norms)
    with pytest.raises(ValueError, match=r"^d_model: 18 is not divisible by 4"):
        sincos_2d_table(3, 18)


def test_model_position_tables():
    sinusoidal = VisionTransformer(small(positional="sinusoidal"))
    table = sinusoidal.positional_table()
    assert table.shape == (1 + 9, 32) and table.dtype == torch.float32
    assert torch.equal(table[0], torch.zeros(32))  # the class token gets no position
    torch.testing.assert_close(table[1:], sincos_2d_table(3, 32).float())
    assert "position_embedding" not in sinusoidal.state_dict()  # fixed: rebuilt, not saved
    learned = VisionTransformer(small(positional="learned"))
    assert learned.positional_table().shape == (1 + 9, 32)
    assert isinstance(learned.position_embedding, nn.Parameter)
    assert learned.positional_table().std().item() == pytest.approx(0.02, rel=0.2)
    assert VisionTransformer(small(positional="none")).positional_table() is None


# -- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", POSITIONAL)
@pytest.mark.parametrize("name", ["digits", "small"])
def test_shapes(name: str, positional: str):
    config = (
        VisionConfig.preset("digits", positional=positional)
        if name == "digits"
        else small(positional=positional)
    )
    model = build(config)
    images = images_for(config, batch=3)
    tokens = 1 + config.num_patches
    assert model(images).shape == (3, config.num_classes)
    features = model.features(images)
    assert features.shape == (3, tokens, config.d_model)
    # eq. 4: the final LayerNorm (weight 1, bias 0 at init) gives each token mean 0, var 1.
    torch.testing.assert_close(features.mean(-1), torch.zeros(3, tokens), atol=1e-5, rtol=0)
    weights = model.attention(images)
    assert len(weights) == config.num_layers
    for w in weights:
        assert w.shape == (3, config.num_heads, tokens, tokens)
        assert not w.requires_grad
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)


def test_fresh_head_is_zero_and_logits_uniform():
    model = VisionTransformer(small()).eval()
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    logits = model(images_for(small()))
    assert torch.equal(logits, torch.zeros(2, 5))
    loss = nn.functional.cross_entropy(logits, torch.tensor([0, 3]))
    assert loss.item() == pytest.approx(math.log(5))


def test_training_mode_dropout_and_gradients():
    config = small(dropout=0.2)
    model = build(config).train()
    images = images_for(config)
    assert not torch.equal(model(images), model(images))  # dropout is active
    model.eval()
    assert torch.equal(model(images), model(images))
    assert torch.equal(model(images.double()), model(images))  # cast to the weights' dtype
    model.train()
    model(images).sum().backward()
    assert model.class_token.grad is not None and model.patch_embed.proj.weight.grad is not None


def test_bad_images_are_refused_with_what_to_change():
    digits = build(VisionConfig.preset("digits"))
    with pytest.raises(
        ValueError,
        match=r"^images: expected 1 channel\(s\) \(in_channels=1\), got 3 in shape \(2, 3, 8, 8\)",
    ):
        digits(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"^images: expected 8x8 images \(image_size=8\), got 9x8"):
        digits(torch.zeros(2, 1, 9, 8))
    with pytest.raises(ValueError, match=r"add the channel dimension: images.unsqueeze\(1\)"):
        digits(torch.zeros(2, 8, 8))
    with pytest.raises(TypeError, match=r"^images: expected a floating dtype, got torch.uint8"):
        digits(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"^images: expected a float tensor .* got list"):
        digits([[0.0]])
    with pytest.raises(ValueError, match=r"^images: empty batch"):
        digits(torch.zeros(0, 1, 8, 8))
    rgb = build(small())
    with pytest.raises(ValueError, match=r"add the batch dimension: images.unsqueeze\(0\)"):
        rgb(torch.zeros(3, 12, 12))
    with pytest.raises(ValueError, match=r"^images: expected shape \(B, 3, 12, 12\), got \(1, 1"):
        rgb(torch.zeros(1, 1, 1, 3, 12, 12))
    with pytest.raises(ValueError, match=r"^image_size: 10 is not divisible by patch_size=4"):
        PatchEmbedding(10, 4, 3, 32)


def test_permuting_patches_changes_nothing_without_positions():
    """Without positions the encoder sees a set of patches: rearranging the image's blocks
    permutes the tokens (so the patch embedding is exercised) and leaves the class token's
    output, hence the logits, unchanged (atol 1e-5). With learned positions they change."""
    order = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(order, torch.arange(9))
    images = images_for(small(), batch=2)
    shuffled = permute_patches(images, 4, order)
    assert not torch.equal(shuffled, images)

    blind = build(small(positional="none"))
    torch.testing.assert_close(
        blind.patch_embed(shuffled), blind.patch_embed(images)[:, order], atol=1e-6, rtol=0
    )
    torch.testing.assert_close(blind(shuffled), blind(images), atol=1e-5, rtol=0)

    for positional in ("learned", "sinusoidal"):
        located = build(small(positional=positional))
        with torch.no_grad():
            if positional == "learned":  # N(0, 0.02^2) barely moves the logits; make it count
                located.position_embedding.normal_()
        difference = (located(shuffled) - located(images)).abs().max().item()
        assert difference > 1e-2, (positional, difference)


# -- save / load -------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", POSITIONAL)
def test_save_and_load_round_trip(tmp_path: Path, positional: str):
    config = small(positional=positional)
    model = build(config)
    images = images_for(config)
    directory = model.save_pretrained(tmp_path / "vit")
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "model.safetensors"]
    model_type, read = read_config(directory)
    assert model_type == "vit" and read == config

    loaded = VisionTransformer.from_pretrained(directory)
    assert not loaded.training
    assert torch.equal(loaded(images), model(images))
    any_model = attnlab.load_pretrained(directory)
    assert type(any_model) is VisionTransformer
    assert torch.equal(any_model(images), model(images))


def test_loading_as_the_wrong_model_names_both(tmp_path: Path):
    directory = build(small()).save_pretrained(tmp_path / "vit")
    with pytest.raises(ValueError, match=r"holds a 'vit' model \(VisionTransformer\), not 'lm'"):
        TransformerLM.from_pretrained(directory)


def test_save_and_load_keeps_float64(tmp_path: Path):
    model = build(small(positional="sinusoidal")).double()
    images = images_for(small()).double()
    loaded = attnlab.load_pretrained(model.save_pretrained(tmp_path / "vit64"))
    assert loaded.positional_table().dtype == torch.float64
    assert torch.equal(loaded(images), model(images))


# -- parameter count ---------------------------------------------------------------------------


def test_vit_b16_has_the_published_parameter_count():
    """86,567,656: ViT-B/16 at 224 px with 1000 classes (timm's vit_base_patch16_224)."""
    config = VisionConfig.preset("vit-b16")
    assert count_vit_parameters(config) == config.num_parameters() == 86_567_656
    assert count_parameters(config, "vit") == 86_567_656
    with torch.device("meta"):  # built without memory: the shapes alone
        model = VisionTransformer(config)
    assert model.num_parameters() == 86_567_656
    # The other presets, as timm counts them.
    assert count_vit_parameters(VisionConfig.preset("vit-ti16")) == 5_717_416
    assert count_vit_parameters(VisionConfig.preset("vit-s16")) == 22_050_664
    assert count_vit_parameters(VisionConfig.preset("vit-l16")) == 304_326_632


@pytest.mark.parametrize(
    "config",
    [
        VisionConfig.preset("digits"),
        small(),
        small(positional="sinusoidal"),
        small(positional="none", bias=False),
        small(in_channels=1, num_classes=1, num_layers=3, d_ff=7),
    ],
    ids=["digits", "small", "sinusoidal", "none-nobias", "odd"],
)
def test_closed_form_count_equals_the_built_model(config: VisionConfig):
    model = VisionTransformer(config)
    total = sum(p.numel() for p in model.parameters())
    assert count_vit_parameters(config) == model.num_parameters() == total


def test_count_errors():
    with pytest.raises(TypeError, match=r"^config: expected a VisionConfig, got TransformerConfig"):
        count_vit_parameters(attnlab.TransformerConfig.preset("tiny"))
    with pytest.raises(TypeError, match=r"^config: expected a VisionConfig for model_type='vit'"):
        count_parameters(attnlab.TransformerConfig.preset("tiny"), "vit")


# -- attention rollout -------------------------------------------------------------------------


def random_attention(batch: int, heads: int, tokens: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, heads, tokens, tokens, generator=generator, dtype=torch.float64)
    return scores.softmax(dim=-1)


def residual_step(a: Tensor) -> Tensor:
    """One layer by hand: mean over heads, 0.5 A + 0.5 I, rows renormalised."""
    fused = 0.5 * a.mean(dim=1) + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)
    return fused / fused.sum(dim=-1, keepdim=True)


def test_rollout_of_one_and_two_layers():
    a1, a2 = random_attention(2, 3, 5, seed=0), random_attention(2, 3, 5, seed=1)
    torch.testing.assert_close(attention_rollout([a1]), residual_step(a1), atol=1e-12, rtol=0)
    expected = residual_step(a2) @ residual_step(a1)  # A_2 A_1: the last layer on the left
    rollout = attention_rollout([a1, a2])
    torch.testing.assert_close(rollout, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 5, dtype=torch.float64))
    # Without the residual: the plain product of the head means.
    plain = attention_rollout([a1, a2], residual=False)
    torch.testing.assert_close(plain, a2.mean(1) @ a1.mean(1), atol=1e-12, rtol=0)


def test_rollout_head_fusion_max_and_min_renormalise():
    a = random_attention(1, 4, 3, seed=2)
    for fusion, fused in (("max", a.amax(dim=1)), ("min", a.amin(dim=1))):
        expected = fused / fused.sum(dim=-1, keepdim=True)
        got = attention_rollout([a], head_fusion=fusion, residual=False)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_rollout_of_a_hand_checked_case():
    """One head, two tokens, A = [[0, 1], [1, 0]]: 0.5 A + 0.5 I is all 0.5, whatever the
    layers; and with the identity attention the rollout is the identity."""
    swap = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]])
    torch.testing.assert_close(attention_rollout([swap, swap]), torch.full((1, 2, 2), 0.5))
    identity = torch.eye(2)[None, None]
    assert torch.equal(attention_rollout([identity, identity, identity]), torch.eye(2)[None])


def test_class_token_rollout_of_a_model():
    config = VisionConfig.preset("digits")
    model = build(config)
    images = images_for(config, batch=3)
    maps = class_token_rollout(model, images)
    assert maps.shape == (3, 4, 4)
    assert bool((maps >= 0).all())
    torch.testing.assert_close(maps.sum(dim=(1, 2)), torch.ones(3), atol=1e-5, rtol=0)
    rollout = attention_rollout(model.attention(images))
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3, 17), atol=1e-5, rtol=0)
    row = rollout[:, 0, 1:]
    torch.testing.assert_close(maps, (row / row.sum(-1, keepdim=True)).reshape(3, 4, 4))


def test_rollout_errors():
    a = random_attention(1, 2, 3, seed=0)
    with pytest.raises(ValueError, match=r"^head_fusion: expected one of \['mean', 'max', 'min'"):
        attention_rollout([a], head_fusion="sum")
    with pytest.raises(ValueError, match=r"^attentions: expected at least one layer"):
        attention_rollout([])
    with pytest.raises(TypeError, match=r"^attentions: expected a list .* got a tensor of shape"):
        attention_rollout(a)
    with pytest.raises(ValueError, match=r"^attentions\[1\]: expected a \(B, H, T, T\) tensor"):
        attention_rollout([a, a[0]])
    with pytest.raises(ValueError, match=r"^attentions\[1\]: shape \(1, 2, 4, 4\) differs"):
        attention_rollout([a, random_attention(1, 2, 4, seed=1)])
    with pytest.raises(TypeError, match=r"^residual: expected a bool"):
        attention_rollout([a], residual=1)
    with pytest.raises(TypeError, match=r"^model: expected a VisionTransformer, got Linear"):
        class_token_rollout(nn.Linear(2, 2), torch.zeros(1, 1, 8, 8))


# -- pictures ----------------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png_file(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 0
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("with_class_row", [True, False])
def test_vit_positional_similarity_writes_the_mosaic(tmp_path: Path, with_class_row: bool):
    model = VisionTransformer(small(positional="learned"))
    table = model.positional_table()
    table = table if with_class_row else table[1:]
    path = tmp_path / "pos" / "similarity.png"
    fig = viz.vit_positional_similarity(table, 3, path=path, dpi=60)
    check_png_file(path)
    ax = next(ax for ax in fig.axes if ax.get_label() == "similarity")
    mosaic = np.asarray(ax.images[0].get_array(), dtype=np.float64)
    assert mosaic.shape == (11, 11)  # 3 tiles of 3 and 2 blank lines
    assert np.isnan(mosaic[3]).all() and np.isnan(mosaic[:, 7]).all()
    unit = nn.functional.normalize(model.positional_table()[1:].detach(), dim=1)
    cosine = (unit @ unit.T).numpy()  # (9, 9)
    # tile (1, 2) is patch 5's similarity to every patch, as the 3x3 grid
    np.testing.assert_allclose(mosaic[4:7, 8:11], cosine[5].reshape(3, 3), atol=1e-6)
    assert mosaic[5, 10] == pytest.approx(1.0, abs=1e-6)  # itself


def test_vit_positional_similarity_refuses_wrong_shapes():
    with pytest.raises(ValueError, match=r"^table: expected 9 rows \(grid=3: 3x3 patches\) or 10"):
        viz.vit_positional_similarity(torch.zeros(8, 4), 3)
    with pytest.raises(ValueError, match=r"^table: expected shape \(N, d\) or \(1 \+ N, d\)"):
        viz.vit_positional_similarity(torch.zeros(1, 10, 4), 3)
    with pytest.raises(TypeError, match=r"^table: expected an \(N, d\)"):
        viz.vit_positional_similarity(np.zeros((9, 4)), 3)
    with pytest.raises(ValueError, match=r"^grid: expected a positive int"):
        viz.vit_positional_similarity(torch.zeros(9, 4), 0)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_attention_rollout_map_writes_three_panels(tmp_path: Path, channels: int):
    config = small(in_channels=max(channels, 1))
    model = build(config)
    images = images_for(config, batch=2)
    maps = class_token_rollout(model, images)  # (2, 3, 3)
    image = images[1, 0] if channels == 0 else images[1]
    path = tmp_path / f"rollout{channels}.png"
    fig = viz.attention_rollout_map(image, maps[1], title="test", path=path, dpi=60)
    check_png_file(path)
    labelled = {ax.get_label(): ax for ax in fig.axes if ax.get_label()}
    assert {"image", "rollout", "overlay"} <= set(labelled)
    shown = np.asarray(labelled["rollout"].images[0].get_array())
    assert shown.shape == (12, 12)
    expected = np.kron(maps[1].numpy(), np.ones((4, 4)))  # each patch one 4x4 block
    np.testing.assert_allclose(shown, expected, atol=1e-7)


def test_attention_rollout_map_refuses_wrong_shapes():
    image, rollout = torch.rand(3, 12, 12), torch.rand(3, 3)
    with pytest.raises(ValueError, match=r"^rollout: expected shape \(grid, grid\), got \(2, 3, 3"):
        viz.attention_rollout_map(image, torch.rand(2, 3, 3))
    with pytest.raises(ValueError, match=r"^rollout: expected a square \(grid, grid\) map"):
        viz.attention_rollout_map(image, torch.rand(5, 5))
    with pytest.raises(ValueError, match=r"^image: expected one \(C, H, W\) or \(H, W\) image"):
        viz.attention_rollout_map(torch.rand(1, 3, 12, 12), rollout)
    with pytest.raises(ValueError, match=r"channels-last \(H, W, C\)"):
        viz.attention_rollout_map(torch.rand(12, 12, 3), rollout)
    with pytest.raises(TypeError, match=r"^rollout: expected a floating dtype"):
        viz.attention_rollout_map(image, torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^alpha: expected a number in \(0, 1\]"):
        viz.attention_rollout_map(image, rollout, alpha=2.0)

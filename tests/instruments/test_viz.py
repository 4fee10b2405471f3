"""Pictures: every function writes a PNG of the figure's size that is not blank, and draws the
numbers it was given (heatmap data compared exactly with the float32 weights, mask panels with
the boolean masks, the schedule's peak at the warm-up step).

Figures are small and at 80 dpi to keep the module fast. Any warning is an error here: a
constrained-layout or glyph warning means a picture that does not look as intended.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.image import imread

from attnlab import AttentionMaps, Transformer, TransformerConfig, TransformerLM
from attnlab.instruments import viz
from attnlab.nn.masks import causal_mask, combine_masks, key_mask, padding_mask
from attnlab.nn.positional import sinusoidal_table
from attnlab.train.schedule import peak_lr

pytestmark = pytest.mark.filterwarnings("error")

DPI = 80


# -- helpers ------------------------------------------------------------------------------------


def check_png(fig: Figure, path: Path) -> np.ndarray:
    """The PNG at ``path`` is the figure: its pixel size, several colours, not flat."""
    assert path.is_file()
    image = imread(path)  # (H, W, 3 or 4) floats in [0, 1]
    width, height = fig.get_size_inches() * fig.dpi
    assert fig.dpi == DPI
    assert image.shape[:2] == (int(height), int(width))  # Agg truncates to whole pixels
    rgb = image[..., :3]
    colours = np.unique((rgb * 255).round().astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 16, f"{path.name}: {len(colours)} colours, looks blank"
    assert rgb.std() > 0.05, f"{path.name}: pixel std {rgb.std():.3f}, looks blank"
    return image


def axes_by_label(fig: Figure) -> dict[str, object]:
    return {ax.get_label(): ax for ax in fig.axes if ax.get_label()}


def image_data(ax) -> np.ndarray:
    assert len(ax.images) == 1
    return np.asarray(ax.images[0].get_array())


def no_temp_files(folder: Path) -> None:
    leftovers = [p.name for p in folder.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def softmax_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(3 * torch.randn(*shape, generator=generator), dim=-1)


# -- attention_heatmaps -------------------------------------------------------------------------


def test_heatmaps_grid_labels_and_data(tmp_path: Path) -> None:
    weights = softmax_weights(2, 3, 5, 6)  # (L, H, T_q, T_k)
    queries = ["the", "cat", "$5", "a $b$ c", "sat"]  # "$" must not start mathtext
    keys = ["die", "Katze", "saß", "auf", "der", "Matte"]
    path = tmp_path / "deep" / "er" / "grid.png"
    fig = viz.attention_heatmaps(weights, queries, keys, title="toy", path=path, dpi=DPI)
    check_png(fig, path)
    no_temp_files(tmp_path)
    panels = {k: v for k, v in axes_by_label(fig).items() if k.startswith("layer ")}
    assert len(panels) == 2 * 3
    for layer in range(2):
        for head in range(3):
            data = image_data(panels[f"layer {layer} head {head}"])
            assert np.array_equal(data, weights[layer, head].numpy())
    # one colorbar, scale 0..1
    assert panels["layer 0 head 0"].images[0].get_clim() == (0.0, 1.0)
    bottom_left = panels["layer 1 head 0"]
    assert [t.get_text() for t in bottom_left.get_xticklabels()] == [
        "die",
        "Katze",
        "saß",
        "auf",
        "der",
        "Matte",
    ]
    assert [t.get_text() for t in bottom_left.get_yticklabels()][2] == r"\$5"


def test_heatmaps_inputs_and_selection() -> None:
    weights = softmax_weights(3, 4, 4, 4)
    as_list = [w.to(torch.bfloat16) for w in weights]  # a list over layers, any float dtype
    fig = viz.attention_heatmaps(as_list, layers=[-1], heads=[0, 2], dpi=DPI)
    panels = axes_by_label(fig)
    assert sorted(k for k in panels if k.startswith("layer")) == [
        "layer 2 head 0",
        "layer 2 head 2",
    ]
    data = image_data(panels["layer 2 head 2"])
    assert np.array_equal(data, weights[2, 2].to(torch.bfloat16).float().numpy())
    # (H, T_q, T_k) and (T_q, T_k) tensors are one layer; default labels are positions
    fig = viz.attention_heatmaps(weights[0], dpi=DPI)
    assert sum(k.startswith("layer 0 head") for k in axes_by_label(fig)) == 4
    fig = viz.attention_heatmaps(weights[0, 1], dpi=DPI)
    ax = axes_by_label(fig)["layer 0 head 0"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2", "3"]
    # self-attention: the key labels default to the query labels
    fig = viz.attention_heatmaps(weights[0, :1], ["a", "b", "c", "d"], dpi=DPI)
    ax = axes_by_label(fig)["layer 0 head 0"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]


def test_heatmaps_grow_with_the_grid_and_stay_readable() -> None:
    small = viz.attention_heatmaps(softmax_weights(1, 1, 5, 5), dpi=DPI)
    big = viz.attention_heatmaps(softmax_weights(6, 8, 40, 40), [f"w{i}" for i in range(40)])
    assert (big.get_size_inches() > 3 * small.get_size_inches()).all()
    ax = axes_by_label(big)["layer 5 head 0"]
    labels = ax.get_xticklabels()
    assert len(labels) == 40  # every token labelled at 40 tokens
    assert 4 <= labels[0].get_fontsize() < 9  # shrunk, not below 4 points
    # long sequences: labels thinned rather than shrunk further
    long = viz.attention_heatmaps(softmax_weights(1, 1, 200, 200), dpi=DPI)
    ax = axes_by_label(long)["layer 0 head 0"]
    assert 10 < len(ax.get_xticklabels()) < 200


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"weights": torch.rand(1, 2, 3, 4, 5)}, ValueError, r"^weights: expected shape"),
        ({"weights": torch.rand(4)}, ValueError, r"^weights: expected shape"),
        ({"weights": [torch.rand(2, 1, 3, 3)]}, ValueError, r"^weights\[0\]: .*attention_maps"),
        (
            {"weights": [torch.rand(2, 3, 3), torch.rand(2, 3, 4)]},
            ValueError,
            r"^weights\[1\]: shape",
        ),
        ({"weights": []}, ValueError, r"^weights: expected at least one layer"),
        ({"weights": "abc"}, TypeError, r"^weights: expected a Tensor"),
        ({"weights": torch.ones(2, 3, 3, dtype=torch.long)}, TypeError, r"^weights: .*floating"),
        ({"query_tokens": ["a", "b"]}, ValueError, r"^query_tokens: expected 3 labels"),
        ({"query_tokens": "abc"}, TypeError, r"^query_tokens: expected a sequence"),
        ({"key_tokens": ["a"] * 5}, ValueError, r"^key_tokens: expected 4 labels"),
        ({"layers": [2]}, ValueError, r"^layers: index 2 out of range for 2 layers"),
        ({"heads": []}, ValueError, r"^heads: expected at least one head"),
        ({"heads": ["0"]}, TypeError, r"^heads: expected int"),
        ({"max_cells": 5}, ValueError, r"^weights: 2 layers x 3 heads = 6 heatmaps .*max_cells"),
        ({"max_cells": 0}, ValueError, r"^max_cells: expected a positive int"),
        ({"dpi": 0}, ValueError, r"^dpi: expected a positive number"),
    ],
)
def test_heatmaps_errors(kwargs: dict, error: type, message: str) -> None:
    arguments = {"weights": softmax_weights(2, 3, 3, 4), **kwargs}
    with pytest.raises(error, match=message):
        viz.attention_heatmaps(**arguments)


# -- attention_maps -----------------------------------------------------------------------------

SRC = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])  # pad_id 0; sentence 1 has 3 real tokens
TGT = torch.tensor([[1, 5, 6, 7], [1, 5, 0, 0]])  # sentence 1 has 2


@pytest.fixture(scope="module")
def maps() -> AttentionMaps:
    config = TransformerConfig.preset("tiny", vocab_size=20, d_model=16, d_ff=32, num_heads=2)
    torch.manual_seed(0)
    return Transformer(config).eval().attention(SRC, TGT)


def test_attention_maps_crop_pads(maps: AttentionMaps, tmp_path: Path) -> None:
    figures = viz.attention_maps(
        maps, index=1, src_length=3, tgt_length=2, out_dir=tmp_path / "maps", dpi=DPI
    )
    assert list(figures) == ["encoder", "decoder", "cross"]
    for kind, fig in figures.items():
        check_png(fig, tmp_path / "maps" / f"{kind}.png")
    no_temp_files(tmp_path)
    expected_shapes = {"encoder": (3, 3), "decoder": (2, 2), "cross": (2, 3)}
    for kind, fig in figures.items():
        panels = {k: v for k, v in axes_by_label(fig).items() if k.startswith("layer")}
        assert len(panels) == 2 * 2  # 2 layers x 2 heads
        t_q, t_k = expected_shapes[kind]
        for layer, weights in enumerate(getattr(maps, kind)):
            for head in range(2):
                data = image_data(panels[f"layer {layer} head {head}"])
                assert data.shape == (t_q, t_k)
                assert np.array_equal(data, weights[1, head, :t_q, :t_k].numpy())


def test_attention_maps_tokens_give_the_lengths(maps: AttentionMaps) -> None:
    figures = viz.attention_maps(
        maps, index=1, src_tokens=["ein", "Hund", "$5"], tgt_tokens=["<s>", "a"], dpi=DPI
    )
    cross = axes_by_label(figures["cross"])
    assert image_data(cross["layer 0 head 0"]).shape == (2, 3)
    labels = [t.get_text() for t in cross["layer 1 head 0"].get_xticklabels()]
    assert labels == ["ein", "Hund", r"\$5"]  # escaped once: drawn as "$5"
    # without lengths or tokens nothing is cropped; labels are positions
    full = viz.attention_maps(maps, index=0, dpi=DPI)
    assert image_data(axes_by_label(full["cross"])["layer 0 head 0"]).shape == (4, 5)


def test_attention_maps_bool_rows_for_left_padding(maps: AttentionMaps) -> None:
    real = torch.tensor([False, True, False, True, True])  # any placement
    figures = viz.attention_maps(maps, index=0, src_length=real, tgt_length=[True] * 4, dpi=DPI)
    data = image_data(axes_by_label(figures["encoder"])["layer 1 head 1"])
    expected = maps.encoder[1][0, 1][real][:, real]
    assert np.array_equal(data, expected.numpy())
    labels = axes_by_label(figures["encoder"])["layer 1 head 0"].get_xticklabels()
    assert [t.get_text() for t in labels] == ["1", "3", "4"]  # the original positions


def test_attention_maps_decoder_only() -> None:
    config = TransformerConfig.preset("tiny", vocab_size=20, d_model=16, d_ff=32, num_heads=2)
    torch.manual_seed(0)
    maps = TransformerLM(config).eval().attention(TGT)
    figures = viz.attention_maps(maps, index=1, tgt_length=2, dpi=DPI)
    assert list(figures) == ["decoder"]
    with pytest.raises(ValueError, match=r"^src_length / src_tokens: maps has no src side"):
        viz.attention_maps(maps, src_tokens=["a", "b"])
    assert image_data(axes_by_label(figures["decoder"])["layer 0 head 0"]).shape == (2, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"index": 2}, ValueError, r"^index: expected an int in \[0, 2\)"),
        ({"src_length": 6}, ValueError, r"^src_length: expected an int in \[1, 5\]"),
        ({"tgt_length": 0}, ValueError, r"^tgt_length: expected an int in \[1, 4\]"),
        ({"src_length": 3, "src_tokens": ["a"]}, ValueError, r"^src_tokens: expected 3 tokens"),
        ({"tgt_tokens": ["a"] * 5}, ValueError, r"^tgt_tokens: expected 1 to 4 tokens"),
        ({"src_length": torch.ones(4, dtype=torch.bool)}, TypeError, r"^src_length: .*\(5,\)"),
        ({"src_length": torch.zeros(5, dtype=torch.bool)}, ValueError, r"^src_length: .*no real"),
        ({"src_length": 2.5}, TypeError, r"^src_length: expected an int"),
    ],
)
def test_attention_maps_errors(maps: AttentionMaps, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        viz.attention_maps(maps, dpi=DPI, **kwargs)


def test_attention_maps_bad_maps() -> None:
    with pytest.raises(TypeError, match=r"^maps: expected attnlab.AttentionMaps"):
        viz.attention_maps([torch.rand(1, 1, 2, 2)])
    with pytest.raises(ValueError, match=r"^maps: no attention weights"):
        viz.attention_maps(AttentionMaps())
    with pytest.raises(ValueError, match=r"^maps.encoder\[0\]: expected a \(B, H, T_q, T_k\)"):
        viz.attention_maps(AttentionMaps(encoder=[torch.rand(2, 2, 2)]))
    bad = AttentionMaps(encoder=[torch.rand(1, 2, 3, 3)], cross=[torch.rand(1, 2, 2, 4)])
    with pytest.raises(ValueError, match=r"^maps.cross: src length 4 differs from maps.encoder"):
        viz.attention_maps(bad)


# -- positions ----------------------------------------------------------------------------------


def test_positional_encoding(tmp_path: Path) -> None:
    path = tmp_path / "pe.png"
    fig = viz.positional_encoding(16, 24, path=path, dpi=DPI)
    check_png(fig, path)
    panels = axes_by_label(fig)
    table = sinusoidal_table(24, 16)
    np.testing.assert_allclose(image_data(panels["table"]), table.numpy(), atol=1e-6)
    similarity = image_data(panels["similarity"])
    np.testing.assert_allclose(similarity, (table @ table.T).numpy(), atol=1e-5)
    # T7/T8: each position is most like itself, and nearby positions are more alike than far
    assert (similarity.argmax(axis=1) == np.arange(24)).all()
    assert similarity[10, 11] > similarity[10, 20]
    with pytest.raises(ValueError, match=r"^d_model: expected a positive int"):
        viz.positional_encoding(0)
    with pytest.raises(ValueError, match=r"^length: expected a positive int"):
        viz.positional_encoding(16, -1)


def test_learned_positional_similarity(tmp_path: Path) -> None:
    weight = torch.randn(12, 8, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "learned.png"
    fig = viz.learned_positional_similarity(weight, path=path, dpi=DPI)
    check_png(fig, path)
    data = image_data(axes_by_label(fig)["similarity"])
    unit = weight / weight.norm(dim=1, keepdim=True)
    np.testing.assert_allclose(data, (unit @ unit.T).numpy(), atol=1e-6)
    np.testing.assert_allclose(np.diag(data), 1.0, atol=1e-6)
    fig = viz.learned_positional_similarity(torch.nn.Parameter(weight), length=5, dpi=DPI)
    assert image_data(axes_by_label(fig)["similarity"]).shape == (5, 5)
    with pytest.raises(TypeError, match=r"^weight: expected a \(max_len, d_model\) Tensor"):
        viz.learned_positional_similarity(torch.randn(4))
    with pytest.raises(TypeError, match=r"^weight: expected a floating dtype"):
        viz.learned_positional_similarity(torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^length: expected at most 12"):
        viz.learned_positional_similarity(weight, length=13)


# -- masks ---------------------------------------------------------------------------------------


def test_masks_panels_are_the_masks(tmp_path: Path) -> None:
    path = tmp_path / "masks.png"
    fig = viz.masks([4, 2, 3], path=path, dpi=DPI)
    check_png(fig, path)
    panels = axes_by_label(fig)
    padding = padding_mask([4, 2, 3])
    combined = combine_masks(key_mask(padding), causal_mask(4))  # (B, 1, T, T)
    assert np.array_equal(image_data(panels["padding"]), padding.numpy())
    assert np.array_equal(image_data(panels["causal"]), causal_mask(4).numpy())
    for b in range(3):
        assert np.array_equal(image_data(panels[f"combined {b}"]), combined[b, 0].numpy())
    assert "1 = may attend" in panels["causal"].get_title()


def test_masks_without_causal_and_longer_padding() -> None:
    fig = viz.masks(torch.tensor([3, 1]), causal=False, max_len=5, dpi=DPI)
    panels = axes_by_label(fig)
    assert "causal" not in panels
    expected = key_mask(padding_mask([3, 1], 5)).expand(2, 1, 5, 5)
    for b in range(2):
        assert np.array_equal(image_data(panels[f"combined {b}"]), expected[b, 0].numpy())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lengths": []}, ValueError, r"^lengths: expected 1 to 32 sentences"),
        ({"lengths": [1] * 33}, ValueError, r"^lengths: expected 1 to 32 sentences"),
        ({"lengths": [0, 0]}, ValueError, r"^lengths: expected at least one positive length"),
        ({"lengths": [3, -1]}, ValueError, r"^lengths: expected non-negative"),
        ({"lengths": "34"}, TypeError, r"^lengths: expected a sequence of ints"),
        ({"lengths": torch.ones(2, 2)}, ValueError, r"^lengths: expected a 1-D"),
        ({"lengths": [3], "causal": "yes"}, TypeError, r"^causal: expected a bool"),
        ({"lengths": [3], "max_len": 2}, ValueError, r"^max_len: expected >= the longest"),
    ],
)
def test_masks_errors(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        viz.masks(**kwargs)


# -- training -------------------------------------------------------------------------------------


def test_lr_schedule_peaks_at_warmup(tmp_path: Path) -> None:
    path = tmp_path / "lr.png"
    extra = ((256, 400), (512, 800), (512, 400))
    fig = viz.lr_schedule(512, 400, 3000, extra=extra, path=path, dpi=DPI)
    check_png(fig, path)
    ax = fig.axes[0]
    curves = {line.get_label(): line for line in ax.get_lines() if line.get_label()[0] != "_"}
    assert list(curves) == [  # the repeated (512, 400) is drawn once
        "d_model=512, warmup=400",
        "d_model=256, warmup=400",
        "d_model=512, warmup=800",
    ]
    pairs = [(512, 400), (256, 400), (512, 800)]
    for (d_model, warmup), line in zip(pairs, curves.values(), strict=True):
        x, y = line.get_xdata(), line.get_ydata()
        assert x[np.argmax(y)] == warmup
        assert y.max() == pytest.approx(peak_lr(d_model, warmup), rel=1e-12)
    markers = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert sorted(float(m.get_xdata()[0]) for m in markers) == [400, 400, 800]


def test_lr_schedule_without_peak_and_errors() -> None:
    fig = viz.lr_schedule(steps=3000, extra=None, dpi=DPI)  # the warm-up ends past the end
    assert not [line for line in fig.axes[0].get_lines() if line.get_marker() == "o"]
    with pytest.raises(ValueError, match=r"^steps: expected a positive int"):
        viz.lr_schedule(steps=0)
    with pytest.raises(ValueError, match=r"^extra\[0\]: expected a \(d_model, warmup\) pair"):
        viz.lr_schedule(extra=[(1, 2, 3)])
    with pytest.raises(ValueError, match=r"^warmup \(extra\[1\]\): expected a positive int"):
        viz.lr_schedule(extra=[(1, 2), (512, 0)])


METRICS = "step,loss,val_loss,lr,tokens_per_s,bleu,phase,empty\n" + "".join(
    f"{i},{5 / i**0.3:.4f},{f'{5.3 / i**0.3:.4f}' if i % 10 == 0 else ''},{1e-4 * i:.6f},"
    f"{900 + i},{f'{i / 4}' if i % 25 == 0 else ''},train,\n"
    for i in range(1, 61)
)


def test_training_curves(tmp_path: Path) -> None:
    csv_path = tmp_path / "metrics.csv"
    csv_path.write_text(METRICS, encoding="utf-8")
    path = tmp_path / "curves.png"
    fig = viz.training_curves(csv_path, path=path, dpi=DPI)
    check_png(fig, path)
    panels = axes_by_label(fig)
    assert list(panels) == ["loss", "lr", "tokens_per_s", "bleu"]  # text, empty columns skipped
    lines = {line.get_label(): line for line in panels["loss"].get_lines()}
    assert set(lines) == {"loss", "val_loss"}  # one panel for training and validation loss
    assert len(lines["loss"].get_xdata()) == 60
    assert list(lines["val_loss"].get_xdata()) == [10, 20, 30, 40, 50, 60]  # gaps skipped
    bleu = panels["bleu"].get_lines()[0]
    assert list(bleu.get_ydata()) == [6.25, 12.5]


def test_training_curves_single_column(tmp_path: Path) -> None:
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("\ufeffstep,loss\n2,3.0\n1,4.0\n3,2.5\n", encoding="utf-8")  # BOM, unsorted
    fig = viz.training_curves(csv_path, dpi=DPI)
    line = axes_by_label(fig)["loss"].get_lines()[0]
    assert list(line.get_xdata()) == [1, 2, 3] and list(line.get_ydata()) == [4.0, 3.0, 2.5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("loss,lr\n1,2\n", "no 'step' column"),
        ("step,note\n1,hello\n", "no numeric data"),
        ("step,loss\n", "no numeric data"),
        ("step,loss\n1,2\nx,3\n", "line 3: step 'x' is not a number"),
        ("step,loss\n1,2\n,3\n", "line 3: empty step"),
        ("step,loss\n1,2,3\n", "line 2 has 3 fields"),
        ("step,loss,loss\n1,2,3\n", "duplicate columns"),
    ],
)
def test_training_curves_errors_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    csv_path = tmp_path / "bad.csv"
    csv_path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as caught:
        viz.training_curves(csv_path)
    assert str(csv_path) in str(caught.value)


def test_training_curves_compare_runs(tmp_path: Path) -> None:
    """Several CSVs: one colour per run, validation dashed, panels over the union of columns,
    runs named by their OUT directory (or the labels given)."""
    for run, rows in (("A", "1,5.0,,0.1\n2,4.0,4.5,0.2\n"), ("B", "2,3.0,3.5,\n1,6.0,,\n")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.csv").write_text(f"step,loss,val_loss,lr\n{rows}", "utf-8")
    csvs = [tmp_path / "A" / "metrics.csv", tmp_path / "B" / "metrics.csv"]
    fig = viz.training_curves(csvs, path=tmp_path / "both.png", dpi=DPI)
    check_png(fig, tmp_path / "both.png")
    panels = axes_by_label(fig)
    assert list(panels) == ["loss", "lr"]  # B has no lr cells: its column is left out
    lines = {line.get_label(): line for line in panels["loss"].get_lines()}
    assert set(lines) == {"A: loss", "A: val_loss", "B: loss", "B: val_loss"}
    assert list(lines["B: loss"].get_xdata()) == [1, 2]  # each run sorted by its own steps
    assert list(lines["B: loss"].get_ydata()) == [6.0, 3.0]
    assert lines["A: loss"].get_color() == lines["A: val_loss"].get_color()
    assert lines["A: loss"].get_color() != lines["B: loss"].get_color()
    assert lines["B: val_loss"].get_linestyle() == "--" and lines["B: loss"].get_linestyle() == "-"
    assert [line.get_label() for line in panels["lr"].get_lines()] == ["A: lr"]
    assert fig._suptitle.get_text() == "training curves: A, B"
    named = viz.training_curves(csvs, labels=["recipe 1", "recipe 2"], dpi=DPI)
    labels = {line.get_label() for line in axes_by_label(named)["loss"].get_lines()}
    assert labels == {
        "recipe 1: loss",
        "recipe 1: val_loss",
        "recipe 2: loss",
        "recipe 2: val_loss",
    }
    with pytest.raises(ValueError, match="labels: expected 2 names"):
        viz.training_curves(csvs, labels=["one"])
    with pytest.raises(ValueError, match="csv_path: expected a metrics CSV"):
        viz.training_curves([])
    # two files named alike in directories named alike: the paths tell them apart
    (tmp_path / "x" / "A").mkdir(parents=True)
    (tmp_path / "x" / "A" / "metrics.csv").write_text("step,loss\n1,2\n", "utf-8")
    same = viz.training_curves([csvs[0], tmp_path / "x" / "A" / "metrics.csv"], dpi=DPI)
    assert f"{csvs[0]}: loss" in {
        line.get_label() for line in axes_by_label(same)["loss"].get_lines()
    }


def test_training_curves_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        viz.training_curves(missing)


# -- files, state, threads, devices ---------------------------------------------------------------


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pe.png"
    viz.positional_encoding(8, 10, path=path, dpi=DPI)
    before = path.read_bytes()
    viz.positional_encoding(8, 12, path=path, dpi=DPI)  # overwrite in place
    assert path.read_bytes() != before
    written = path.read_bytes()

    def broken(self, *args, **kwargs):
        Path(args[0]).write_bytes(b"half a picture")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(OSError, match="disk full"):
        viz.positional_encoding(8, 10, path=path, dpi=DPI)
    assert path.read_bytes() == written  # the old picture is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.png"]  # no temporary file left


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^path: .* is a directory"):
        viz.positional_encoding(8, 10, path=tmp_path)
    with pytest.raises(TypeError, match=r"^path: expected a str or os.PathLike"):
        viz.positional_encoding(8, 10, path=3)


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_import_leaves_pyplot_and_backend_alone() -> None:
    code = (
        "import sys, matplotlib\n"
        "matplotlib.use('svg')\n"  # a user's choice, made before importing attnlab
        "import attnlab.instruments.viz as viz\n"
        "viz.masks([2, 1])\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_figures_from_several_threads(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def draw(i: int) -> None:
        try:
            viz.masks([3, i + 1], path=tmp_path / f"m{i}.png", dpi=40)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"m{i}.png" for i in range(4)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors(tmp_path: Path) -> None:
    weights = softmax_weights(2, 2, 3, 3).to("cuda", torch.float16)
    fig = viz.attention_heatmaps(weights, path=tmp_path / "cuda.png", dpi=DPI)
    data = image_data(axes_by_label(fig)["layer 1 head 1"])
    assert np.array_equal(data, weights[1, 1].float().cpu().numpy())
    maps = AttentionMaps(encoder=[w[None] for w in weights])
    fig = viz.attention_maps(maps, src_length=torch.tensor([True, False, True], device="cuda"))
    assert image_data(axes_by_label(fig["encoder"])["layer 0 head 0"]).shape == (2, 2)
    viz.learned_positional_similarity(torch.randn(6, 4, device="cuda"), dpi=DPI)

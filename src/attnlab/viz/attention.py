"""Pictures of how the Transformer works: attention weights, positional encodings, masks, the
learning-rate schedule and training curves.

Every function returns a :class:`matplotlib.figure.Figure` and, given ``path=``, writes it there
as a PNG (parent folders created; written to a temporary file, then renamed, so a reader never
sees half an image). Figures are built on :class:`~matplotlib.figure.Figure` with an Agg canvas,
never through ``pyplot``: importing this module selects no backend and changes no global state,
an interactive session keeps its backend, figures can be drawn from several threads, and nothing
accumulates in pyplot's figure registry. In Jupyter the returned figure displays as usual.

Tensors may live on any device and have any floating dtype; only what is drawn is copied to
the CPU (as float32). ``dpi`` sets the figure's resolution (and the PNG's): a figure of
``size_inches`` ``(w, h)`` is written as ``int(w * dpi) x int(h * dpi)`` pixels.

========================================  ======================================================
:func:`attention_heatmaps`                layers x heads grid of attention weights (sec. 3.2;
                                          T2, T4)
:func:`attention_maps`                    encoder / decoder / cross pictures of one sentence of
                                          :class:`attnlab.model.AttentionMaps`, pads cropped
:func:`positional_encoding`               the sinusoidal table and its similarity (sec. 3.5;
                                          T7, T8)
:func:`learned_positional_similarity`     cosine similarity of learned position vectors (T8)
:func:`masks`                             padding, look-ahead and combined masks (sec. 3.2.3;
                                          T9-T11)
:func:`lr_schedule`                       eq. 3 of sec. 5.3 with its peaks
:func:`training_curves`                   a metrics CSV, one panel per quantity
:func:`vit_positional_similarity`         ViT's patch position similarity mosaic (figure 7)
:func:`attention_rollout_map`             a ViT's class-token attention rollout over the
                                          image (figure 6)
========================================  ======================================================
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from ._checks import check_positive_int, check_positive_number, shape_of
from ._io import atomic_write
from .masks import causal_mask, combine_masks, key_mask, padding_mask
from .model import AttentionMaps
from .positional import sinusoidal_table
from .schedule import peak_lr, transformer_lr_tensor

__all__ = [
    "attention_heatmaps",
    "attention_maps",
    "attention_rollout_map",
    "learned_positional_similarity",
    "lr_schedule",
    "masks",
    "positional_encoding",
    "training_curves",
    "vit_positional_similarity",
]

PathLike = str | os.PathLike

_MAX_LABEL_CHARS = 12  # longer token labels are cut with an ellipsis
_MIN_FONT = 4.0  # points; below this, labels are thinned instead of shrunk further
_MAX_FONT = 9.0


# -- figures and files --------------------------------------------------------------------------


def _figure(width: float, height: float, dpi: float) -> Figure:
    """A constrained-layout figure with its own Agg canvas (no pyplot)."""
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _finish(fig: Figure, path: PathLike | None) -> Figure:
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
        target = Path(path)
        if target.is_dir():
            raise ValueError(f"path: {target} is a directory, expected a PNG file name")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, lambda temp: fig.savefig(temp, format="png", dpi=fig.dpi))
    return fig


def _check_dpi(dpi: object) -> float:
    return check_positive_number(dpi, "dpi")


def _to_numpy(x: Tensor) -> np.ndarray:
    """Detached float32 CPU copy (bfloat16 and half included)."""
    return x.detach().to(device="cpu", dtype=torch.float32).numpy()


# -- labels ---------------------------------------------------------------------------------------


def _label_text(token: object) -> str:
    text = str(token).replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    if text == "":
        text = "''"
    if len(text) > _MAX_LABEL_CHARS:
        text = text[: _MAX_LABEL_CHARS - 1] + "…"
    # An even number of "$" would make matplotlib typeset the label as mathtext.
    return text.replace("$", r"\$")


def _token_labels(tokens: object, count: int, name: str, what: str) -> list[str]:
    """``count`` labels from a token sequence, or the positions ``0 .. count - 1``."""
    if tokens is None:
        return [str(i) for i in range(count)]
    items = _token_list(tokens, name)
    if len(items) != count:
        raise ValueError(f"{name}: expected {count} labels ({what}), got {len(items)}")
    return [_label_text(t) for t in items]


def _token_list(tokens: object, name: str) -> list[object]:
    if isinstance(tokens, Tensor):
        if tokens.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D tensor of ids, got {tuple(tokens.shape)}")
        return tokens.tolist()
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise TypeError(
            f"{name}: expected a sequence of tokens (e.g. a list of str), got "
            f"{type(tokens).__name__}"
        )
    return list(tokens)


def _font_and_step(cell_inches: float) -> tuple[float, int]:
    """Tick-label font size for cells of ``cell_inches``, and how many cells share a label."""
    fitting = cell_inches * 72.0 * 0.75
    if fitting >= _MIN_FONT:
        return min(fitting, _MAX_FONT), 1
    return _MIN_FONT, math.ceil(_MIN_FONT / fitting)


def _text_inches(labels: Sequence[str], fontsize: float) -> float:
    longest = max((len(s) for s in labels), default=1)
    return longest * fontsize * 0.62 / 72.0


def _set_ticks(ax, labels: Sequence[str], step: int, fontsize: float, axis: str) -> None:
    ticks = list(range(0, len(labels), step))
    if axis == "x":
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=fontsize)


# -- attention ------------------------------------------------------------------------------------


def _select(indices: object, count: int, name: str, what: str) -> list[int]:
    """Normalise a layer / head selection (None = all, an int, or a sequence; negatives count
    from the end) to a list of indices in ``[0, count)``."""
    if indices is None:
        return list(range(count))
    items = [indices] if isinstance(indices, int) else indices
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(f"{name}: expected an int or a sequence of ints, got {indices!r}")
    if len(items) == 0:
        raise ValueError(f"{name}: expected at least one {what} index, got an empty selection")
    out = []
    for i in items:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"{name}: expected int indices, got {i!r}")
        if not -count <= i < count:
            raise ValueError(f"{name}: index {i} out of range for {count} {what}s")
        out.append(int(i) % count)
    return out


def _layer_list(weights: object) -> list[Tensor]:
    """``weights`` as a list over layers of ``(H, T_q, T_k)`` tensors (views, not copies)."""
    if isinstance(weights, Tensor):
        if weights.dim() == 2:
            return [weights[None]]
        if weights.dim() == 3:
            return [weights]
        if weights.dim() == 4:
            return list(weights.unbind(0))
        raise ValueError(
            f"weights: expected shape (L, H, T_q, T_k), (H, T_q, T_k) or (T_q, T_k), got "
            f"{tuple(weights.shape)}"
        )
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(
            f"weights: expected a Tensor or a list over layers of (H, T_q, T_k) tensors, got "
            f"{type(weights).__name__}"
        )
    if len(weights) == 0:
        raise ValueError("weights: expected at least one layer, got an empty list")
    for i, w in enumerate(weights):
        if not isinstance(w, Tensor) or w.dim() != 3:
            hint = (
                "; select one sentence (w[b] for each layer) or use attention_maps()"
                if isinstance(w, Tensor) and w.dim() == 4
                else ""
            )
            raise ValueError(
                f"weights[{i}]: expected an (H, T_q, T_k) tensor, got {shape_of(w)}{hint}"
            )
        if w.shape != weights[0].shape:
            raise ValueError(
                f"weights[{i}]: shape {tuple(w.shape)} differs from weights[0]'s "
                f"{tuple(weights[0].shape)}"
            )
    return list(weights)


def attention_heatmaps(
    weights: Tensor | Sequence[Tensor],
    query_tokens: Sequence[object] | Tensor | None = None,
    key_tokens: Sequence[object] | Tensor | None = None,
    *,
    title: str | None = None,
    layers: int | Sequence[int] | None = None,
    heads: int | Sequence[int] | None = None,
    path: PathLike | None = None,
    max_cells: int = 64,
    dpi: float = 100,
) -> Figure:
    """Attention weights as a grid of heatmaps: one row per layer, one column per head.

    Cell ``(i, j)`` of a heatmap is the weight ``alpha_ij`` with which query ``i`` averages the
    value of key ``j`` (Vaswani et al. 2017, eq. 1; tutorial T2): each row sums to 1 (or is 0
    for a query with no allowed key). Different heads look at different positions (sec. 3.2.2,
    T4). All heatmaps share one colour scale, 0 to 1, shown by one colorbar.

    Args:
        weights: a list over layers of ``(H, T_q, T_k)`` tensors (one sentence of
            :class:`attnlab.model.AttentionMaps`), or a tensor ``(L, H, T_q, T_k)``,
            ``(H, T_q, T_k)`` or ``(T_q, T_k)``. Any device, any floating dtype.
        query_tokens: ``T_q`` labels for the rows; default the positions ``0 .. T_q - 1``.
        key_tokens: ``T_k`` labels for the columns; default ``query_tokens`` when
            ``T_k == T_q`` (self-attention), else the positions.
        title: the figure's title.
        layers, heads: the rows and columns to draw (an index or a list of indices; negative
            ones count from the end); default all.
        max_cells: the most heatmaps one figure may hold; more is a ValueError that asks for a
            selection (a 12 x 12 BERT-base grid would be unreadable).
        path: where to write the PNG.
        dpi: resolution.

    The figure grows with the grid and the number of tokens (readable up to 6 layers x 8 heads
    and about 40 tokens); labels shrink with the cells, and past about 50 tokens only every
    n-th is written. Each heatmap axes is labelled ``"layer {l} head {h}"`` (``ax.get_label()``),
    its image data is the ``(T_q, T_k)`` array drawn.
    """
    check_positive_int(max_cells, "max_cells")
    dpi = _check_dpi(dpi)
    per_layer = _layer_list(weights)
    num_heads, t_q, t_k = per_layer[0].shape
    if t_q == 0 or t_k == 0:
        raise ValueError(f"weights: empty attention matrix (T_q={t_q}, T_k={t_k})")
    if not per_layer[0].dtype.is_floating_point:
        raise TypeError(f"weights: expected a floating dtype, got {per_layer[0].dtype}")
    layer_ids = _select(layers, len(per_layer), "layers", "layer")
    head_ids = _select(heads, num_heads, "heads", "head")
    if len(layer_ids) * len(head_ids) > max_cells:
        raise ValueError(
            f"weights: {len(layer_ids)} layers x {len(head_ids)} heads = "
            f"{len(layer_ids) * len(head_ids)} heatmaps exceed max_cells={max_cells}; choose "
            f"some with layers= / heads=, or raise max_cells"
        )
    q_labels = _token_labels(query_tokens, t_q, "query_tokens", "T_q of weights")
    if key_tokens is None and query_tokens is not None and t_k == t_q:
        k_labels = q_labels
    else:
        k_labels = _token_labels(key_tokens, t_k, "key_tokens", "T_k of weights")

    head_index = torch.tensor(head_ids)
    grid = [
        _to_numpy(per_layer[layer].index_select(0, head_index.to(per_layer[layer].device)))
        for layer in layer_ids
    ]

    longest = max(t_q, t_k)
    cell = max(min(0.3, 3.6 / longest), 1.2 / longest)  # inches per token
    fontsize, step = _font_and_step(cell)
    rows, cols = len(layer_ids), len(head_ids)
    panel_w, panel_h = t_k * cell, t_q * cell
    width = cols * (panel_w + 0.2) + _text_inches(q_labels, fontsize) + 1.0 + 1.1
    height = rows * (panel_h + 0.4) + _text_inches(k_labels, fontsize) + 0.5 + (0.5 if title else 0)
    title_width = len(title) * 12 * 0.55 / 72 + 0.4 if title else 0.0  # suptitle at 12 points
    fig = _figure(max(width, title_width, 3.0), max(height, 2.5), dpi)
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for r, layer in enumerate(layer_ids):
        for c, head in enumerate(head_ids):
            ax = axes[r, c]
            ax.set_label(f"layer {layer} head {head}")
            image = ax.imshow(
                grid[r][c], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest"
            )
            if r == 0:
                ax.set_title(f"head {head}", fontsize=9)
            if c == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=9)
                _set_ticks(ax, q_labels, step, fontsize, "y")
            else:
                ax.set_yticks([])
            if r == rows - 1:
                _set_ticks(ax, k_labels, step, fontsize, "x")
            else:
                ax.set_xticks([])
            ax.tick_params(length=2, pad=1)
    fig.colorbar(
        image,
        ax=axes.ravel().tolist(),
        # about 5 inches long and 0.2 wide, whatever the grid: the default takes 15% of it
        shrink=min(1.0, 5.0 / (rows * (panel_h + 0.4))),
        fraction=min(0.15, 0.6 / width),
        aspect=20,
        label="attention weight",
    )
    fig.supxlabel("key (attended to)", fontsize=9)
    fig.supylabel("query (attending)", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=12)
    return _finish(fig, path)


_KINDS = {
    "encoder": ("src", "src", "encoder self-attention"),
    "decoder": ("tgt", "tgt", "decoder self-attention (masked)"),
    "cross": ("tgt", "src", "cross-attention (target queries, source keys)"),
}


def _positions(length: object, tokens: object, full: int, side: str) -> tuple[list[int], list]:
    """The real positions of one side (src or tgt), and their labels: the tokens, else the
    positions themselves."""
    name = f"{side}_length"
    token_name = f"{side}_tokens"
    items = None if tokens is None else _token_list(tokens, token_name)
    if length is None:
        count = full if items is None else len(items)
        if not 1 <= count <= full:
            raise ValueError(
                f"{token_name}: expected 1 to {full} tokens (the padded length), got {count}"
            )
        positions = list(range(count))
    elif isinstance(length, int) and not isinstance(length, bool):
        if not 1 <= length <= full:
            raise ValueError(f"{name}: expected an int in [1, {full}], got {length}")
        positions = list(range(length))
    else:
        row = length if isinstance(length, Tensor) else None
        if row is None and isinstance(length, Sequence) and not isinstance(length, (str, bytes)):
            row = torch.as_tensor(list(length))
        if row is None or row.dtype != torch.bool or row.dim() != 1 or row.numel() != full:
            raise TypeError(
                f"{name}: expected an int (real tokens first) or a ({full},) bool row "
                f"(True = real token), got {shape_of(length) if row is None else tuple(row.shape)}"
                f"{'' if row is None else f' {row.dtype}'}"
            )
        positions = row.nonzero().flatten().tolist()
        if not positions:
            raise ValueError(f"{name}: the bool row marks no real token")
    if items is not None and len(items) != len(positions):
        raise ValueError(
            f"{token_name}: expected {len(positions)} tokens (the real length from {name}), "
            f"got {len(items)}"
        )
    return positions, positions if items is None else items


def attention_maps(
    maps: AttentionMaps,
    *,
    index: int = 0,
    src_tokens: Sequence[object] | Tensor | None = None,
    tgt_tokens: Sequence[object] | Tensor | None = None,
    src_length: int | Tensor | Sequence[bool] | None = None,
    tgt_length: int | Tensor | Sequence[bool] | None = None,
    layers: int | Sequence[int] | None = None,
    heads: int | Sequence[int] | None = None,
    out_dir: PathLike | None = None,
    max_cells: int = 64,
    dpi: float = 100,
) -> dict[str, Figure]:
    """Heatmap grids (:func:`attention_heatmaps`) of one sentence of a model's attention.

    One figure per non-empty kind of ``maps`` (from ``model.attention(...)``):
    ``"encoder"`` (source x source self-attention), ``"decoder"`` (target x target masked
    self-attention: the lower triangle of T11) and ``"cross"`` (target queries x source keys,
    sec. 3.2.3). A :class:`~attnlab.TransformerLM`'s sequence is the target side, a
    :class:`~attnlab.TransformerEncoder`'s the source side.

    Pads are cropped away: in a padded batch the rows of padded queries can still carry weight
    (on pads too), which would only blur the picture.

    Args:
        maps: attention weights, each ``(B, H, T_q, T_k)``.
        index: the sentence ``b`` of the batch to draw.
        src_tokens, tgt_tokens: labels of the real tokens; their count is the real length
            when ``src_length`` / ``tgt_length`` is not given. Default: position numbers.
        src_length, tgt_length: the real length (an int: real tokens first, right padding as
            :func:`attnlab.masks.padding_mask`), or a ``(T,)`` bool row, True on real tokens,
            for padding anywhere (e.g. ``padding_mask_from_ids(ids, pad_id)[index]`` of a
            left-padded batch). Default: every position (no crop) unless tokens are given.
        layers, heads, max_cells, dpi: as in :func:`attention_heatmaps`.
        out_dir: folder to write ``encoder.png``, ``decoder.png``, ``cross.png`` into.

    Returns:
        ``{kind: Figure}`` for the kinds present, in the order encoder, decoder, cross.
    """
    if not isinstance(maps, AttentionMaps):
        raise TypeError(
            f"maps: expected attnlab.model.AttentionMaps (from model.attention(...)), got "
            f"{type(maps).__name__}"
        )
    present = {kind: getattr(maps, kind) for kind in _KINDS if getattr(maps, kind)}
    if not present:
        raise ValueError("maps: no attention weights (encoder, decoder and cross are all empty)")
    lengths: dict[str, tuple[int, str]] = {}  # side -> (padded length, where it came from)
    batch = None
    for kind, per_layer in present.items():
        for i, w in enumerate(per_layer):
            if not isinstance(w, Tensor) or w.dim() != 4:
                raise ValueError(
                    f"maps.{kind}[{i}]: expected a (B, H, T_q, T_k) tensor, got {shape_of(w)}"
                )
            if w.shape != per_layer[0].shape:
                raise ValueError(
                    f"maps.{kind}[{i}]: shape {tuple(w.shape)} differs from layer 0's "
                    f"{tuple(per_layer[0].shape)}"
                )
        b, _, t_q, t_k = per_layer[0].shape
        batch = b if batch is None else batch
        if b != batch:
            raise ValueError(f"maps.{kind}: batch size {b} differs from the other kinds' {batch}")
        q_side, k_side, _ = _KINDS[kind]
        for side, size in ((q_side, t_q), (k_side, t_k)):
            known = lengths.setdefault(side, (size, kind))
            if known[0] != size:
                raise ValueError(
                    f"maps.{kind}: {side} length {size} differs from maps.{known[1]}'s {known[0]}"
                )
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < batch:
        raise ValueError(f"index: expected an int in [0, {batch}) (the batch size), got {index!r}")
    sides = {}
    for side, length, tokens in (("src", src_length, src_tokens), ("tgt", tgt_length, tgt_tokens)):
        if side in lengths:
            sides[side] = _positions(length, tokens, lengths[side][0], side)
        elif length is not None or tokens is not None:
            other = "tgt" if side == "src" else "src"
            raise ValueError(
                f"{side}_length / {side}_tokens: maps has no {side} side (its weights are "
                f"{', '.join(present)}); use {other}_length / {other}_tokens"
            )

    out = Path(out_dir) if out_dir is not None else None
    figures: dict[str, Figure] = {}
    for kind, per_layer in present.items():
        q_side, k_side, description = _KINDS[kind]
        q_pos, q_labels = sides[q_side]
        k_pos, k_labels = sides[k_side]
        device = per_layer[0].device
        q_index = torch.tensor(q_pos, device=device)
        k_index = torch.tensor(k_pos, device=device)
        cropped = [w[index].index_select(1, q_index).index_select(2, k_index) for w in per_layer]
        figures[kind] = attention_heatmaps(
            cropped,
            q_labels,
            k_labels,
            title=f"{description}, sentence {index}",
            layers=layers,
            heads=heads,
            max_cells=max_cells,
            dpi=dpi,
            path=None if out is None else out / f"{kind}.png",
        )
    return figures


# -- positions ------------------------------------------------------------------------------------


def positional_encoding(
    d_model: int = 128, length: int = 100, *, path: PathLike | None = None, dpi: float = 100
) -> Figure:
    """The paper's sinusoidal positional encoding (Vaswani et al. 2017, sec. 3.5; T7, T8).

    Left: the table ``PE`` of shape ``(length, d_model)`` (rows positions, columns dimensions;
    even columns sine, odd columns cosine), on a diverging scale -1..1: the wavelengths grow
    geometrically from ``2 pi`` (left) to ``10000 * 2 pi`` (right).
    Right: ``PE PE^T`` of shape ``(length, length)``, the dot products of the encodings of two
    positions: for even ``d_model``, ``sum_i cos(omega_i (p - q))``, a function of the distance
    alone, largest (``d_model / 2``) on the diagonal and smaller, though not monotonically, the
    farther apart the positions: nearby positions look alike, which lets attention tell near
    from far.

    Axes are labelled ``"table"`` and ``"similarity"``.
    """
    check_positive_int(d_model, "d_model")
    check_positive_int(length, "length")
    dpi = _check_dpi(dpi)
    table = sinusoidal_table(length, d_model)  # (length, d_model) float64
    similarity = table @ table.T  # (length, length)
    fig = _figure(11.0, 4.8, dpi)
    left, right = fig.subplots(1, 2)
    left.set_label("table")
    im = left.imshow(
        table.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest"
    )
    left.set(
        title=f"sinusoidal PE, d_model={d_model}",
        xlabel="dimension (even: sin, odd: cos)",
        ylabel="position",
    )
    fig.colorbar(im, ax=left, label="PE(pos, i)")
    right.set_label("similarity")
    im = right.imshow(similarity.numpy(), cmap="viridis", interpolation="nearest")
    right.set(title="PE PE$^T$: nearby positions are similar", xlabel="position", ylabel="position")
    fig.colorbar(im, ax=right, label="dot product PE$_p$ · PE$_q$")
    fig.suptitle("Vaswani et al. 2017, sec. 3.5 (tutorial T7, T8)")
    return _finish(fig, path)


def learned_positional_similarity(
    weight: Tensor,
    *,
    length: int | None = None,
    path: PathLike | None = None,
    dpi: float = 100,
) -> Figure:
    """Cosine similarity of learned position embeddings (tutorial T8; BERT, ViT).

    ``weight`` is the ``(max_len, d_model)`` table of
    :class:`attnlab.positional.LearnedPositionalEmbedding` (or BERT's position embeddings);
    the picture is the ``(P, P)`` matrix ``cos(w_p, w_q)`` of its first ``length`` rows
    (default all), on the scale -1..1. A trained table usually shows a bright band along the
    diagonal, as the fixed encoding does (:func:`positional_encoding`); a fresh one is noise.
    The axes is labelled ``"similarity"``.
    """
    if not isinstance(weight, Tensor) or weight.dim() != 2:
        raise TypeError(
            f"weight: expected a (max_len, d_model) Tensor (e.g. LearnedPositionalEmbedding"
            f".weight), got {shape_of(weight)}"
        )
    if not weight.dtype.is_floating_point:
        raise TypeError(f"weight: expected a floating dtype, got {weight.dtype}")
    if weight.shape[0] == 0 or weight.shape[1] == 0:
        raise ValueError(f"weight: empty table of shape {tuple(weight.shape)}")
    if length is not None:
        check_positive_int(length, "length")
        if length > weight.shape[0]:
            raise ValueError(f"length: expected at most {weight.shape[0]} (max_len), got {length}")
    dpi = _check_dpi(dpi)
    rows = weight.detach()[:length].to(torch.float32)
    unit = torch.nn.functional.normalize(rows, dim=1, eps=1e-12)
    similarity = _to_numpy(unit @ unit.T)  # (P, P)
    fig = _figure(6.0, 5.0, dpi)
    ax = fig.subplots()
    ax.set_label("similarity")
    im = ax.imshow(similarity, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(
        title="learned position embeddings: cosine similarity",
        xlabel="position",
        ylabel="position",
    )
    fig.colorbar(im, ax=ax, label="cos(w$_p$, w$_q$)")
    return _finish(fig, path)


# -- masks ----------------------------------------------------------------------------------------

_MASK_COLORS = ListedColormap(["#eeeeee", "#3a6ea5"])
_MAX_SENTENCES = 32


def _draw_mask(ax, mask: np.ndarray, cell: float, title: str, xlabel: str, ylabel: str) -> None:
    rows, cols = mask.shape
    ax.imshow(mask.astype(np.float32), cmap=_MASK_COLORS, vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    line = min(1.0, cell * 72 * 0.1)  # thin gridlines for small cells, none when tiny
    if line >= 0.2:
        ax.grid(which="minor", color="white", linewidth=line)
    ax.tick_params(which="minor", length=0)
    step = max(1, math.ceil(max(rows, cols) / 16))
    ax.set_xticks(range(0, cols, step))
    ax.set_yticks(range(0, rows, step))
    ax.tick_params(labelsize=7, length=2)
    font = min(9.0, cell * 72 * 0.55)
    if font >= 4.0:
        for (i, j), value in np.ndenumerate(mask):
            ax.text(
                j,
                i,
                "1" if value else "0",
                ha="center",
                va="center",
                fontsize=font,
                color="white" if value else "#777777",
            )
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)


def masks(
    lengths: Sequence[int] | Tensor,
    *,
    causal: bool = True,
    max_len: int | None = None,
    path: PathLike | None = None,
    dpi: float = 100,
) -> Figure:
    """The masks of a padded batch, as 0/1 grids (1 = may attend; sec. 3.2.3; T9-T11).

    Panels (each axes labelled, see ``ax.get_label()``):

    * ``"padding"``: the padding mask ``(B, T)`` of :func:`attnlab.masks.padding_mask`,
      1 on real tokens, 0 on pads (T10);
    * ``"causal"`` (when ``causal``): the look-ahead mask ``(T, T)``, lower-triangular: query
      ``i`` may attend to keys ``j <= i`` (T11);
    * ``"combined {b}"`` for each sentence ``b``: ``combine_masks(key_mask(padding),
      causal_mask(T))[b, 0]``, ``(T, T)``: key padding AND look-ahead (key padding alone when
      not ``causal``). Pad *keys* are blocked; the rows of pad *queries* still see the real
      keys (their outputs are never used; :func:`attnlab.masks.pair_mask` would block them).

    Args:
        lengths: the ``B`` real lengths (at most 32 sentences), the batch padded to ``T =
            max_len`` (default ``max(lengths)``).
    """
    if isinstance(lengths, Tensor):
        if lengths.dim() != 1:
            raise ValueError(f"lengths: expected a 1-D (B,) tensor, got {tuple(lengths.shape)}")
        lengths = lengths.tolist()
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
        raise TypeError(f"lengths: expected a sequence of ints, got {type(lengths).__name__}")
    if not 1 <= len(lengths) <= _MAX_SENTENCES:
        raise ValueError(f"lengths: expected 1 to {_MAX_SENTENCES} sentences, got {len(lengths)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {causal!r}")
    if max_len is not None:
        check_positive_int(max_len, "max_len")
    dpi = _check_dpi(dpi)
    padding = padding_mask(lengths, max_len)  # (B, T); validates the lengths
    batch, t = padding.shape
    if t == 0:
        raise ValueError(f"lengths: expected at least one positive length, got {list(lengths)}")
    look_ahead = causal_mask(t) if causal else None  # (T, T)
    combined = combine_masks(key_mask(padding), look_ahead)  # (B, 1, 1 or T, T)
    combined = combined.expand(batch, 1, t, t)[:, 0].numpy()  # (B, T, T)

    cols = max(2, min(batch, 4))
    grid_rows = 1 + math.ceil(batch / cols)
    cell = min(0.3, 4.0 / t)
    panel = t * cell
    width = cols * (max(panel, 2.0) + 0.7) + 0.5
    top = panel if causal else max(batch * cell, 0.6)  # the padding mask is only B rows high
    height = top + 1.2 + (grid_rows - 1) * (panel + 1.2) + 0.5
    fig = _figure(max(width, 6.5), height, dpi)
    spec = fig.add_gridspec(
        grid_rows, cols, height_ratios=[top + 1.2] + [panel + 1.2] * (grid_rows - 1)
    )
    ax = fig.add_subplot(spec[0, 0], label="padding")
    _draw_mask(
        ax,
        padding.numpy(),
        cell,
        "padding mask (B × T)\n1 = real token, 0 = pad",
        "position",
        "sentence",
    )
    if causal:
        ax = fig.add_subplot(spec[0, 1], label="causal")
        _draw_mask(
            ax,
            look_ahead.numpy(),
            cell,
            "look-ahead mask (T × T)\n1 = may attend (key ≤ query)",
            "key position",
            "query position",
        )
    what = "key padding AND look-ahead" if causal else "key padding"
    for b in range(batch):
        ax = fig.add_subplot(spec[1 + b // cols, b % cols], label=f"combined {b}")
        _draw_mask(
            ax,
            combined[b],
            cell,
            f"sentence {b}, length {int(lengths[b])}:\n{what}",
            "key position",
            "query position",
        )
    fig.suptitle("attention masks, True / 1 = may attend (sec. 3.2.3; tutorial T9-T11)")
    return _finish(fig, path)


# -- training -------------------------------------------------------------------------------------


def lr_schedule(
    d_model: int = 512,
    warmup: int = 4000,
    steps: int = 100_000,
    *,
    extra: Sequence[tuple[int, int]] | None = ((256, 4000), (512, 8000)),
    path: PathLike | None = None,
    dpi: float = 100,
) -> Figure:
    """The learning-rate schedule of eq. 3 (Vaswani et al. 2017, sec. 5.3) over ``steps``.

    One curve per ``(d_model, warmup)`` pair: the given one, then those of ``extra`` (repeats
    skipped). Each rises linearly to its peak at ``step == warmup``, of value
    ``d_model^-0.5 * warmup^-0.5`` (marked with a dot when within ``steps``), then decays as
    ``step^-0.5``. Curves are sampled at about 1000 steps that include every warm-up step, so
    each curve's largest sample is its peak. Lines are labelled ``"d_model=..., warmup=..."``.
    """
    check_positive_int(steps, "steps")
    dpi = _check_dpi(dpi)
    pairs = [(d_model, warmup)]
    if extra is not None:
        if isinstance(extra, (str, bytes)) or not isinstance(extra, Sequence):
            raise TypeError(f"extra: expected a sequence of (d_model, warmup) pairs, got {extra!r}")
        for i, pair in enumerate(extra):
            if not (isinstance(pair, Sequence) and len(pair) == 2):
                raise ValueError(f"extra[{i}]: expected a (d_model, warmup) pair, got {pair!r}")
            pairs.append(tuple(pair))
    for i, (d, w) in enumerate(pairs):
        where = "" if i == 0 else f" (extra[{i - 1}])"
        check_positive_int(d, f"d_model{where}")
        check_positive_int(w, f"warmup{where}")
    pairs = list(dict.fromkeys(pairs))

    samples = np.unique(
        np.concatenate([np.rint(np.linspace(1, steps, 1000)), [w for _, w in pairs if w <= steps]])
    )
    x = torch.from_numpy(samples.astype(np.int64))
    fig = _figure(7.5, 4.5, dpi)
    ax = fig.subplots()
    for d, w in pairs:
        (line,) = ax.plot(
            samples, transformer_lr_tensor(x, d, w).numpy(), label=f"d_model={d}, warmup={w}"
        )
        if w <= steps:
            peak = peak_lr(d, w)
            ax.plot([w], [peak], "o", color=line.get_color())
            ax.annotate(
                f"{peak:.2e} at step {w}",
                (w, peak),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
                color=line.get_color(),
            )
    ax.set(
        title="lrate = d_model$^{-0.5}$ · min(step$^{-0.5}$, step · warmup$^{-1.5}$)",
        xlabel="training step",
        ylabel="learning rate",
    )
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, steps)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle("Vaswani et al. 2017, sec. 5.3, eq. 3", fontsize=10)
    return _finish(fig, path)


def _read_metrics(csv_path: PathLike) -> dict[str, np.ndarray]:
    """``{column: float64 array}`` of a metrics CSV, ``"step"`` first; empty cells are NaN and
    columns with any non-numeric cell are left out."""
    file = Path(csv_path)
    if not file.is_file():
        raise FileNotFoundError(f"csv_path: metrics file not found: {file}")
    with file.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise ValueError(f"{file}: empty file, expected a header row with a 'step' column")
    header = [name.strip() for name in rows[0]]
    if "step" not in header:
        raise ValueError(f"{file}: no 'step' column in the header {header}")
    duplicates = sorted({n for n in header if header.count(n) > 1 and n})
    if duplicates:
        raise ValueError(f"{file}: duplicate columns {duplicates}")
    columns: dict[str, list[float]] = {name: [] for name in header if name}
    numeric = dict.fromkeys(columns, True)
    for line, row in enumerate(rows[1:], start=2):
        if len(row) > len(header):
            raise ValueError(f"{file}: line {line} has {len(row)} fields, the header {len(header)}")
        row = row + [""] * (len(header) - len(row))
        for name, cell in zip(header, row, strict=True):
            if not name:
                continue
            cell = cell.strip()
            try:
                value = float(cell) if cell else math.nan
            except ValueError:
                if name == "step":
                    raise ValueError(
                        f"{file}: line {line}: step {cell!r} is not a number"
                    ) from None
                numeric[name] = False
                value = math.nan
            if name == "step" and math.isnan(value):
                raise ValueError(f"{file}: line {line}: empty step")
            columns[name].append(value)
    data = {"step": np.asarray(columns.pop("step"), dtype=np.float64)}
    for name, values in columns.items():
        array = np.asarray(values, dtype=np.float64)
        if numeric[name] and np.isfinite(array).any():
            data[name] = array
    if len(data["step"]) == 0 or len(data) == 1:
        raise ValueError(f"{file}: no numeric data to plot besides 'step'")
    return data


def training_curves(
    csv_path: PathLike, *, path: PathLike | None = None, dpi: float = 100
) -> Figure:
    """Training metrics against the step, one panel per quantity.

    ``csv_path`` is a CSV with a header row and a ``step`` column; every other column whose
    cells are numbers (e.g. ``loss``, ``val_loss``, ``lr``, ``tokens_per_s``, ``bleu``) gets a
    panel; empty cells are gaps (validation columns are filled every N steps only), columns
    holding text are skipped. ``X`` and ``val_X`` share a panel (training and validation loss).
    Axes are labelled with the panel's first quantity (``"loss"``, ``"lr"``, ...).

    Raises:
        FileNotFoundError: no such file. ValueError: no ``step`` column, a bad step, or no numeric
        data besides the step (each names the file).
    """
    dpi = _check_dpi(dpi)
    data = _read_metrics(csv_path)
    step = data.pop("step")
    order = np.argsort(step, kind="stable")
    panels: list[list[str]] = []
    for name in data:
        if name.startswith("val_") and name[4:] in data:
            continue  # drawn in its training quantity's panel
        panels.append([name] + ([f"val_{name}"] if f"val_{name}" in data else []))
    cols = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / cols)
    fig = _figure(5.5 * cols, 3.2 * rows + 0.4, dpi)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, names in zip(axes, panels, strict=False):
        ax.set_label(names[0])
        for name in names:
            values = data[name][order]
            keep = np.isfinite(values)
            sparse = keep.sum() < 0.5 * len(values) or keep.sum() <= 20
            ax.plot(
                step[order][keep],
                values[keep],
                marker="o" if sparse else None,
                markersize=3,
                label=name,
            )
        ax.set(title=" / ".join(names), xlabel="step")
        ax.grid(alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize=8)
        if names[0] == "lr":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes[len(panels) :]:
        ax.remove()
    fig.suptitle(f"training curves: {Path(csv_path).name}", fontsize=10)
    return _finish(fig, path)


# -- vision ---------------------------------------------------------------------------------------


def vit_positional_similarity(
    table: Tensor, grid: int, *, path: PathLike | None = None, dpi: float = 100
) -> Figure:
    """Cosine similarity of a Vision Transformer's patch position embeddings (Dosovitskiy et al.
    2021, figure 7, centre).

    A ``grid x grid`` mosaic of small ``grid x grid`` images: the tile in row ``r``, column
    ``c`` shows the cosine similarity between the embedding of patch ``(r, c)`` and that of
    every patch, on one scale from -1 to 1 (one colorbar). A trained table shows each tile
    brightest at its own position, with row and column structure; a fresh learned one is noise,
    the fixed 2-D sine-cosine table (:func:`attnlab.vision.sincos_2d_table`) is smooth.

    Args:
        table: the patch embeddings ``(N, d)`` with ``N = grid * grid``, row-major; or ``(1 + N,
            d)`` with the class token's row first (as
            :meth:`attnlab.vision.VisionTransformer.positional_table`), which is dropped.
        grid: patches per side.

    The axes is labelled ``"similarity"``; its image is the mosaic, ``grid * (grid + 1) - 1``
    pixels a side, with NaN (blank) gaps of one pixel between tiles.
    """
    check_positive_int(grid, "grid")
    count = grid * grid
    if not isinstance(table, Tensor):
        raise TypeError(f"table: expected an (N, d) or (1 + N, d) Tensor, got {shape_of(table)}")
    if table.dim() != 2:
        raise ValueError(
            f"table: expected shape (N, d) or (1 + N, d) with N = grid^2 = {count}, got "
            f"{tuple(table.shape)}"
        )
    if not table.dtype.is_floating_point:
        raise TypeError(f"table: expected a floating dtype, got {table.dtype}")
    rows = table.shape[0]
    if rows not in (count, count + 1) or table.shape[1] == 0:
        raise ValueError(
            f"table: expected {count} rows (grid={grid}: {grid}x{grid} patches) or {count + 1} "
            f"(the class token's first), got shape {tuple(table.shape)}"
        )
    dpi = _check_dpi(dpi)
    patches = table.detach()[rows - count :].to(torch.float32)  # (N, d)
    unit = torch.nn.functional.normalize(patches, dim=1, eps=1e-12)
    similarity = _to_numpy(unit @ unit.T).reshape(grid, grid, grid, grid)  # (r, c, r', c')
    side = grid * (grid + 1) - 1
    mosaic = np.full((side, side), np.nan, dtype=np.float32)
    for r in range(grid):
        for c in range(grid):
            top, left = r * (grid + 1), c * (grid + 1)
            mosaic[top : top + grid, left : left + grid] = similarity[r, c]
    fig = _figure(6.4, 5.6, dpi)
    ax = fig.subplots()
    ax.set_label("similarity")
    colors = matplotlib.colormaps["RdBu_r"].with_extremes(bad="white")
    im = ax.imshow(mosaic, cmap=colors, vmin=-1, vmax=1, interpolation="nearest")
    centres = [i * (grid + 1) + (grid - 1) / 2 for i in range(grid)]
    step = max(1, math.ceil(grid / 16))
    ax.set_xticks(centres[::step], [str(i + 1) for i in range(0, grid, step)], fontsize=8)
    ax.set_yticks(centres[::step], [str(i + 1) for i in range(0, grid, step)], fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set(xlabel="input patch column", ylabel="input patch row")
    ax.set_title("position embedding similarity", fontsize=10)
    fig.colorbar(im, ax=ax, label="cosine similarity")
    return _finish(fig, path)


def _image_array(image: object) -> np.ndarray:
    """``image`` ``(C, H, W)`` with C 1 or 3, or ``(H, W)``, as a float array scaled to [0, 1]
    (min-max, so normalised inputs display too): ``(H, W)`` or ``(H, W, 3)``."""
    if not isinstance(image, Tensor):
        raise TypeError(f"image: expected a (C, H, W) or (H, W) Tensor, got {type(image).__name__}")
    if image.dim() == 4:
        raise ValueError(
            f"image: expected one (C, H, W) or (H, W) image, got {tuple(image.shape)}; select "
            f"one: images[b]"
        )
    if image.dim() not in (2, 3):
        raise ValueError(f"image: expected shape (C, H, W) or (H, W), got {tuple(image.shape)}")
    if image.dim() == 3 and image.shape[0] not in (1, 3):
        channels_last = image.shape[-1] in (1, 3)
        hint = "; for channels-last (H, W, C) use image.permute(2, 0, 1)" if channels_last else ""
        raise ValueError(
            f"image: expected 1 or 3 channels first, (C, H, W), got {tuple(image.shape)}{hint}"
        )
    if image.shape[-1] == 0 or image.shape[-2] == 0:
        raise ValueError(f"image: empty image of shape {tuple(image.shape)}")
    array = _to_numpy(image if image.dtype.is_floating_point else image.float())
    if array.ndim == 3:
        array = array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)
    low, high = np.nanmin(array), np.nanmax(array)
    return (array - low) / (high - low) if high > low else np.zeros_like(array)


def attention_rollout_map(
    image: Tensor,
    rollout: Tensor,
    *,
    title: str | None = None,
    alpha: float = 0.6,
    path: PathLike | None = None,
    dpi: float = 100,
) -> Figure:
    """Where a Vision Transformer's class token looks (Dosovitskiy et al. 2021, figure 6;
    attention rollout, Abnar and Zuidema 2020).

    Three panels, side by side (axes labelled ``"image"``, ``"rollout"``, ``"overlay"``): the
    input image; the class token's rollout over the patches, upsampled to the image (each patch
    one block); and the rollout as a heat map over the image in gray.

    Args:
        image: one image, ``(C, H, W)`` with ``C`` 1 (grayscale) or 3 (RGB), or ``(H, W)``;
            shown min-max scaled to [0, 1], so normalised inputs display as they look.
        rollout: its ``(grid, grid)`` map, e.g. ``class_token_rollout(model, images)[b]``;
            ``grid`` must divide ``H`` and ``W``.
        title: the figure's title (default: "attention rollout of the class token").
        alpha: opacity of the heat map in the overlay, in (0, 1].
    """
    pixels = _image_array(image)
    height, width = pixels.shape[:2]
    if not isinstance(rollout, Tensor):
        raise TypeError(f"rollout: expected a (grid, grid) Tensor, got {type(rollout).__name__}")
    if rollout.dim() != 2:
        hint = "; select one image: rollout[b]" if rollout.dim() == 3 else ""
        raise ValueError(f"rollout: expected shape (grid, grid), got {tuple(rollout.shape)}{hint}")
    if not rollout.dtype.is_floating_point:
        raise TypeError(f"rollout: expected a floating dtype, got {rollout.dtype}")
    rows, cols = rollout.shape
    if rows != cols or rows == 0 or height % rows or width % cols:
        raise ValueError(
            f"rollout: expected a square (grid, grid) map whose grid divides the image's "
            f"{height}x{width}, got {tuple(rollout.shape)}"
        )
    alpha = check_positive_number(alpha, "alpha")
    if alpha > 1:
        raise ValueError(f"alpha: expected a number in (0, 1], got {alpha}")
    dpi = _check_dpi(dpi)
    saliency = _to_numpy(rollout)
    upsampled = np.kron(saliency, np.ones((height // rows, width // cols), dtype=np.float32))
    gray = pixels if pixels.ndim == 2 else pixels.mean(axis=2)
    panel = 3.2
    fig = _figure(3 * panel + 1.2, panel + 0.8, dpi)
    axes = fig.subplots(1, 3)
    image_kwargs = {"cmap": "gray", "vmin": 0.0, "vmax": 1.0} if pixels.ndim == 2 else {}
    axes[0].imshow(pixels, interpolation="nearest", **image_kwargs)
    axes[0].set_title("image", fontsize=9)
    heat = axes[1].imshow(upsampled, cmap="inferno", vmin=0.0, interpolation="nearest")
    axes[1].set_title(f"rollout ({rows}x{cols} patches)", fontsize=9)
    axes[2].imshow(gray, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    axes[2].imshow(upsampled, cmap="inferno", vmin=0.0, alpha=alpha, interpolation="nearest")
    axes[2].set_title("overlay", fontsize=9)
    for ax, label in zip(axes, ("image", "rollout", "overlay"), strict=True):
        ax.set_label(label)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(heat, ax=axes.tolist(), label="share of the class token", shrink=0.8)
    fig.suptitle(title or "attention rollout of the class token", fontsize=11)
    return _finish(fig, path)

"""Attention weights: a layers x heads grid (Vaswani et al. 2017, sec. 3.2; T2, T4), and the
encoder / decoder / cross pictures of one sentence of
:class:`attnlab.models.transformer.AttentionMaps`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from ..._checks import check_positive_int, check_type, is_int, shape_of
from ...models.transformer import AttentionMaps
from ._figures import (
    PathLike,
    check_dpi,
    figure,
    finish,
    font_and_step,
    set_ticks,
    text_inches,
    to_numpy,
    token_labels,
    token_list,
)


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
            :class:`attnlab.models.transformer.AttentionMaps`), or a tensor ``(L, H, T_q, T_k)``,
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
    dpi = check_dpi(dpi)
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
    q_labels = token_labels(query_tokens, t_q, "query_tokens", "T_q of weights")
    if key_tokens is None and query_tokens is not None and t_k == t_q:
        k_labels = q_labels
    else:
        k_labels = token_labels(key_tokens, t_k, "key_tokens", "T_k of weights")

    head_index = torch.tensor(head_ids)
    grid = [
        to_numpy(per_layer[layer].index_select(0, head_index.to(per_layer[layer].device)))
        for layer in layer_ids
    ]

    longest = max(t_q, t_k)
    cell = max(min(0.3, 3.6 / longest), 1.2 / longest)  # inches per token
    fontsize, step = font_and_step(cell)
    rows, cols = len(layer_ids), len(head_ids)
    panel_w, panel_h = t_k * cell, t_q * cell
    width = cols * (panel_w + 0.2) + text_inches(q_labels, fontsize) + 1.0 + 1.1
    height = rows * (panel_h + 0.4) + text_inches(k_labels, fontsize) + 0.5 + (0.5 if title else 0)
    title_width = len(title) * 12 * 0.55 / 72 + 0.4 if title else 0.0  # suptitle at 12 points
    fig = figure(max(width, title_width, 3.0), max(height, 2.5), dpi)
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
                set_ticks(ax, q_labels, step, fontsize, "y")
            else:
                ax.set_yticks([])
            if r == rows - 1:
                set_ticks(ax, k_labels, step, fontsize, "x")
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
    return finish(fig, path)


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
    items = None if tokens is None else token_list(tokens, token_name)
    if length is None:
        count = full if items is None else len(items)
        if not 1 <= count <= full:
            raise ValueError(
                f"{token_name}: expected 1 to {full} tokens (the padded length), got {count}"
            )
        positions = list(range(count))
    elif is_int(length):
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
            :func:`attnlab.nn.masks.padding_mask`), or a ``(T,)`` bool row, True on real tokens,
            for padding anywhere (e.g. ``padding_mask_from_ids(ids, pad_id)[index]`` of a
            left-padded batch). Default: every position (no crop) unless tokens are given.
        layers, heads, max_cells, dpi: as in :func:`attention_heatmaps`.
        out_dir: folder to write ``encoder.png``, ``decoder.png``, ``cross.png`` into.

    Returns:
        ``{kind: Figure}`` for the kinds present, in the order encoder, decoder, cross.
    """
    check_type(maps, AttentionMaps, "maps", "attnlab.AttentionMaps (from model.attention(...))")
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

"""Masks: padding, look-ahead and combined (sec. 3.2.3; T9-T11)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from ..._checks import check_bool, check_positive_int
from ...nn.masks import causal_mask, combine_masks, key_mask, padding_mask
from ._figures import (
    PathLike,
    check_dpi,
    figure,
    finish,
)

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

    * ``"padding"``: the padding mask ``(B, T)`` of :func:`attnlab.nn.masks.padding_mask`,
      1 on real tokens, 0 on pads (T10);
    * ``"causal"`` (when ``causal``): the look-ahead mask ``(T, T)``, lower-triangular: query
      ``i`` may attend to keys ``j <= i`` (T11);
    * ``"combined {b}"`` for each sentence ``b``: ``combine_masks(key_mask(padding),
      causal_mask(T))[b, 0]``, ``(T, T)``: key padding AND look-ahead (key padding alone when
      not ``causal``). Pad *keys* are blocked; the rows of pad *queries* still see the real
      keys (their outputs are never used; :func:`attnlab.nn.masks.pair_mask` would block them).

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
    check_bool(causal, "causal", TypeError)
    if max_len is not None:
        check_positive_int(max_len, "max_len")
    dpi = check_dpi(dpi)
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
    fig = figure(max(width, 6.5), height, dpi)
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
    return finish(fig, path)

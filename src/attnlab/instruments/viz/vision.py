"""The Vision Transformer's pictures: the patch position similarity mosaic (Dosovitskiy et
al. 2021, figure 7) and the class token's attention rollout over an image (figure 6)."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from ..._checks import check_positive_int, check_positive_number, check_type, shape_of
from ._figures import (
    PathLike,
    check_dpi,
    figure,
    finish,
    to_numpy,
)


def vit_positional_similarity(
    table: Tensor, grid: int, *, path: PathLike | None = None, dpi: float = 100
) -> Figure:
    """Cosine similarity of a Vision Transformer's patch position embeddings (Dosovitskiy et al.
    2021, figure 7, centre).

    A ``grid x grid`` mosaic of small ``grid x grid`` images: the tile in row ``r``, column
    ``c`` shows the cosine similarity between the embedding of patch ``(r, c)`` and that of
    every patch, on one scale from -1 to 1 (one colorbar). A trained table shows each tile
    brightest at its own position, with row and column structure; a fresh learned one is noise,
    the fixed 2-D sine-cosine table (:func:`attnlab.models.vision.sincos_2d_table`) is smooth.

    Args:
        table: the patch embeddings ``(N, d)`` with ``N = grid * grid``, row-major; or ``(1 + N,
            d)`` with the class token's row first (as
            :meth:`attnlab.models.vision.VisionTransformer.positional_table`), which is dropped.
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
    dpi = check_dpi(dpi)
    patches = table.detach()[rows - count :].to(torch.float32)  # (N, d)
    unit = torch.nn.functional.normalize(patches, dim=1, eps=1e-12)
    similarity = to_numpy(unit @ unit.T).reshape(grid, grid, grid, grid)  # (r, c, r', c')
    side = grid * (grid + 1) - 1
    mosaic = np.full((side, side), np.nan, dtype=np.float32)
    for r in range(grid):
        for c in range(grid):
            top, left = r * (grid + 1), c * (grid + 1)
            mosaic[top : top + grid, left : left + grid] = similarity[r, c]
    fig = figure(6.4, 5.6, dpi)
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
    return finish(fig, path)


def _image_array(image: object) -> np.ndarray:
    """``image`` ``(C, H, W)`` with C 1 or 3, or ``(H, W)``, as a float array scaled to [0, 1]
    (min-max, so normalised inputs display too): ``(H, W)`` or ``(H, W, 3)``."""
    check_type(image, Tensor, "image", "a (C, H, W) or (H, W) Tensor")
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
    array = to_numpy(image if image.dtype.is_floating_point else image.float())
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
    check_type(rollout, Tensor, "rollout", "a (grid, grid) Tensor")
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
    dpi = check_dpi(dpi)
    saliency = to_numpy(rollout)
    upsampled = np.kron(saliency, np.ones((height // rows, width // cols), dtype=np.float32))
    gray = pixels if pixels.ndim == 2 else pixels.mean(axis=2)
    panel = 3.2
    fig = figure(3 * panel + 1.2, panel + 0.8, dpi)
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
    return finish(fig, path)

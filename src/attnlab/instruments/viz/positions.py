"""Positions: the sinusoidal encoding and its similarity (sec. 3.5; T7, T8), and the cosine
similarity of learned position vectors."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from torch import Tensor

from ..._checks import check_positive_int, shape_of
from ...nn.positional import sinusoidal_table
from ._figures import (
    PathLike,
    check_dpi,
    figure,
    finish,
    to_numpy,
)


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
    dpi = check_dpi(dpi)
    table = sinusoidal_table(length, d_model)  # (length, d_model) float64
    similarity = table @ table.T  # (length, length)
    fig = figure(11.0, 4.8, dpi)
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
    return finish(fig, path)


def learned_positional_similarity(
    weight: Tensor,
    *,
    length: int | None = None,
    path: PathLike | None = None,
    dpi: float = 100,
) -> Figure:
    """Cosine similarity of learned position embeddings (tutorial T8; BERT, ViT).

    ``weight`` is the ``(max_len, d_model)`` table of
    :class:`attnlab.nn.positional.LearnedPositionalEmbedding` (or BERT's position embeddings);
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
    dpi = check_dpi(dpi)
    rows = weight.detach()[:length].to(torch.float32)
    unit = torch.nn.functional.normalize(rows, dim=1, eps=1e-12)
    similarity = to_numpy(unit @ unit.T)  # (P, P)
    fig = figure(6.0, 5.0, dpi)
    ax = fig.subplots()
    ax.set_label("similarity")
    im = ax.imshow(similarity, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(
        title="learned position embeddings: cosine similarity",
        xlabel="position",
        ylabel="position",
    )
    fig.colorbar(im, ax=ax, label="cos(w$_p$, w$_q$)")
    return finish(fig, path)

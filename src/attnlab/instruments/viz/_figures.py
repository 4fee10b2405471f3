"""What every picture shares: a figure with its own Agg canvas (no pyplot), writing it
atomically as a PNG, and token labels that fit their cells."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from ..._checks import check_positive_number, check_type
from ..._io import atomic_write

PathLike = str | os.PathLike

MAX_LABEL_CHARS = 12  # longer token labels are cut with an ellipsis
MIN_FONT = 4.0  # points; below this, labels are thinned instead of shrunk further
MAX_FONT = 9.0


# -- figures and files --------------------------------------------------------------------------


def figure(width: float, height: float, dpi: float) -> Figure:
    """A constrained-layout figure with its own Agg canvas (no pyplot)."""
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def finish(fig: Figure, path: PathLike | None) -> Figure:
    if path is not None:
        check_type(path, (str, os.PathLike), "path", "a str or os.PathLike")
        target = Path(path)
        if target.is_dir():
            raise ValueError(f"path: {target} is a directory, expected a PNG file name")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, lambda temp: fig.savefig(temp, format="png", dpi=fig.dpi))
    return fig


def check_dpi(dpi: object) -> float:
    return check_positive_number(dpi, "dpi")


def to_numpy(x: Tensor) -> np.ndarray:
    """Detached float32 CPU copy (bfloat16 and half included)."""
    return x.detach().to(device="cpu", dtype=torch.float32).numpy()


# -- labels ---------------------------------------------------------------------------------------


def label_text(token: object) -> str:
    text = str(token).replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    if text == "":
        text = "''"
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "…"
    # An even number of "$" would make matplotlib typeset the label as mathtext.
    return text.replace("$", r"\$")


def token_labels(tokens: object, count: int, name: str, what: str) -> list[str]:
    """``count`` labels from a token sequence, or the positions ``0 .. count - 1``."""
    if tokens is None:
        return [str(i) for i in range(count)]
    items = token_list(tokens, name)
    if len(items) != count:
        raise ValueError(f"{name}: expected {count} labels ({what}), got {len(items)}")
    return [label_text(t) for t in items]


def token_list(tokens: object, name: str) -> list[object]:
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


def font_and_step(cell_inches: float) -> tuple[float, int]:
    """Tick-label font size for cells of ``cell_inches``, and how many cells share a label."""
    fitting = cell_inches * 72.0 * 0.75
    if fitting >= MIN_FONT:
        return min(fitting, MAX_FONT), 1
    return MIN_FONT, math.ceil(MIN_FONT / fitting)


def text_inches(labels: Sequence[str], fontsize: float) -> float:
    longest = max((len(s) for s in labels), default=1)
    return longest * fontsize * 0.62 / 72.0


def set_ticks(ax, labels: Sequence[str], step: int, fontsize: float, axis: str) -> None:
    ticks = list(range(0, len(labels), step))
    if axis == "x":
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=fontsize)

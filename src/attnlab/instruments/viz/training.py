"""Training: the learning-rate schedule of eq. 3 (sec. 5.3) with its peaks, and curves from a
metrics CSV, one panel per quantity."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from ..._checks import check_positive_int
from ...train.schedule import peak_lr, transformer_lr_tensor
from ._figures import (
    PathLike,
    check_dpi,
    figure,
    finish,
)


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
    dpi = check_dpi(dpi)
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
    fig = figure(7.5, 4.5, dpi)
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
    return finish(fig, path)


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


def _run_labels(paths: Sequence[PathLike]) -> list[str]:
    """A short name per CSV: its run directory's name for ``OUT/metrics.csv``, else the file's
    stem; the paths as given when those names repeat."""
    names = [
        Path(p).parent.name
        if Path(p).name == "metrics.csv" and Path(p).parent.name
        else Path(p).stem
        for p in paths
    ]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def _by_step(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every column of a run in the order of its steps (a stable sort: rows of one step keep
    their order)."""
    order = np.argsort(data["step"], kind="stable")
    return {name: values[order] for name, values in data.items()}


def _panels(runs: Sequence[dict[str, np.ndarray]]) -> list[list[str]]:
    """Panels over the union of the runs' quantities, in first-seen order: ``[X, val_X]`` share
    one when both exist in some run."""
    names = list(dict.fromkeys(name for data in runs for name in data if name != "step"))
    return [
        [name] + ([f"val_{name}"] if f"val_{name}" in names else [])
        for name in names
        if not (name.startswith("val_") and name[4:] in names)
    ]


def training_curves(
    csv_path: PathLike | Sequence[PathLike],
    *,
    labels: Sequence[str] | None = None,
    path: PathLike | None = None,
    dpi: float = 100,
) -> Figure:
    """Training metrics against the step, one panel per quantity; several runs side by side.

    ``csv_path`` is a CSV with a header row and a ``step`` column; every other column whose
    cells are numbers (e.g. ``loss``, ``val_loss``, ``lr``, ``tokens_per_s``, ``bleu``) gets a
    panel; empty cells are gaps (validation columns are filled every N steps only), columns
    holding text are skipped. ``X`` and ``val_X`` share a panel (training and validation loss).
    Axes are labelled with the panel's first quantity (``"loss"``, ``"lr"``, ...).

    A sequence of CSVs compares runs (two recipes, or seeds): the panels are the union of their
    quantities, each run has one colour, a validation quantity is dashed beside the training
    one, and each line is labelled ``"RUN: X"``. ``labels`` names the runs (default: each
    ``OUT/metrics.csv``'s directory name, or the file's stem).

    Raises:
        FileNotFoundError: no such file.
        ValueError: no ``step`` column, a bad step, or no numeric data besides the step (each
            names the file); no CSV, or a ``labels`` of another length than the CSVs.
    """
    dpi = check_dpi(dpi)
    several = not isinstance(csv_path, str | os.PathLike)
    paths: list[PathLike] = list(csv_path) if several else [csv_path]  # type: ignore[arg-type]
    if not paths:
        raise ValueError("csv_path: expected a metrics CSV or a sequence of them, got none")
    if labels is None:
        labels = _run_labels(paths)
    elif isinstance(labels, str) or len(labels) != len(paths):
        raise ValueError(f"labels: expected {len(paths)} names (one a CSV), got {labels!r}")
    runs = [_by_step(_read_metrics(p)) for p in paths]
    panels = _panels(runs)
    cols = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / cols)
    fig = figure(5.5 * cols, 3.2 * rows + 0.4, dpi)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, names in zip(axes, panels, strict=False):
        ax.set_label(names[0])
        for index, (data, run) in enumerate(zip(runs, labels, strict=True)):
            for name in names:
                if name not in data:
                    continue
                values = data[name]
                keep = np.isfinite(values)
                sparse = keep.sum() < 0.5 * len(values) or keep.sum() <= 20
                style: dict[str, object] = {}
                if len(runs) > 1:
                    style["color"] = f"C{index % 10}"
                    style["linestyle"] = "--" if name.startswith("val_") else "-"
                ax.plot(
                    data["step"][keep],
                    values[keep],
                    marker="o" if sparse else None,
                    markersize=3,
                    label=f"{run}: {name}" if len(runs) > 1 else name,
                    **style,
                )
        ax.set(title=" / ".join(names), xlabel="step")
        ax.grid(alpha=0.3)
        if len(names) > 1 or len(runs) > 1:
            ax.legend(fontsize=8)
        if names[0] == "lr":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes[len(panels) :]:
        ax.remove()
    title = Path(paths[0]).name if len(runs) == 1 else ", ".join(labels)
    fig.suptitle(f"training curves: {title}", fontsize=10)
    return finish(fig, path)

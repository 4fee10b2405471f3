"""What a run reports: ``metrics.csv`` (one row per logged step), TensorBoard scalars when
TensorBoard is installed, and a tqdm progress bar; and the checks of an ``on_evaluate`` hook's
metrics."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import is_number
from .._io import atomic_write
from .rng import global_rng_untouched

__all__ = [
    "IMAGE_METRICS_COLUMNS",
    "METRICS_COLUMNS",
    "METRICS_FILE",
    "MetricsLog",
    "Reporter",
    "call_hook",
    "hook_metrics",
    "metrics_columns",
    "open_tensorboard",
    "progress_bar",
    "show_row",
]


def metrics_columns(rate_column: str, validation: Sequence[str] = ()) -> tuple[str, ...]:
    """The first columns of ``metrics.csv``: ``step, epoch, loss, lr``, the speed
    ``rate_column``, ``val_loss`` and an objective's other ``validation`` metrics."""
    return ("step", "epoch", "loss", "lr", rate_column, "val_loss", *validation)


METRICS_FILE = "metrics.csv"
METRICS_COLUMNS = metrics_columns("tokens_per_s")
# A classifier's metrics: its loss is per image and its speed in images per second.
IMAGE_METRICS_COLUMNS = metrics_columns("images_per_s", ("val_accuracy",))


class MetricsLog:
    """``metrics.csv``: a header, then rows appended and flushed one by one (what a crash
    leaves is every row written before it). New ``on_evaluate`` keys widen the header: the
    file is rewritten once, atomically, with empty cells in the older rows."""

    def __init__(
        self,
        path: Path,
        *,
        keep_until: int | None,
        columns: Sequence[str] = (),
        base: Sequence[str],
    ) -> None:
        self.path = path
        self.columns = list(base)
        rows: list[dict[str, str]] = []
        if keep_until is not None and path.is_file():
            text = path.read_text(encoding="utf-8")
            if not text.endswith("\n"):  # a row cut short by the crash (after the checkpoint)
                text = text[: text.rfind("\n") + 1]
            reader = csv.DictReader(io.StringIO(text, newline=""))
            header = list(reader.fieldnames or [])
            if header[: len(base)] != list(base):
                raise ValueError(f"{path}: header {header} does not start with {list(base)}")
            self.columns = header
            # Rows up to the checkpoint's step are kept; later ones will be written again.
            rows = [row for row in reader if int(row["step"]) <= keep_until]
        for name in columns:
            if name not in self.columns:
                self.columns.append(name)
        self._rewrite(rows)
        self._handle = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115
        self._writer = csv.writer(self._handle)

    def _rewrite(self, rows: Sequence[Mapping[str, str]]) -> None:
        def write(temp: str) -> None:
            with open(temp, "w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow(self.columns)
                for row in rows:
                    writer.writerow([row.get(c) or "" for c in self.columns])

        atomic_write(self.path, write)

    def write(self, row: Mapping[str, object]) -> None:
        new = [k for k in row if k not in self.columns]
        if new:
            self._handle.close()
            with open(self.path, newline="", encoding="utf-8") as handle:
                old = list(csv.DictReader(handle))
            self.columns += new
            self._rewrite(old)
            self._handle = open(self.path, "a", newline="", encoding="utf-8")  # noqa: SIM115
            self._writer = csv.writer(self._handle)
        self._writer.writerow([cell(row.get(c)) for c in self.columns])
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def open_tensorboard(out: Path) -> Any:
    """A ``SummaryWriter`` under ``out/tensorboard``, or None when TensorBoard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(out / "tensorboard"))


class Reporter:
    """What rank 0 reports as it trains: rows in ``out/metrics.csv`` (:class:`MetricsLog`), the
    same numbers as TensorBoard scalars (when installed), and a progress bar (with
    ``progress``). On other ranks it reports nothing.

    Args:
        out: the run directory.
        report: this process reports (rank 0).
        progress: show the progress bar, of ``total_steps`` (None: unknown) from ``step``.
        resumed_from: the checkpoint's step when resuming (later rows are dropped), or None.
        columns: the columns a resumed run's log had (``state.json``), or ().
        base: the objective's first columns; ``base[4]`` is the speed, in ``rate_unit``.
    """

    def __init__(
        self,
        out: Path,
        *,
        report: bool,
        progress: bool,
        total_steps: int | None,
        step: int,
        resumed_from: int | None,
        columns: Sequence[str],
        base: Sequence[str],
        rate_unit: str,
    ) -> None:
        self.rate_column, self.rate_unit = base[4], rate_unit
        self.log: MetricsLog | None = None
        self.writer: Any = None
        self.bar: Any = None
        if not report:
            return
        self.log = MetricsLog(
            out / METRICS_FILE, keep_until=resumed_from, columns=columns, base=base
        )
        self.writer = open_tensorboard(out)
        if progress:
            self.bar = progress_bar(total_steps, initial=step)

    @property
    def columns(self) -> list[str]:
        """The metrics log's columns now (the objective's, then the hook's)."""
        return self.log.columns if self.log is not None else []

    def stepped(self) -> None:
        """One optimizer step done."""
        if self.bar is not None:
            self.bar.update(1)

    def write(self, row: Mapping[str, object], step: int) -> None:
        """A metrics row, its numbers as scalars at ``step``, and the bar's summary."""
        if self.log is not None:
            self.log.write(row)
        if self.writer is not None:
            for key, value in row.items():
                if key not in ("step", "epoch") and isinstance(value, float):
                    self.writer.add_scalar(key, value, step)
        if self.bar is not None:
            show_row(self.bar, row, self.rate_column, self.rate_unit)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.log is not None:
            self.log.close()
        if self.writer is not None:
            self.writer.close()


def progress_bar(total: int | None, initial: int) -> Any:
    """A tqdm bar on stderr counting optimizer steps."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit="step",
        file=sys.stderr,
        dynamic_ncols=True,
        desc="train",
    )


def show_row(bar: Any, row: Mapping[str, object], rate_column: str, rate_unit: str) -> None:
    """The loss, learning rate, speed and validation loss of ``row`` beside the bar."""
    shown = {
        "loss": f"{row['loss']:.3f}" if row.get("loss") is not None else "-",
        "lr": f"{row['lr']:.2e}",
        rate_unit: f"{row[rate_column]:.0f}" if row.get(rate_column) else "-",
    }
    if row.get("val_loss") is not None:
        shown["val"] = f"{row['val_loss']:.3f}"
    bar.set_postfix(shown, refresh=False)


def call_hook(
    hook: Callable[[int, nn.Module], object], step: int, model: nn.Module, device: torch.device
) -> object:
    """``hook(step, model)`` with ``model`` in eval mode (its mode restored after) and the
    global RNG states untouched, so that what the hook draws does not change training's."""
    was_training = model.training
    model.eval()
    try:
        with global_rng_untouched(device):
            return hook(step, model)
    finally:
        model.train(was_training)


def hook_metrics(result: object, columns: Sequence[str]) -> dict[str, float]:
    """The metrics an ``on_evaluate`` hook returned (a dict of new column name -> number, or
    None), as floats; TypeError / ValueError naming the hook otherwise."""
    if result is None:
        return {}
    if not isinstance(result, Mapping):
        raise TypeError(
            f"on_evaluate: expected a dict of metric name -> number, got {type(result).__name__}"
        )
    metrics: dict[str, float] = {}
    for key, value in result.items():
        if not isinstance(key, str) or key in columns or not key:
            raise ValueError(
                f"on_evaluate: metric name {key!r} is not a new column name "
                f"(reserved: {list(columns)})"
            )
        if not (is_number(value) or isinstance(value, (np.number, Tensor))):
            raise TypeError(f"on_evaluate: metric {key!r} is not a number: {value!r}")
        metrics[key] = float(value)
    return metrics

"""What a run reports: ``metrics.csv`` (one row per logged step), TensorBoard scalars when
TensorBoard is installed, ``train.log`` and progress on the console (:mod:`.progress`); and the
checks of an ``on_evaluate`` hook's metrics."""

from __future__ import annotations

import csv
import io
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_type, is_number
from .._io import atomic_write
from .progress import TRAIN_LOG, Progress, TrainLog, evaluation_line, step_line, terminal_bar
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
    same numbers as TensorBoard scalars (when installed), ``out/train.log`` (each metrics row
    as a plain line, evaluations, checkpoints, start and stop; appended on resume), and
    progress on the console. On other ranks it reports nothing.

    The console: with ``progress`` and stderr a terminal, a bar that redraws in place (the
    fraction done, the latest row's numbers, the time left); otherwise the plain lines (each
    metrics row, each evaluation, start and stop) go to ``log`` when given, else to stderr
    with ``progress``, else nowhere.

    Args:
        out: the run directory.
        report: this process reports (rank 0).
        progress: show progress on stderr (see above).
        total_steps: the step bound (``planned_steps``), or None for a run bound by time only.
        step: the step training starts from.
        resumed_from: the checkpoint's step when resuming (later rows are dropped), or None.
        columns: the columns a resumed run's log had (``state.json``), or ().
        base: the objective's first columns; ``base[4]`` is the speed, in ``rate_unit``.
        budget_s: the time bound in seconds (``max_minutes * 60``), or None.
        clock: the training time so far in seconds, across resumes (default: since now).
        log: receives the plain lines when no bar is shown (e.g. ``print``), or None.
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
        budget_s: float | None = None,
        clock: Callable[[], float] | None = None,
        log: Callable[[str], object] | None = None,
    ) -> None:
        self.rate_column, self.rate_unit = base[4], rate_unit
        self.training_columns = tuple(base[:5])
        self.total_steps, self.budget_s = total_steps, budget_s
        self.clock = clock if clock is not None else _since(time.monotonic())
        self.step = step
        self._first = (step, self.clock())  # the speed is measured from here
        self._last_row: Mapping[str, object] = {}
        self.log: MetricsLog | None = None
        self.writer: Any = None
        self.bar: Any = None
        self.train_log: TrainLog | None = None
        self.say: Callable[[str], object] | None = None
        if not report:
            return
        self.log = MetricsLog(
            out / METRICS_FILE, keep_until=resumed_from, columns=columns, base=base
        )
        self.writer = open_tensorboard(out)
        self.train_log = TrainLog(out / TRAIN_LOG)
        if progress and _is_terminal(sys.stderr):
            self.bar = terminal_bar()
            self._show()
        elif log is not None:
            self.say = log
        elif progress:
            self.say = _to_stderr

    @property
    def columns(self) -> list[str]:
        """The metrics log's columns now (the objective's, then the hook's)."""
        return self.log.columns if self.log is not None else []

    def progress(self) -> Progress:
        """Where the run stands now: its step, bounds, training time and measured speed."""
        elapsed = self.clock()
        steps, seconds = self.step - self._first[0], elapsed - self._first[1]
        return Progress(
            step=self.step,
            total_steps=self.total_steps,
            elapsed_s=elapsed,
            budget_s=self.budget_s,
            steps_per_s=steps / seconds if steps > 0 and seconds > 0 else None,
        )

    def event(self, line: str, *, console: bool = False) -> None:
        """A line for ``train.log`` (start, checkpoint, stop); ``console``: shown as well."""
        if self.train_log is not None:
            self.train_log.write(line)
        if not console:
            return
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        elif self.say is not None:
            self.say(line)

    def stepped(self, step: int | None = None) -> None:
        """One optimizer step done (``step``: the count now; default one more)."""
        self.step = self.step + 1 if step is None else step
        if self.bar is not None:
            self._show()

    def write(self, row: Mapping[str, object], step: int) -> None:
        """A metrics row: in ``metrics.csv``, as scalars at ``step``, as a plain line (and an
        evaluation line when it has a validation loss), and beside the bar."""
        if self.log is None:
            return
        self.log.write(row)
        if self.writer is not None:
            for key, value in row.items():
                if key not in ("step", "epoch") and isinstance(value, float):
                    self.writer.add_scalar(key, value, step)
        self.step, self._last_row = step, row
        lines = (
            step_line(self.progress(), row, self.rate_column, self.rate_unit),
            evaluation_line(step, row, self.training_columns),
        )
        for line in lines:
            if line is not None:
                self.event(line)
                if self.say is not None:
                    self.say(line)
        if self.bar is not None:
            self._show()

    def _show(self) -> None:
        """Update the bar with the latest row's numbers (tqdm limits how often it redraws)."""
        progress = self.progress()
        text = step_line(progress, self._last_row, self.rate_column, self.rate_unit)
        self.bar.set_description_str(text, refresh=False)
        done = round(1000 * (progress.fraction() or 0.0))
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        for part in (self.bar, self.log, self.writer, self.train_log):
            if part is not None:
                part.close()


def _since(start: float) -> Callable[[], float]:
    return lambda: time.monotonic() - start


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    check_type(result, Mapping, "on_evaluate", "a dict of metric name -> number")
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

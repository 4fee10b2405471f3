"""Progress a person can read: where a run stands against its bounds (steps, epochs, minutes),
an estimate of the time left, one plain line per metrics row, ``out/train.log``, and the
terminal's bar.

A run stops at the first bound it reaches: ``max_steps`` / ``max_epochs`` (a number of steps,
:func:`~attnlab.train.optim.planned_steps`) or ``max_minutes`` (training time across resumes).
:class:`Progress` holds both; its estimate of the time left is the sooner of the two, so it
never exceeds what is left of the time budget.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TRAIN_LOG", "Progress", "TrainLog", "append_train_log", "format_duration"]

#: The run's log of plain lines (steps, evaluations, checkpoints, start and stop), in ``out``.
TRAIN_LOG = "train.log"


def format_duration(seconds: float | None) -> str:
    """``M:SS`` under an hour, ``H:MM:SS`` from one hour; ``?`` for unknown (None)."""
    if seconds is None or seconds != seconds:
        return "?"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass(frozen=True)
class Progress:
    """Where a run stands against its bounds, at one moment.

    Args:
        step: optimizer steps done (across resumes).
        total_steps: the step bound (from ``max_steps`` / ``max_epochs``), or None.
        elapsed_s: training time so far, across resumes.
        budget_s: the time bound (``max_minutes * 60``), or None.
        steps_per_s: the speed measured in this process (None before a step is timed).
    """

    step: int
    total_steps: int | None
    elapsed_s: float
    budget_s: float | None
    steps_per_s: float | None

    def time_left_s(self) -> float | None:
        """What is left of the time budget (never negative), or None without one."""
        if self.budget_s is None:
            return None
        return max(0.0, self.budget_s - self.elapsed_s)

    def eta_s(self) -> float | None:
        """Seconds until the first bound is reached: the steps left at the measured speed, or
        the time left of the budget, whichever is sooner. None while unknown: with a step bound
        and no speed measured yet, or with neither bound."""
        estimates = []
        if self.total_steps is not None:
            if not self.steps_per_s:
                return None
            estimates.append(max(0, self.total_steps - self.step) / self.steps_per_s)
        left = self.time_left_s()
        if left is not None:
            estimates.append(left)
        return min(estimates) if estimates else None

    def fraction(self) -> float | None:
        """How far the run is towards the bound it reaches first, in [0, 1] (None: unknown)."""
        parts = []
        if self.total_steps:
            parts.append(self.step / self.total_steps)
        if self.budget_s:
            parts.append(self.elapsed_s / self.budget_s)
        return min(1.0, max(parts)) if parts else None

    def position(self) -> str:
        """``step 200/1200 (17%)``; ``step 200 (68%)`` for a run bound by time alone."""
        total = f"/{self.total_steps}" if self.total_steps is not None else ""
        fraction = self.fraction()
        percent = f" ({fraction:.0%})" if fraction is not None else ""
        return f"step {self.step}{total}{percent}"

    def timing(self) -> str:
        """``elapsed 0:41 eta 3:24``; with a time budget ``elapsed 0:41/1:00 eta 0:19``."""
        budget = f"/{format_duration(self.budget_s)}" if self.budget_s is not None else ""
        return (
            f"elapsed {format_duration(self.elapsed_s)}{budget} eta {format_duration(self.eta_s())}"
        )


def start_line(
    step: int,
    bounds: Mapping[str, object],
    total_steps: int | None,
    where: str,
    resumed: bool,
) -> str:
    """``start: step 0 of 1200 (max_steps 1200, max_minutes 20.0) on cpu``, or ``resume from
    the checkpoint: step 600 of 1200 (...) on cpu``; ``bounds`` holds the bounds that are set."""
    listed = ", ".join(f"{name} {value}" for name, value in bounds.items() if value is not None)
    total = f" of {total_steps}" if total_steps is not None else ""
    what = "resume from the checkpoint" if resumed else "start"
    return f"{what}: step {step}{total} ({listed}) on {where}"


def step_line(progress: Progress, row: Mapping[str, object], rate_column: str, unit: str) -> str:
    """One plain line for a metrics row: ``step 200/1200 (17%) loss 2.314 lr 3.1e-04 812 tok/s
    elapsed 0:41 eta 3:24``."""
    parts = [progress.position()]
    if row.get("loss") is not None:
        parts.append(f"loss {row['loss']:.3f}")
    if row.get("lr") is not None:
        parts.append(f"lr {row['lr']:.1e}")
    if row.get(rate_column):
        parts.append(f"{row[rate_column]:.0f} {unit}")
    parts.append(progress.timing())
    return " ".join(parts)


def evaluation_line(step: int, row: Mapping[str, object], training: Sequence[str]) -> str | None:
    """``evaluation at step 200: val_loss 2.104, val_bleu 31.2`` for a row with a validation
    loss: its columns other than the ``training`` ones (step, epoch, loss, lr, speed); else
    None."""
    if row.get("val_loss") is None:
        return None
    shown = [
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in row.items()
        if key not in training and value is not None
    ]
    return f"evaluation at step {step}: " + ", ".join(shown)


class TrainLog:
    """``out/train.log``: one timestamped line at a time, appended and flushed (what a killed
    run leaves is every line written before it; a resumed run continues the same file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, line: str) -> None:
        self._handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def append_train_log(out: Path, line: str) -> None:
    """Append one line to ``out/train.log`` (for the stages before and after the loop)."""
    log = TrainLog(Path(out) / TRAIN_LOG)
    try:
        log.write(line)
    finally:
        log.close()


def terminal_bar() -> Any:
    """A tqdm bar on stderr for a terminal: the fraction done, then the line's text (set with
    ``set_description_str``). Its own estimate is not shown: :meth:`Progress.eta_s` is."""
    from tqdm import tqdm

    return tqdm(
        total=1000,
        bar_format="train {percentage:3.0f}%|{bar}| {desc}",
        file=sys.stderr,
        dynamic_ncols=True,
    )

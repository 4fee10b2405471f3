"""Where a run stands: its counters, its best validation loss, why it stops, and the running
sums of the next metrics row. Saved in each checkpoint's ``state.json`` and restored on resume."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import TrainConfig

__all__ = ["Position"]


@dataclass
class Position:
    """Where training stands (all counts are over every replica)."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # global batches of ``epoch`` already trained on
    best_val_loss: float | None = None
    best_step: int | None = None
    bad_evals: int = 0  # evaluations since the best (early stopping)
    last_val_loss: float | None = None
    trained: int = 0  # what the loss is summed over (target tokens, images)
    elapsed_s: float = 0.0  # training time, across resumes
    # The rows' running sums since the last metrics row.
    window_loss: float = 0.0
    window_count: int = 0  # the objective's units, as ``trained``
    window_seconds: float = 0.0  # time in training steps (evaluations and saving excluded)

    def advance(
        self, batches: int, epoch_batches: int, loss_sum: float, count: int, seconds: float
    ) -> None:
        """Count one optimizer step over ``batches`` of the epoch's ``epoch_batches``, with the
        step's summed loss over ``count`` units, taking ``seconds``."""
        self.window_seconds += seconds
        self.step += 1
        self.batch_in_epoch += batches
        if self.batch_in_epoch >= epoch_batches:
            self.epoch += 1
            self.batch_in_epoch = 0
        self.trained += count
        self.window_loss += loss_sum
        self.window_count += count

    def record_validation(self, val_loss: float) -> None:
        """Note a validation loss: the best so far, or one more evaluation without progress."""
        self.last_val_loss = val_loss
        if self.best_val_loss is None or val_loss < self.best_val_loss:
            self.best_val_loss, self.best_step, self.bad_evals = val_loss, self.step, 0
        else:
            self.bad_evals += 1

    def stop_reason(self, config: TrainConfig, *, evaluated: bool, out_of_time: bool) -> str | None:
        """Why training stops here (None: it goes on): after an evaluation, early stopping;
        else a limit reached (``out_of_time``: the replicas' vote on ``max_minutes``)."""
        if evaluated:
            if config.patience is not None and self.bad_evals >= config.patience:
                return "early_stopping"
            return None
        if config.max_steps is not None and self.step >= config.max_steps:
            return "max_steps"
        if config.max_epochs is not None and self.epoch >= config.max_epochs:
            return "max_epochs"
        if out_of_time:
            return "max_minutes"
        return None

    def epochs(self, epoch_batches: int) -> float:
        """Epochs trained, fractional (``epoch_batches``: the current epoch's batches)."""
        return round(self.epoch + self.batch_in_epoch / epoch_batches, 4)

    def take_window(self, rate_column: str) -> dict[str, float | None]:
        """The mean loss per unit and the speed in units per second since the last row
        (``loss``, ``rate_column``), and a new window."""
        seconds, count = self.window_seconds, self.window_count
        means = {
            "loss": self.window_loss / count if count else None,
            rate_column: round(count / seconds, 1) if seconds > 0 else None,
        }
        self.window_loss, self.window_count, self.window_seconds = 0.0, 0, 0.0
        return means

    def to_state(self, unit: str, elapsed_s: float) -> dict[str, Any]:
        """The fields for ``state.json``; ``trained`` is named for its ``unit``
        (``train_tokens``, ``train_images``), and ``elapsed_s`` is the time until now."""
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "best_val_loss": self.best_val_loss,
            "best_step": self.best_step,
            "bad_evals": self.bad_evals,
            "last_val_loss": self.last_val_loss,
            f"train_{unit}": self.trained,
            "elapsed_s": elapsed_s,
            "window": {
                "loss": self.window_loss,
                "count": self.window_count,
                "seconds": self.window_seconds,
            },
        }

    @staticmethod
    def check_state(
        state: Mapping[str, Any],
        unit: str,
        *,
        epoch_batches: Callable[[int], int] | None = None,
    ) -> None:
        """Raise ValueError naming the first field of ``state`` (as :meth:`to_state` wrote it)
        that is missing, of the wrong type or out of range: counts are non-negative ints, the
        epoch and the best step at most the step, a loss a number or null, times finite; with
        ``epoch_batches`` (the global batches of an epoch), the position inside the epoch is
        one of its batches."""

        def count(name: str, value: object, most: int | None = None) -> int:
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                raise ValueError(f"{name}: expected a non-negative int, got {value!r:.40}")
            if most is not None and value > most:
                raise ValueError(f"{name}: {value} is beyond the step, {most}")
            return value

        def number(name: str, value: object, *, optional: bool = False) -> None:
            if value is None and optional:
                return
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"{name}: expected a number, got {value!r:.40}")

        def duration(name: str, value: object) -> None:
            number(name, value)
            if not (math.isfinite(value) and value >= 0):  # type: ignore[arg-type]
                raise ValueError(f"{name}: expected a finite time >= 0, got {value!r}")

        fields = ("step", "epoch", "batch_in_epoch", "best_val_loss", "best_step", "bad_evals")
        fields += ("last_val_loss", "elapsed_s", "window")
        missing = [name for name in fields if name not in state]
        if missing:
            raise ValueError(f"{missing[0]}: missing")
        step = count("step", state["step"])
        epoch = count("epoch", state["epoch"], step)
        batch = count("batch_in_epoch", state["batch_in_epoch"])
        if epoch_batches is not None and batch >= max(1, epoch_batches(epoch)):
            raise ValueError(
                f"batch_in_epoch: {batch}, but epoch {epoch} has {epoch_batches(epoch)} batches"
            )
        number("best_val_loss", state["best_val_loss"], optional=True)
        if state["best_step"] is not None or state["best_val_loss"] is not None:
            count("best_step", state["best_step"], step)
        count("bad_evals", state["bad_evals"], step)
        number("last_val_loss", state["last_val_loss"], optional=True)
        trained = f"train_{unit}" if f"train_{unit}" in state else "train_tokens"
        count(trained, state.get(trained, 0))
        duration("elapsed_s", state["elapsed_s"])
        window = state["window"]
        if not isinstance(window, Mapping):
            raise ValueError(f"window: expected an object, got {window!r:.40}")
        number("window.loss", window.get("loss"))
        count("window.count", window.get("count", window.get("tokens")))
        duration("window.seconds", window.get("seconds"))

    @classmethod
    def from_state(cls, state: Mapping[str, Any], unit: str) -> Position:
        """The position saved by :meth:`to_state` (checkpoints written before the count was
        named for its unit say ``train_tokens`` and ``window.tokens``)."""
        window = state["window"]
        return cls(
            step=state["step"],
            epoch=state["epoch"],
            batch_in_epoch=state["batch_in_epoch"],
            best_val_loss=state["best_val_loss"],
            best_step=state["best_step"],
            bad_evals=state["bad_evals"],
            last_val_loss=state["last_val_loss"],
            trained=state.get(f"train_{unit}", state.get("train_tokens", 0)),
            elapsed_s=state["elapsed_s"],
            window_loss=window["loss"],
            window_count=window.get("count", window.get("tokens", 0)),
            window_seconds=window["seconds"],
        )

"""The best model so far: ``out/best/``, a model directory (weights, config, tokenizers) kept
beside the last checkpoints and the averaged ``out/model``, rewritten whenever an evaluation
beats every earlier one on the validation column ``train.keep_best`` names.

Which model is best is a choice made on validation data: a column whose name ends in ``loss``
is better lower (``val_loss``), any other better higher (``val_bleu``, ``val_exact``,
``val_accuracy``). A tie keeps the earlier model. ``out/best/best.json`` records the column,
its value and the step; a resumed run reads it back, so the choice spans the whole run (a run
resumed from a checkpoint older than ``best/`` replays the same steps bit for bit and finds the
same values, which do not replace it).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._io import atomic_write_dir, not_written, read_json, write_json
from ..models.saved import PretrainedModel

__all__ = ["BEST_DIR", "BEST_FILE", "BestModel", "lower_is_better"]

BEST_DIR = "best"
BEST_FILE = "best.json"


def lower_is_better(column: str) -> bool:
    """True for a loss column (``val_loss``), False for a score (``val_bleu``)."""
    return column.endswith("loss")


class BestModel:
    """Keeps ``out/best`` for the validation column ``column`` (see the module's docstring).

    Args:
        out: the run directory.
        column: a validation column of the metrics row, e.g. ``"val_bleu"``.
        tokenizers: tokenizer files copied beside the weights (the model directory is whole).
    """

    def __init__(self, out: Path, column: str, tokenizers: Sequence[Path]) -> None:
        self.directory = Path(out) / BEST_DIR
        self.column = column
        self.tokenizers = list(tokenizers)
        self.value: float | None = None
        self.step: int | None = None

    def restore(self) -> None:
        """Read ``best/best.json`` of a resumed run (nothing there: no best yet)."""
        path = self.directory / BEST_FILE
        if not path.is_file():
            return
        try:
            record = read_json(path)
            value, step = float(record["value"]), int(record["step"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{path}: not a best-model record ({error}); delete {self.directory} to choose "
                f"the best model again from here on"
            ) from None
        if record.get("column") != self.column:
            raise ValueError(
                f"keep_best: {path} was chosen by {record.get('column')!r}, this run by "
                f"{self.column!r}; keep the run's column, or delete {self.directory}"
            )
        self.value, self.step = value, step

    def offer(self, row: Mapping[str, object], step: int, model: PretrainedModel) -> str | None:
        """Save ``model`` as ``out/best`` when ``row[column]`` beats the best so far; return a
        line for the log when it does. ValueError when the row lacks the column."""
        if self.column not in row:
            known = sorted(k for k in row if k.startswith("val_"))
            raise ValueError(
                f"keep_best: {self.column!r} is not a validation column of this run (it has "
                f"{', '.join(known)})"
            )
        value = float(row[self.column])  # type: ignore[arg-type]
        if math.isnan(value) or not self._better(value):
            return None
        record = {"column": self.column, "value": value, "step": step}

        def build(temp: Path) -> None:
            model.write_files(temp)
            for source in self.tokenizers:
                shutil.copyfile(source, temp / source.name)
            write_json(temp / BEST_FILE, record)

        try:
            atomic_write_dir(self.directory, build)
        except OSError as error:
            raise not_written(error, self.directory, what="the previous best is intact") from error
        self.value, self.step = value, step
        return f"best {self.column} {value:.4g} at step {step}: saved {self.directory}"

    def _better(self, value: float) -> bool:
        if self.value is None:
            return True
        return value < self.value if lower_is_better(self.column) else value > self.value

    def summary(self) -> dict[str, Any] | None:
        """``{"column", "value", "step", "model_dir"}`` of the best so far, or None."""
        if self.step is None:
            return None
        return {
            "column": self.column,
            "value": self.value,
            "step": self.step,
            "model_dir": str(self.directory),
        }

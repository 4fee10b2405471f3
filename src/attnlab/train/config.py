"""How to train: :class:`TrainConfig`, every field checked on construction."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._checks import (
    check_bool,
    check_int,
    check_positive_number,
    check_rate,
    dataclass_from,
    is_number,
)

__all__ = ["SCHEDULES", "TRAJECTORY_FIELDS", "TrainConfig"]

SCHEDULES = ("transformer", "cosine")
# TrainConfig fields that shape the trajectory: a resumed run must keep them.
TRAJECTORY_FIELDS = (
    "max_tokens",
    "batch_size",
    "accumulate",
    "schedule",
    "lr_factor",
    "warmup",
    "lr",
    "weight_decay",
    "betas",
    "eps",
    "label_smoothing",
    "augment",
    "clip_norm",
    "bf16",
    "seed",
)


@dataclass
class TrainConfig:
    """How to train; every field is checked on construction (errors name the field).

    Attributes:
        out: the run directory (created if needed).
        max_tokens: tokens per side per batch, padding included (sec. 5.1: ~25000), before
            accumulation and for all replicas together (sequence models).
        batch_size: images per batch, before accumulation and for all replicas together
            (required for a :class:`~attnlab.models.vision.VisionTransformer`; unused otherwise).
        accumulate: batches per optimizer step (gradient accumulation).
        schedule: ``"transformer"``, the paper's eq. 3
            (:func:`attnlab.train.schedule.transformer_lr`, scaled by ``lr_factor``), or
            ``"cosine"``, linear warm-up to ``lr`` then cosine decay to 0 at the last step
            (:func:`attnlab.train.schedule.cosine_lr`; ViT's; needs ``max_steps`` or ``max_epochs``
        to know where the last step is). lr_factor, warmup: eq. 3's scale, and the warm-up steps of
        either schedule. lr: the cosine schedule's peak rate.
        weight_decay: decoupled weight decay (AdamW) on the weight matrices and convolution
            kernels (not on biases, LayerNorms, embeddings, positional tables or the class
            token); 0 is the paper's plain Adam.
        betas, eps: Adam's (sec. 5.3: 0.9, 0.98, 1e-9).
        label_smoothing: eps_ls (sec. 5.4: 0.1), in [0, 1).
        augment: jitter each training image of a classifier with
            :func:`attnlab.data.images.random_affine` (rotation up to 12 degrees, scale up to
            10%, shift up to 1 pixel), drawn from torch's generator, so a resume repeats it.
        clip_norm: clip the gradient's global L2 norm to this, or None.
        max_steps, max_epochs, max_minutes: stop at the first reached; at least one is needed.
            ``max_minutes`` counts training time across resumes.
        eval_every: validation loss every N optimizer steps (and at the end).
        checkpoint_every: a checkpoint every N steps (and at the end).
        keep_checkpoints: how many recent checkpoints stay on disk.
        average_last: the final model averages the last k checkpoints (1: the last one);
            at most ``keep_checkpoints``.
        patience: stop after this many evaluations without a better validation loss, or None.
        keep_best: also keep the best model so far as ``out/best`` (a model directory), by
            this validation column: ``"val_loss"`` (lower is better, as any ``*loss``), or a
            score such as ``"val_bleu"``, ``"val_chrf"`` or ``"val_accuracy"`` (higher is
            better); None keeps none (:mod:`attnlab.train.best`).
        bf16: run the forward pass under bfloat16 autocast (CPU or CUDA); the loss stays float32.
        compile: run the loss (forward and backward, not the optimizer) through
            ``torch.compile`` (inductor, dynamic shapes: one graph for every batch shape),
            drawing dropout from torch's own generator, so a compiled run follows the eager one
            to float rounding and resumes alike (:mod:`attnlab.train.step`). It pays for itself
            only where inductor fuses better than eager runs (not on a 2-core CPU, see
            docs/benchmarks.md); without a C++ compiler, or if compiling fails, training goes
            on eagerly, saying so.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        seed: seeds dropout (and the batch order with the epoch).
        log_every: a metrics row every N steps.
    """

    out: str
    max_tokens: int = 4096
    batch_size: int | None = None
    accumulate: int = 1
    schedule: str = "transformer"
    lr_factor: float = 1.0
    warmup: int = 4000
    lr: float | None = None
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    label_smoothing: float = 0.1
    augment: bool = False
    clip_norm: float | None = 1.0
    max_steps: int | None = None
    max_epochs: int | None = None
    max_minutes: float | None = None
    eval_every: int = 500
    checkpoint_every: int = 500
    keep_checkpoints: int = 5
    average_last: int = 5
    patience: int | None = None
    keep_best: str | None = None
    bf16: bool = False
    compile: bool = False
    device: str = "auto"
    seed: int = 0
    log_every: int = 10

    def __post_init__(self) -> None:
        if isinstance(self.out, os.PathLike):
            self.out = os.fspath(self.out)
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)  # type: ignore[assignment]
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first field that is not valid."""
        if not isinstance(self.out, str) or not self.out:
            raise ValueError(f"out: expected a directory path, got {self.out!r}")
        for name in (
            "max_tokens",
            "accumulate",
            "warmup",
            "eval_every",
            "checkpoint_every",
            "keep_checkpoints",
            "average_last",
            "log_every",
        ):
            check_int(getattr(self, name), name, minimum=1)
        for name in ("max_steps", "max_epochs", "patience", "batch_size"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, minimum=1)
        check_int(self.seed, "seed", minimum=0)
        for name in ("lr_factor", "eps"):
            check_positive_number(getattr(self, name), name)
        for name in ("clip_norm", "max_minutes", "lr"):
            if getattr(self, name) is not None:
                check_positive_number(getattr(self, name), name)
        if not (
            isinstance(self.betas, tuple)
            and len(self.betas) == 2
            and all(is_number(b) and 0 <= b < 1 for b in self.betas)
        ):
            raise ValueError(f"betas: expected two numbers in [0, 1), got {self.betas!r}")
        check_rate(self.label_smoothing, "label_smoothing")
        if not (is_number(self.weight_decay) and 0 <= self.weight_decay < float("inf")):
            raise ValueError(
                f"weight_decay: expected a finite number >= 0, got {self.weight_decay!r}"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {list(SCHEDULES)}, got {self.schedule!r}")
        if self.schedule == "cosine":
            if self.lr is None:
                raise ValueError("lr: the cosine schedule needs its peak rate, got None")
            if self.max_steps is None and self.max_epochs is None:
                raise ValueError(
                    "max_steps, max_epochs: the cosine schedule decays to 0 at the last step; "
                    "set one of them (max_minutes alone does not say where that is)"
                )
            if self.max_steps is not None and self.warmup >= self.max_steps:
                raise ValueError(  # known before any work (with max_epochs: once batched)
                    f"warmup: {self.warmup} warm-up steps, but training lasts {self.max_steps} "
                    f"steps (max_steps); the cosine schedule needs warmup < its last step"
                )
        for name in ("bf16", "augment", "compile"):
            check_bool(getattr(self, name), name)
        if self.keep_best is not None and not (
            isinstance(self.keep_best, str) and self.keep_best.startswith("val_")
        ):
            raise ValueError(
                f"keep_best: expected None or a validation column such as 'val_loss' or "
                f"'val_bleu', got {self.keep_best!r}"
            )
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device: expected 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if self.max_steps is None and self.max_epochs is None and self.max_minutes is None:
            raise ValueError(
                "max_steps, max_epochs, max_minutes: all None; set at least one to bound training"
            )
        if self.average_last > self.keep_checkpoints:
            raise ValueError(
                f"average_last: {self.average_last} checkpoints to average, but only "
                f"keep_checkpoints={self.keep_checkpoints} are kept"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``betas`` as a list)."""
        data = dataclasses.asdict(self)
        data["betas"] = list(self.betas)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Build from a mapping such as :meth:`to_dict`'s; unknown keys are an error."""
        return dataclass_from(cls, data, "TrainConfig")

    def trajectory_changes(self, saved: TrainConfig) -> list[str]:
        """``name=old -> new`` for each field that shapes the trajectory and differs from
        ``saved``'s (with the cosine schedule, where training ends shapes the whole curve)."""
        fields = TRAJECTORY_FIELDS
        if self.schedule == "cosine":
            fields += ("max_steps", "max_epochs")
        return [
            f"{name}={getattr(saved, name)!r} -> {getattr(self, name)!r}"
            for name in fields
            if getattr(saved, name) != getattr(self, name)
        ]

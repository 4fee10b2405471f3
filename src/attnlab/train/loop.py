"""The training loop: :class:`Trainer`, which knows no task.

What differs between tasks (batches, loss, metric columns, validation metrics) is the
:class:`~attnlab.train.objectives.Objective` it is handed (a task names its own); the loop
only sums losses and counts, steps the optimizer and the schedule, logs, evaluates, saves
checkpoints and stops.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence, Sized
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from .._checks import check_type
from .._io import write_json
from ..models.saved import PretrainedModel
from .best import BestModel
from .checkpoint import (
    CHECKPOINT_FORMAT,
    load_checkpoint,
    load_newest,
    prepare_run_directory,
    save_checkpoint,
    tokenizer_files,
    write_final_model,
)
from .config import TrainConfig
from .distributed import all_gather_objects, barrier, resolve_device, world
from .memory import keep_freed_memory
from .metrics import Reporter, call_hook, hook_metrics
from .objectives import Batcher, Objective
from .optim import build_optimizer, lr_lambda, planned_steps
from .position import Position
from .progress import format_duration, start_line
from .rng import capture_rng, seed_rngs
from .step import OptimizerStep
from .validation import validate

__all__ = ["SUMMARY_FILE", "EvaluateHook", "Trainer"]

SUMMARY_FILE = "summary.json"

EvaluateHook = Callable[[int, nn.Module], Mapping[str, float] | None]


class Trainer:
    """Trains an encoder-decoder :class:`~attnlab.models.transformer.Transformer` or a decoder-only
    :class:`~attnlab.models.transformer.TransformerLM` on framed examples, or a
    :class:`~attnlab.models.vision.VisionTransformer` on labelled images (or any model an
    objective trains: :mod:`attnlab.train.objectives`).

    Args:
        model: the model to train, built by the caller (its initial weights are the
            caller's); moved to the configured device. Trained in place.
        train_examples: :class:`attnlab.data.examples.Examples` (or a sequence of
            :class:`~attnlab.data.examples.Example`) from ``make_examples`` /
            ``make_lm_examples``. A Transformer needs non-empty sources; a TransformerLM
            ignores them and learns ``tgt``. For a VisionTransformer:
            :class:`attnlab.data.images.LabelledImages`, batched by ``config.batch_size``;
            its loss is per image, and each evaluation also reports ``val_accuracy``.
        valid_examples: the same for the validation loss, or None / empty for no validation.
        config: a :class:`TrainConfig`.
        objective: the :class:`~attnlab.train.objectives.Objective` class that trains
            ``model`` (a task names its own: ``Task.objective()``), e.g.
            :class:`~attnlab.train.objectives.TranslationObjective` for a Transformer;
            required.
        batcher: the batcher of ``train_examples`` when the caller has made one already (a
            task that planned epoch 0 to report its padding), built for this replica
            (``num_replicas``, ``rank``) with ``config.seed``; None: the objective's.
        tokenizers_dir: a directory holding ``tokenizer.json`` or ``src_tokenizer.json`` +
            ``tgt_tokenizer.json`` (``attnlab.data.save_tokenizers``), copied into
            ``out/model`` so that it is self-contained.
        on_evaluate: ``on_evaluate(step, model) -> {name: number}``, called on rank 0 after
            each validation loss with the bare model in eval mode; the values join the
            metrics row (e.g. BLEU). Its use of the global RNGs does not disturb training's.
        progress: show progress on stderr (rank 0): a bar that redraws in place on a
            terminal, else one plain line per metrics row (``log_every`` steps): the step of
            the total, loss, learning rate, speed, elapsed time and time left.
        log: receives those plain lines instead (e.g. ``print``) when no bar is shown. Either
            way rank 0 appends them to ``out/train.log``, with the start, each evaluation,
            each checkpoint and the stop.

    ``train()`` runs the loop and returns the summary written to ``out/summary.json``.
    """

    def __init__(
        self,
        model: nn.Module,
        train_examples: Any,
        valid_examples: Any,
        config: TrainConfig,
        *,
        objective: type[Objective],
        batcher: Batcher | None = None,
        tokenizers_dir: str | os.PathLike[str] | None = None,
        on_evaluate: EvaluateHook | None = None,
        progress: bool = True,
        log: Callable[[str], object] | None = None,
    ) -> None:
        if not isinstance(getattr(objective, "model_class", None), type):
            raise TypeError(
                "objective: expected an Objective class (attnlab.train.objectives, e.g. "
                f"TranslationObjective), got {objective!r}"
            )
        if not isinstance(model, objective.model_class):
            raise TypeError(
                f"model: {objective.__name__} trains an attnlab "
                f"{objective.model_class.__name__}, got {type(model).__name__}"
            )
        check_type(config, TrainConfig, "config", "a TrainConfig")
        config.validate()
        if on_evaluate is not None and not callable(on_evaluate):
            raise TypeError(f"on_evaluate: expected a callable, got {type(on_evaluate).__name__}")
        self.config = config
        self.out = Path(config.out)
        self.on_evaluate = on_evaluate
        self.progress = bool(progress)
        if log is not None and not callable(log):
            raise TypeError(f"log: expected a callable or None, got {type(log).__name__}")
        self.log = log
        self.rank, self.world_size = world()
        self.device = resolve_device(config.device, self.world_size)
        self.objective = objective(model, config, self.device)
        self.model: PretrainedModel = model.to(self.device)
        self.train_examples = self.objective.prepare(train_examples, "train_examples")
        if len(self.train_examples) == 0:
            raise ValueError("train_examples: empty; nothing to train on")
        self.valid_examples = None
        if valid_examples is not None and not (
            isinstance(valid_examples, Sized) and len(valid_examples) == 0
        ):
            self.valid_examples = self.objective.prepare(valid_examples, "valid_examples")
        if config.patience is not None and self.valid_examples is None:
            raise ValueError("patience: early stopping needs valid_examples, got none")
        self.tokenizer_files = tokenizer_files(tokenizers_dir)
        self.best = None
        if config.keep_best is not None and self.rank == 0:
            self.best = BestModel(self.out, config.keep_best, self.tokenizer_files)
        shards = {"num_replicas": self.world_size, "rank": self.rank}
        if batcher is None:
            batcher = self.objective.batcher(
                self.train_examples, "train_examples", seed=config.seed, **shards
            )
        else:
            wanted = (len(self.train_examples), self.world_size, self.rank, config.seed)
            found = (len(batcher), batcher.num_replicas, batcher.rank, batcher.seed)
            if found != wanted:
                raise ValueError(
                    f"batcher: expected one over the {wanted[0]:,} training examples for "
                    f"{wanted[1]} replica(s), rank {wanted[2]}, seed {wanted[3]}; got one over "
                    f"{found[0]:,} for {found[1]}, rank {found[2]}, seed {found[3]}"
                )
        self.batcher = batcher
        self.valid_batcher = None
        if self.valid_examples is not None:
            self.valid_batcher = self.objective.batcher(
                self.valid_examples, "valid_examples", shuffle=False, **shards
            )
        self.optimizer = build_optimizer(model, config)
        d_model = model.config.d_model  # type: ignore[union-attr]
        schedule = lr_lambda(config, d_model, self.batcher.num_batches(0))
        self.scheduler = LambdaLR(self.optimizer, schedule)
        self.position = Position()
        self._reporter: Reporter | None = None
        self._last_checkpoint_step: int | None = None
        self._out_of_time_voted = False
        self._started = time.monotonic()

    def _elapsed(self) -> float:
        """Training time in seconds, across resumes."""
        return self.position.elapsed_s + (time.monotonic() - self._started)

    def _out_of_time(self) -> bool:
        limit = self.config.max_minutes
        return limit is not None and self._elapsed() >= limit * 60

    # -- evaluation ------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> float:
        """The label-smoothed cross-entropy per target token (per image, for a classifier) on
        ``valid_examples`` (all replicas together; every replica must call it). Leaves the
        RNG states untouched."""
        return self._evaluate()["val_loss"]

    def _evaluate(self) -> dict[str, float]:
        """The validation loss per unit and the objective's other validation metrics."""
        if self.valid_batcher is None or self.valid_examples is None:
            raise ValueError("valid_examples: none were given; cannot evaluate")
        return validate(
            self.objective,
            self.model,
            self.valid_examples,
            self.valid_batcher,
            self.device,
            self.world_size,
        )

    def _evaluation_row(self) -> dict[str, object]:
        metrics = self._evaluate()
        self.position.record_validation(metrics["val_loss"])
        row: dict[str, object] = dict(metrics)
        if self.on_evaluate is not None and self.rank == 0:
            hooked = call_hook(self.on_evaluate, self.position.step, self.model, self.device)
            row.update(hook_metrics(hooked, self.objective.columns))
        saved = self.best.offer(row, self.position.step, self.model) if self.best else None
        if saved is not None and self._reporter is not None:
            self._reporter.event(saved)
        return row

    # -- checkpoints -----------------------------------------------------------------------

    @functools.cached_property
    def _data_fingerprint(self) -> str:
        """A hash of the training data (computed once: it is saved with every checkpoint)."""
        return self.objective.fingerprint(self.train_examples)

    @functools.cached_property
    def _data_description(self) -> dict[str, Any] | None:
        """What the training data is, when it says (``ShardExamples.describe``: corpora, keys,
        mixture), saved beside the fingerprint so that a resume on other data names the
        difference."""
        describe = getattr(self.train_examples, "describe", None)
        return describe() if callable(describe) else None

    def _save_checkpoint(self) -> None:
        """Write ``out/checkpoints/step-N`` (every replica must call it; rank 0 writes)."""
        rngs = all_gather_objects(capture_rng(self.device), self.world_size)
        self._last_checkpoint_step = self.position.step
        if self.rank != 0:
            return
        elapsed = self._elapsed()
        state = {
            "format": CHECKPOINT_FORMAT,
            **self.position.to_state(self.objective.unit, elapsed),
            "scheduler": self.scheduler.state_dict(),
            "rng": rngs,
            "world_size": self.world_size,
            "data": {
                "train_examples": len(self.train_examples),
                "fingerprint": self._data_fingerprint,
                **({"described": self._data_description} if self._data_description else {}),
            },
            "metrics_columns": self._reporter.columns if self._reporter is not None else [],
            "train_config": self.config.to_dict(),
        }
        save_checkpoint(
            self.out, self.model, self.optimizer, state, keep=self.config.keep_checkpoints
        )
        if self._reporter is not None:
            self._reporter.event(f"checkpoint saved at step {self.position.step}")

    def _load(self, path: Path) -> dict[str, Any]:
        """Restore checkpoint ``path``, checked whole first (the RNG states: at the first step)."""
        state = load_checkpoint(
            path,
            self.model,
            self.optimizer,
            self.config,
            examples=len(self.train_examples),
            fingerprint=self._data_fingerprint,
            described=self._data_description,
            scheduler=self.scheduler,
            unit=self.objective.unit,
            epoch_batches=self.batcher.num_batches,
        )  # weights, optimizer and schedule restored; the position cannot fail now
        self.position = Position.from_state(state, self.objective.unit)
        return state

    # -- the loop --------------------------------------------------------------------------

    def train(self, *, resume: bool = False) -> dict[str, Any]:
        """Train until ``max_steps`` / ``max_epochs`` / ``max_minutes`` or early stopping.

        Args:
            resume: continue from the newest complete checkpoint in ``out/checkpoints``
                (a fresh start when there is none). Without it, a run directory that already
                holds checkpoints is an error (FileExistsError).

        Returns:
            The summary (also written to ``out/summary.json``): ``steps``, ``epochs``
            (fractional), ``train_tokens`` (``train_images`` for a classifier: what the loss
            was summed over), ``stop_reason`` (``max_steps``, ``max_epochs``,
            ``max_minutes`` or ``early_stopping``), ``best_val_loss``, ``best_step``,
            ``last_val_loss``, ``elapsed_s``, ``averaged_checkpoints``, ``model_dir``,
            ``resumed_from_step`` (None for a fresh start) and ``world_size``.
        """
        config = self.config
        keep_freed_memory()  # a step's large tensors reuse the last step's pages (train/memory.py)
        checkpoints = prepare_run_directory(
            self.out, resume=resume, rank=self.rank, world_size=self.world_size
        )
        state = load_newest(checkpoints, self._load, set_aside=self.rank == 0) if resume else None
        resumed_from = state["step"] if state is not None else None
        self._last_checkpoint_step = resumed_from
        self._out_of_time_voted = False
        self._started = time.monotonic()
        total_steps = planned_steps(config, self.batcher.num_batches(0))
        reporter = self._reporter = _open_reporter(self, state, total_steps)
        if self.best is not None and resumed_from is not None:
            self.best.restore()
        update = OptimizerStep(
            self.objective,
            self.model,
            self.optimizer,
            self.scheduler,
            config,
            self.device,
            self.world_size,
        )
        seed_rngs(
            state, seed=config.seed, step=self.position.step, rank=self.rank, device=self.device
        )
        self.model.train()
        stop_reason: str | None = None
        position = self.position
        try:
            # A resumed run may have nothing left to do (it ended, or stopped early).
            stop_reason = self._stop_reason(evaluated=False) or self._stop_reason(evaluated=True)
            epoch_batches: tuple[int, Sequence[list[int]]] = (-1, [])
            compile_reported = not config.compile
            while stop_reason is None:
                step_start = time.monotonic()
                if epoch_batches[0] != position.epoch:  # this replica's shares, once an epoch
                    epoch_batches = (position.epoch, self.batcher.batches(position.epoch))
                batches = epoch_batches[1]
                micro = batches[
                    position.batch_in_epoch : position.batch_in_epoch + config.accumulate
                ]
                loss_sum, count, lr, self._out_of_time_voted = update(
                    self.train_examples,
                    micro,
                    number=position.step + 1,
                    out_of_time=self._out_of_time,
                )
                seconds = time.monotonic() - step_start
                if not compile_reported:
                    reporter.event(_compile_line(update), console=True)
                    compile_reported = True
                position.advance(len(micro), len(batches), loss_sum, count, seconds)
                reporter.stepped(position.step)
                stop_reason = self._stop_reason(evaluated=False)
                row: dict[str, object] = {}
                if self.valid_batcher is not None and (
                    position.step % config.eval_every == 0 or stop_reason is not None
                ):
                    row.update(self._evaluation_row())
                    stop_reason = stop_reason or self._stop_reason(evaluated=True)
                if row or position.step % config.log_every == 0 or stop_reason is not None:
                    row.update(_training_row(self, lr))
                    reporter.write(row, position.step)
                if position.step % config.checkpoint_every == 0 or stop_reason is not None:
                    self._save_checkpoint()
            if self._last_checkpoint_step != position.step:
                self._save_checkpoint()  # a resumed run that had nothing left to do
            reporter.event(
                f"stop at step {position.step}: {stop_reason}, training time "
                f"{format_duration(self._elapsed())}",
                console=True,
            )
            summary = self._finish(stop_reason, resumed_from)
        except BaseException as error:  # Ctrl-C, a full disk, a bug: the log says where
            with contextlib.suppress(OSError):  # the error to report is the first one
                reporter.event(f"stopped at step {position.step} by {type(error).__name__}")
            raise
        finally:
            reporter.close()
        return summary

    def _stop_reason(self, *, evaluated: bool) -> str | None:
        return self.position.stop_reason(
            self.config, evaluated=evaluated, out_of_time=self._out_of_time_voted
        )

    def _finish(self, stop_reason: str | None, resumed_from: int | None) -> dict[str, Any]:
        averaged: list[str] = []
        if self.rank == 0:
            averaged = write_final_model(self.out, self.config.average_last, self.tokenizer_files)
        summary = _summary(self, stop_reason, resumed_from, averaged)
        if self.rank == 0:
            write_json(self.out / SUMMARY_FILE, summary)
        barrier(self.world_size)  # out/model exists for every rank once train() returns
        return summary


def _open_reporter(trainer: Trainer, state: dict[str, Any] | None, total: int | None) -> Reporter:
    """The run's metrics log, progress and train.log, with its first line (where it starts)."""
    config, position = trainer.config, trainer.position
    resumed_from = state["step"] if state is not None else None
    reporter = Reporter(
        trainer.out,
        report=trainer.rank == 0,
        progress=trainer.progress,
        total_steps=total,
        step=position.step,
        resumed_from=resumed_from,
        columns=state.get("metrics_columns", ()) if state is not None else (),
        base=trainer.objective.columns,
        rate_unit=trainer.objective.rate_unit,
        budget_s=config.max_minutes * 60 if config.max_minutes is not None else None,
        clock=trainer._elapsed,
        log=trainer.log,
    )
    bounds = {name: getattr(config, name) for name in ("max_steps", "max_epochs", "max_minutes")}
    where = trainer.device.type
    if trainer.world_size > 1:
        where += f", {trainer.world_size} processes"
    start = start_line(position.step, bounds, total, where, resumed_from is not None)
    reporter.event(start, console=True)
    return reporter


def _compile_line(update: OptimizerStep) -> str:
    """What config.compile did, once, after the first step."""
    if update.why_eager:
        return f"compile: training eagerly; {update.why_eager}"
    return (
        f"compile: the training step is compiled (torch.compile, inductor); the first step "
        f"took {format_duration(update.first_compiled_s or 0.0)} with compiling"
    )


def _summary(
    trainer: Trainer, stop_reason: str | None, resumed_from: int | None, averaged: list[str]
) -> dict[str, Any]:
    """What :meth:`Trainer.train` returns and writes to ``out/summary.json``."""
    position = trainer.position
    return {
        "steps": position.step,
        "epochs": position.epochs(trainer.batcher.num_batches(position.epoch)),
        f"train_{trainer.objective.unit}": position.trained,
        "stop_reason": stop_reason,
        "best_val_loss": position.best_val_loss,
        "best_step": position.best_step,
        "last_val_loss": position.last_val_loss,
        "elapsed_s": round(trainer._elapsed(), 3),
        "averaged_checkpoints": averaged,
        "best": trainer.best.summary() if trainer.best is not None else None,
        "model_dir": str(trainer.out / "model"),
        "resumed_from_step": resumed_from,
        "world_size": trainer.world_size,
        "threads": torch.get_num_threads(),  # each process's CPU threads (core-hours = x time)
        "dropped_examples": getattr(trainer.train_examples, "dropped", 0),
    }


def _training_row(trainer: Trainer, lr: float) -> dict[str, object]:
    """The training columns of a metrics row (the means since the previous row)."""
    position = trainer.position
    means = position.take_window(trainer.objective.columns[4])
    return {
        "step": position.step,
        "epoch": position.epochs(trainer.batcher.num_batches(position.epoch)),
        "loss": means.pop("loss"),
        "lr": lr,
        **means,
    }

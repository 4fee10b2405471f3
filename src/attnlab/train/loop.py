"""Training: the paper's recipe (Vaswani et al. 2017, sec. 5), checkpoints, exact resume, DDP.

* Loss: cross-entropy with label smoothing ``eps_ls = 0.1`` (sec. 5.4) over the non-pad target
  tokens, summed and divided by the number of target tokens of the whole optimizer step (every
  accumulation micro-batch and every replica), so the gradient does not depend on how a step
  is split.
* Optimizer: Adam with ``beta1 = 0.9, beta2 = 0.98, eps = 1e-9`` and the learning rate of
  eq. 3 (:mod:`attnlab.schedule`) through ``LambdaLR`` (sec. 5.3); gradient-norm clipping.
* Batches: :class:`attnlab.data.batching.TokenBatcher`, about ``max_tokens`` source and target
  tokens each (sec. 5.1), ``accumulate`` of them per optimizer step.
* Checkpoints: ``out/checkpoints/step-NNNNNNNN/`` written atomically; the last
  ``keep_checkpoints`` are kept; at the end the last ``average_last`` are averaged into
  ``out/model`` (sec. 6.1: "averaging the last 5 checkpoints"), loadable with
  :func:`attnlab.model.load_pretrained`.
* Resume: ``Trainer.train(resume=True)`` continues from the newest checkpoint with the same
  losses, bit for bit on CPU, as a run never interrupted (weights, Adam moments, schedule,
  data position and RNG states are all restored).
* Distributed: under ``torchrun`` call :func:`init_distributed` first; the model is then
  wrapped in ``DistributedDataParallel``, each global batch is split among the ranks, and
  rank 0 alone writes files.

Example::

    examples = make_examples(pairs, max_len=model.config.max_len)
    config = TrainConfig(out="runs/numbers", max_tokens=2048, warmup=400, max_steps=2000)
    summary = Trainer(model, examples, valid_examples, config, progress=True).train()

Files of a run directory ``out``::

    metrics.csv            step, epoch, loss, lr, tokens_per_s, val_loss [, on_evaluate keys]
                           (a classifier: images_per_s, and val_accuracy after val_loss)
    checkpoints/step-N/    model.safetensors, config.json, optimizer.safetensors, state.json
    model/                 averaged weights (+ config.json, tokenizer files)
    summary.json           what train() returns
"""

from __future__ import annotations

import base64
import contextlib
import csv
import dataclasses
import functools
import hashlib
import inspect
import io
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from .._checks import dataclass_from
from .._io import atomic_write, current_umask, write_json
from ..data.batching import Example, Examples, TokenBatcher, collate
from ..data.images import ImageBatcher, LabelledImages, random_affine
from ..model import Transformer, TransformerLM, load_weights
from ..schedule import cosine_lambda, transformer_lambda
from ..vision import VisionTransformer

__all__ = [
    "CHECKPOINT_FORMAT",
    "IMAGE_METRICS_COLUMNS",
    "METRICS_COLUMNS",
    "TrainConfig",
    "Trainer",
    "destroy_distributed",
    "find_checkpoints",
    "init_distributed",
]

METRICS_COLUMNS = ("step", "epoch", "loss", "lr", "tokens_per_s", "val_loss")
# A classifier's metrics: its loss is per image and its speed in images per second.
IMAGE_METRICS_COLUMNS = (
    "step",
    "epoch",
    "loss",
    "lr",
    "images_per_s",
    "val_loss",
    "val_accuracy",
)
SCHEDULES = ("transformer", "cosine")
CHECKPOINT_FORMAT = "attnlab-checkpoint-1"
TOKENIZER_FILES = ("tokenizer.json", "src_tokenizer.json", "tgt_tokenizer.json")
STATE_FILE = "state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
CHECKPOINT_FILES = ("model.safetensors", "config.json", OPTIMIZER_FILE, STATE_FILE)
# TrainConfig fields that shape the trajectory: a resumed run must keep them.
_TRAJECTORY_FIELDS = (
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


# -- configuration ---------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """How to train; every field is checked on construction (errors name the field).

    Attributes:
        out: the run directory (created if needed).
        max_tokens: tokens per side per batch, padding included (sec. 5.1: ~25000), before
            accumulation and for all replicas together (sequence models).
        batch_size: images per batch, before accumulation and for all replicas together
            (required for a :class:`~attnlab.vision.VisionTransformer`; unused otherwise).
        accumulate: batches per optimizer step (gradient accumulation).
        schedule: ``"transformer"``, the paper's eq. 3 (:func:`attnlab.schedule.transformer_lr`,
            scaled by ``lr_factor``), or ``"cosine"``, linear warm-up to ``lr`` then cosine
            decay to 0 at the last step (:func:`attnlab.schedule.cosine_lr`; ViT's; needs
            ``max_steps`` or ``max_epochs`` to know where the last step is).
        lr_factor, warmup: eq. 3's scale, and the warm-up steps of either schedule.
        lr: the cosine schedule's peak rate.
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
        bf16: run the forward pass under bfloat16 autocast (CPU or CUDA); the loss stays float32.
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
    bf16: bool = False
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
            _require_int(self, name, minimum=1)
        for name in ("max_steps", "max_epochs", "patience", "batch_size"):
            if getattr(self, name) is not None:
                _require_int(self, name, minimum=1)
        _require_int(self, "seed", minimum=0)
        for name in ("lr_factor", "eps"):
            _require_positive(self, name)
        for name in ("clip_norm", "max_minutes", "lr"):
            if getattr(self, name) is not None:
                _require_positive(self, name)
        if not (
            isinstance(self.betas, tuple)
            and len(self.betas) == 2
            and all(_is_number(b) and 0 <= b < 1 for b in self.betas)
        ):
            raise ValueError(f"betas: expected two numbers in [0, 1), got {self.betas!r}")
        if not (_is_number(self.label_smoothing) and 0 <= self.label_smoothing < 1):
            raise ValueError(
                f"label_smoothing: expected a number in [0, 1), got {self.label_smoothing!r}"
            )
        if not (_is_number(self.weight_decay) and 0 <= self.weight_decay < float("inf")):
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
        for name in ("bf16", "augment"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected a bool, got {getattr(self, name)!r}")
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


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require_int(config: TrainConfig, name: str, *, minimum: int) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name}: expected a {kind} int, got {value!r}")


def _require_positive(config: TrainConfig, name: str) -> None:
    value = getattr(config, name)
    if not (_is_number(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a positive number, got {value!r}")


# -- distributed -----------------------------------------------------------------------------


def init_distributed(backend: str | None = None) -> tuple[int, int]:
    """Join the process group described by ``torchrun``'s environment; return
    ``(rank, world_size)``.

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. The
    backend defaults to NCCL when CUDA is available (each process then uses GPU
    ``LOCAL_RANK``) and gloo otherwise. Without ``RANK`` / ``WORLD_SIZE`` in the environment
    (a plain ``python`` run) nothing is initialised and ``(0, 1)`` is returned; if the group
    is already initialised, its rank and size are returned.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1
    if not dist.is_available():
        raise RuntimeError("init_distributed: this torch build has no torch.distributed")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return rank, world_size


def destroy_distributed() -> None:
    """Leave the process group, if one was initialised (call at the end of a torchrun script)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# -- RNG states (JSON-safe, no pickle) -------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _capture_rng(device: torch.device) -> dict[str, Any]:
    """The torch (CPU, and CUDA when training there), Python and NumPy global RNG states."""
    version, words, gauss_next = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": _b64(torch.get_rng_state().numpy().tobytes()),
        "python": {
            "version": version,
            "state": _b64(np.asarray(words, dtype=np.uint32).tobytes()),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "kind": np_kind,
            "keys": _b64(np.asarray(np_keys, dtype=np.uint32).tobytes()),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
    }
    if device.type == "cuda":
        state["cuda"] = _b64(torch.cuda.get_rng_state(device).numpy().tobytes())
    return state


def _restore_rng(state: Mapping[str, Any], device: torch.device) -> None:
    torch.set_rng_state(torch.frombuffer(bytearray(_unb64(state["torch"])), dtype=torch.uint8))
    py = state["python"]
    words = tuple(np.frombuffer(_unb64(py["state"]), dtype=np.uint32).tolist())
    random.setstate((py["version"], words, py["gauss_next"]))
    npy = state["numpy"]
    keys = np.frombuffer(_unb64(npy["keys"]), dtype=np.uint32).copy()
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    if device.type == "cuda" and "cuda" in state:
        cuda = torch.frombuffer(bytearray(_unb64(state["cuda"])), dtype=torch.uint8)
        torch.cuda.set_rng_state(cuda, device)


def _rank_seed(seed: int, rank: int) -> int:
    """A well-mixed 63-bit seed for ``rank`` of a run seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0] >> 1)


# -- checkpoints on disk ---------------------------------------------------------------------


def find_checkpoints(out: str | os.PathLike) -> list[Path]:
    """The complete checkpoint directories of run ``out``, oldest first (by step).

    Complete: named ``step-NNNNNNNN`` with every file a checkpoint holds (the directory is
    renamed into place only once written, so an interrupted write leaves a ``.tmp-*``
    directory instead, which is ignored).
    """
    root = Path(out) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        name = path.name
        if not (name.startswith("step-") and name[5:].isdigit() and path.is_dir()):
            continue
        if all((path / f).is_file() for f in CHECKPOINT_FILES):
            found.append((int(name[5:]), path))
    return [path for _, path in sorted(found)]


def _fsync_tree(directory: Path) -> None:
    """Flush the files of ``directory`` and the directory itself to disk (crash safety beyond
    a killed process: a power loss)."""
    for path in directory.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on directories
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _replace_dir(temp: Path, final: Path) -> None:
    """Move the finished directory ``temp`` to ``final``, replacing an old one."""
    os.chmod(temp, 0o777 & ~current_umask())  # mkdtemp makes 0700 directories
    if final.exists():
        trash = Path(tempfile.mkdtemp(prefix=".old-", dir=final.parent))
        os.replace(final, trash / final.name)
        os.replace(temp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(temp, final)
    _fsync_dir(final.parent)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _average_checkpoints(checkpoints: Sequence[Path]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The element-wise mean (in float64, stored back in each tensor's dtype) of the weights of
    ``checkpoints``, and the newest one's safetensors metadata."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    total: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in checkpoints:
        weights = load_file(path / "model.safetensors")
        if total and set(weights) != set(total):
            raise ValueError(f"{path}: holds other weights than {checkpoints[0]}; cannot average")
        for name, tensor in weights.items():
            dtypes[name] = tensor.dtype
            if not tensor.dtype.is_floating_point:
                total[name] = tensor  # integer tensors: the newest value
            elif name in total:
                total[name] += tensor.double()
            else:
                total[name] = tensor.double()
    averaged = {
        name: (t / len(checkpoints)).to(dtypes[name]) if dtypes[name].is_floating_point else t
        for name, t in total.items()
    }
    with safe_open(checkpoints[-1] / "model.safetensors", framework="pt") as handle:
        metadata = handle.metadata() or {}
    return averaged, metadata


# -- metrics ---------------------------------------------------------------------------------


class _MetricsLog:
    """``metrics.csv``: a header, then rows appended and flushed one by one (what a crash
    leaves is every row written before it). New ``on_evaluate`` keys widen the header: the
    file is rewritten once, atomically, with empty cells in the older rows."""

    def __init__(
        self,
        path: Path,
        *,
        keep_until: int | None,
        columns: Sequence[str] = (),
        base: Sequence[str] = METRICS_COLUMNS,
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
        self._writer.writerow([_cell(row.get(c)) for c in self.columns])
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _tensorboard(out: Path) -> Any:
    """A ``SummaryWriter`` under ``out/tensorboard``, or None when TensorBoard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(out / "tensorboard"))


# -- the trainer -----------------------------------------------------------------------------


@dataclass
class _Position:
    """Where training stands; saved in ``state.json`` and restored on resume."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # global batches of ``epoch`` already trained on
    best_val_loss: float | None = None
    best_step: int | None = None
    bad_evals: int = 0  # evaluations since the best (early stopping)
    last_val_loss: float | None = None
    train_tokens: int = 0  # target tokens trained on, all replicas
    elapsed_s: float = 0.0  # training time, across resumes
    # The rows' running sums since the last metrics row.
    window_loss: float = 0.0
    window_tokens: int = 0
    window_seconds: float = 0.0  # time in training steps (evaluations and saving excluded)


EvaluateHook = Callable[[int, nn.Module], Mapping[str, float] | None]


class Trainer:
    """Trains an encoder-decoder :class:`~attnlab.model.Transformer` or a decoder-only
    :class:`~attnlab.model.TransformerLM` on framed examples, or a
    :class:`~attnlab.vision.VisionTransformer` on labelled images.

    Args:
        model: the model to train, built by the caller (its initial weights are the
            caller's); moved to the configured device. Trained in place.
        train_examples: :class:`attnlab.data.batching.Examples` (or a sequence of
            :class:`~attnlab.data.batching.Example`) from ``make_examples`` /
            ``make_lm_examples``. A Transformer needs non-empty sources; a TransformerLM
            ignores them and learns ``tgt``. For a VisionTransformer:
            :class:`attnlab.data.images.LabelledImages`, batched by ``config.batch_size``;
            its loss is per image, and each evaluation also reports ``val_accuracy``.
        valid_examples: the same for the validation loss, or None / empty for no validation.
        config: a :class:`TrainConfig`.
        tokenizers_dir: a directory holding ``tokenizer.json`` or ``src_tokenizer.json`` +
            ``tgt_tokenizer.json`` (``attnlab.data.save_tokenizers``), copied into
            ``out/model`` so that it is self-contained.
        on_evaluate: ``on_evaluate(step, model) -> {name: number}``, called on rank 0 after
            each validation loss with the bare model in eval mode; the values join the
            metrics row (e.g. BLEU). Its use of the global RNGs does not disturb training's.
        progress: show a tqdm progress bar on stderr (rank 0).

    ``train()`` runs the loop and returns the summary written to ``out/summary.json``.
    """

    def __init__(
        self,
        model: Transformer | TransformerLM | VisionTransformer,
        train_examples: Examples | Sequence[Example] | LabelledImages,
        valid_examples: Examples | Sequence[Example] | LabelledImages | None,
        config: TrainConfig,
        *,
        tokenizers_dir: str | os.PathLike | None = None,
        on_evaluate: EvaluateHook | None = None,
        progress: bool = True,
    ) -> None:
        if not isinstance(model, (Transformer, TransformerLM, VisionTransformer)):
            raise TypeError(
                f"model: expected an attnlab Transformer, TransformerLM or VisionTransformer, "
                f"got {type(model).__name__}"
            )
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config: expected a TrainConfig, got {type(config).__name__}")
        config.validate()
        if on_evaluate is not None and not callable(on_evaluate):
            raise TypeError(f"on_evaluate: expected a callable, got {type(on_evaluate).__name__}")
        self.config = config
        self.out = Path(config.out)
        self.on_evaluate = on_evaluate
        self.progress = bool(progress)
        self.is_lm = isinstance(model, TransformerLM)
        self.is_classifier = isinstance(model, VisionTransformer)
        if self.is_classifier and config.batch_size is None:
            raise ValueError(
                "batch_size: training a VisionTransformer needs the images per batch, got None"
            )
        self.columns = IMAGE_METRICS_COLUMNS if self.is_classifier else METRICS_COLUMNS
        self.rate_column = self.columns[4]
        self.rank, self.world_size = _world()
        self.device = _resolve_device(config.device)
        if self.world_size > 1 and dist.get_backend() == "nccl" and self.device.type != "cuda":
            raise ValueError("device: the NCCL process group needs device 'cuda' (or 'auto')")
        self.model = model.to(self.device)
        self.pad_id = getattr(model.config, "pad_id", None)
        convert = _as_images if self.is_classifier else _as_examples
        self.train_examples = convert(train_examples, "train_examples")
        if len(self.train_examples) == 0:
            raise ValueError("train_examples: empty; nothing to train on")
        self.valid_examples = (
            convert(valid_examples, "valid_examples") if valid_examples is not None else None
        )
        if self.valid_examples is not None and len(self.valid_examples) == 0:
            self.valid_examples = None
        if config.patience is not None and self.valid_examples is None:
            raise ValueError("patience: early stopping needs valid_examples, got none")
        for name, examples in (("train_examples", self.train_examples),) + (
            (("valid_examples", self.valid_examples),) if self.valid_examples is not None else ()
        ):
            self._check_examples(examples, name)
        self.tokenizer_files = _tokenizer_files(tokenizers_dir)
        shards = {"num_replicas": self.world_size, "rank": self.rank}
        self.batcher = self._batcher(
            "train_examples", self.train_examples, seed=config.seed, **shards
        )
        self.valid_batcher = (
            self._batcher("valid_examples", self.valid_examples, shuffle=False, **shards)
            if self.valid_examples is not None
            else None
        )
        self.optimizer = _optimizer(model, config)
        self.scheduler = LambdaLR(self.optimizer, self._lr_lambda())
        self.position = _Position()
        self._ddp: nn.Module | None = None
        self._metrics: _MetricsLog | None = None
        self._last_checkpoint_step: int | None = None
        self._out_of_time_voted = False
        self._started = time.monotonic()

    # -- checks ----------------------------------------------------------------------------

    def _batcher(
        self, name: str, examples: Examples | LabelledImages, **options: Any
    ) -> TokenBatcher | ImageBatcher:
        if isinstance(examples, LabelledImages):
            return ImageBatcher(len(examples), self.config.batch_size, **options)  # type: ignore[arg-type]
        return _batcher(name, examples, self.config.max_tokens, **options)

    def _lr_lambda(self) -> Callable[[int], float]:
        config = self.config
        if config.schedule == "transformer":
            return transformer_lambda(self.model.config.d_model, config.warmup, config.lr_factor)
        per_epoch = math.ceil(self.batcher.num_batches(0) / config.accumulate)
        total = min(
            n
            for n in (
                config.max_steps,
                config.max_epochs * per_epoch if config.max_epochs is not None else None,
            )
            if n is not None
        )
        if config.warmup >= total:
            raise ValueError(
                f"warmup: {config.warmup} warm-up steps, but training lasts {total} steps; the "
                f"cosine schedule needs warmup < its last step"
            )
        return cosine_lambda(config.lr, config.warmup, total)  # type: ignore[arg-type]

    def _collate(self, examples: Examples | LabelledImages, indices: Sequence[int]) -> tuple:
        if isinstance(examples, LabelledImages):
            return examples.batch(indices)
        return collate(examples, indices, self.pad_id)  # type: ignore[arg-type]

    def _count(self, batch: tuple) -> int:
        """What a batch's loss is summed over: images, or non-pad target tokens."""
        if self.is_classifier:
            return len(batch[1])
        return int((batch[2] != self.pad_id).sum())

    def _check_examples(self, examples: Examples | LabelledImages, name: str) -> None:
        if isinstance(examples, LabelledImages):
            _check_images(examples, self.model.config, name)
            return
        config = self.model.config
        if not self.is_lm and (examples.src_lengths == 0).any():
            i = int(np.flatnonzero(examples.src_lengths == 0)[0])
            raise ValueError(f"{name}[{i}]: empty source; a Transformer needs a source sentence")
        src_vocab, tgt_vocab = config.vocab_size, config.target_vocab_size
        for i, example in enumerate(examples):
            if example.src and not self.is_lm and max(example.src) >= src_vocab:
                raise ValueError(
                    f"{name}[{i}]: source id {max(example.src)} is outside the model's "
                    f"vocabulary [0, {src_vocab})"
                )
            if max(example.tgt) >= tgt_vocab:
                raise ValueError(
                    f"{name}[{i}]: target id {max(example.tgt)} is outside the model's "
                    f"vocabulary [0, {tgt_vocab})"
                )

    # -- one batch -------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.config.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def _loss_sum(self, module: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        """Summed label-smoothed cross-entropy of a collated batch over its non-pad targets
        (or over its images, for a classifier)."""
        if self.is_classifier:
            return self._image_loss(module, batch)[0]
        src, tgt_in, tgt_out = (t.to(self.device, non_blocking=True) for t in batch)
        with self._autocast():
            logits = module(tgt_in) if self.is_lm else module(src, tgt_in)  # (B, T, V)
        return F.cross_entropy(
            logits.float().flatten(0, 1),  # (B * T, V)
            tgt_out.flatten(),  # (B * T,)
            ignore_index=self.pad_id,
            label_smoothing=self.config.label_smoothing,
            reduction="sum",
        )

    def _image_loss(self, module: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """A classifier's summed label-smoothed cross-entropy over the images of ``batch``
        (jittered when ``augment`` and training), and which images the model classed right:
        ``(loss (), correct (B,) bool)``."""
        images, labels = (t.to(self.device, non_blocking=True) for t in batch)
        if self.config.augment and module.training:
            images = random_affine(images)
        with self._autocast():
            logits = module(images).float()  # (B, classes)
        loss = F.cross_entropy(
            logits, labels, label_smoothing=self.config.label_smoothing, reduction="sum"
        )
        return loss, logits.argmax(dim=-1) == labels

    def _dummy_loss(self, module: nn.Module) -> Tensor:
        """A zero loss that touches every parameter: a replica whose share of a global batch
        is empty still takes part in DistributedDataParallel's gradient exchange."""
        if self.is_classifier:
            c = self.model.config
            blank = torch.zeros(1, c.in_channels, c.image_size, c.image_size, device=self.device)
            with self._autocast():
                return module(blank).float().sum() * 0.0
        bos = torch.full((1, 1), self.model.config.bos_id, device=self.device)
        with self._autocast():
            logits = module(bos) if self.is_lm else module(bos, bos)
        return logits.float().sum() * 0.0

    def _all_reduce(self, values: Sequence[float]) -> list[float]:
        """Sum ``values`` over the replicas (float64; exact for token counts < 2^53)."""
        if self.world_size == 1:
            return [float(v) for v in values]
        device = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def _train_step(self, micro_batches: Sequence[list[int]]) -> tuple[float, int, float]:
        """One optimizer update on this replica's shares of ``micro_batches``; returns the
        step's summed loss and target-token count over all replicas, and the learning rate
        the update used."""
        module = self._ddp if self._ddp is not None else self.model
        batches = [
            self._collate(self.train_examples, indices) if indices else None
            for indices in micro_batches
        ]
        local_tokens = sum(self._count(b) for b in batches if b is not None)
        (global_tokens,) = self._all_reduce([local_tokens])
        if global_tokens == 0:
            raise ValueError("train_examples: a batch has no target token that is not pad_id")
        # Sum of losses / tokens of the whole step. DDP averages gradients over replicas, so
        # each replica's share is scaled by world_size to undo that division.
        scale = self.world_size / global_tokens
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            if batch is None and not (last and self._ddp is not None):
                continue  # nothing to add to this replica's gradient, and no exchange to join
            sync = self._ddp is None or last
            no_sync = contextlib.nullcontext() if sync else self._ddp.no_sync()  # type: ignore[union-attr]
            with no_sync:
                if batch is None:
                    self._dummy_loss(module).backward()
                    continue
                loss = self._loss_sum(module, batch)
                (loss * scale).backward()
                loss_sum += loss.detach().double()
        out_of_time = self._out_of_time()
        total_loss, out_of_time_votes = self._all_reduce([loss_sum.item(), float(out_of_time)])
        if not math.isfinite(total_loss):
            raise FloatingPointError(
                f"step {self.position.step + 1}: the training loss is {total_loss}; lower "
                f"lr_factor or clip_norm, or check the data"
            )
        if self.config.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._out_of_time_voted = out_of_time_votes > 0
        return total_loss, int(global_tokens), lr

    def _out_of_time(self) -> bool:
        limit = self.config.max_minutes
        elapsed = self.position.elapsed_s + (time.monotonic() - self._started)
        return limit is not None and elapsed >= limit * 60

    # -- evaluation ------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> float:
        """The label-smoothed cross-entropy per target token (per image, for a classifier) on
        ``valid_examples`` (all replicas together; every replica must call it). Leaves the
        RNG states untouched."""
        return self._evaluate()[0]

    @torch.no_grad()
    def _evaluate(self) -> tuple[float, float | None]:
        """The validation loss, and for a classifier the accuracy (else None)."""
        if self.valid_batcher is None or self.valid_examples is None:
            raise ValueError("valid_examples: none were given; cannot evaluate")
        was_training = self.model.training
        self.model.eval()
        loss = torch.zeros((), dtype=torch.float64, device=self.device)
        count = correct = 0
        try:
            for indices in self.valid_batcher.batches(0):
                if not indices:
                    continue
                batch = self._collate(self.valid_examples, indices)
                if self.is_classifier:
                    batch_loss, hits = self._image_loss(self.model, batch)
                    loss += batch_loss.double()
                    correct += int(hits.sum())
                else:
                    loss += self._loss_sum(self.model, batch).double()
                count += self._count(batch)
        finally:
            self.model.train(was_training)
        total, count, correct = self._all_reduce([loss.item(), count, correct])
        return total / count, (correct / count if self.is_classifier else None)

    def _run_hook(self, step: int) -> dict[str, float]:
        if self.on_evaluate is None or self.rank != 0:
            return {}
        was_training = self.model.training
        self.model.eval()
        try:
            with _global_rng_untouched(self.device):
                result = self.on_evaluate(step, self.model)
        finally:
            self.model.train(was_training)
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise TypeError(
                f"on_evaluate: expected a dict of metric name -> number, got "
                f"{type(result).__name__}"
            )
        metrics: dict[str, float] = {}
        for key, value in result.items():
            if not isinstance(key, str) or key in self.columns or not key:
                raise ValueError(
                    f"on_evaluate: metric name {key!r} is not a new column name "
                    f"(reserved: {list(self.columns)})"
                )
            if not (_is_number(value) or isinstance(value, (np.number, Tensor))):
                raise TypeError(f"on_evaluate: metric {key!r} is not a number: {value!r}")
            metrics[key] = float(value)
        return metrics

    # -- checkpoints -----------------------------------------------------------------------

    @functools.cached_property
    def _data_fingerprint(self) -> str:
        """A hash of the training data (computed once: it is saved with every checkpoint)."""
        if isinstance(self.train_examples, LabelledImages):
            return self.train_examples.fingerprint()
        digest = hashlib.sha256()
        digest.update(self.train_examples.src_lengths.tobytes())
        digest.update(self.train_examples.tgt_lengths.tobytes())
        return digest.hexdigest()[:16]

    def _save_checkpoint(self) -> None:
        """Write ``out/checkpoints/step-N`` (every replica must call it; rank 0 writes)."""
        from safetensors.torch import save_file

        rng = _capture_rng(self.device)
        if self.world_size > 1:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, rng)
            rngs = gathered
        else:
            rngs = [rng]
        self._last_checkpoint_step = self.position.step
        if self.rank != 0:
            return
        position = self.position
        optimizer_state = self.optimizer.state_dict()
        tensors: dict[str, Tensor] = {}
        scalars: dict[str, dict[str, Any]] = {}
        for index, values in optimizer_state["state"].items():
            for key, value in values.items():
                if isinstance(value, Tensor):
                    tensors[f"{index}.{key}"] = value.detach().cpu().contiguous()
                else:
                    scalars.setdefault(str(index), {})[key] = value
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": position.step,
            "epoch": position.epoch,
            "batch_in_epoch": position.batch_in_epoch,
            "best_val_loss": position.best_val_loss,
            "best_step": position.best_step,
            "bad_evals": position.bad_evals,
            "last_val_loss": position.last_val_loss,
            "train_tokens": position.train_tokens,
            "elapsed_s": position.elapsed_s + (time.monotonic() - self._started),
            "window": {
                "loss": position.window_loss,
                "tokens": position.window_tokens,
                "seconds": position.window_seconds,
            },
            "scheduler": self.scheduler.state_dict(),
            "optimizer": {
                "param_groups": optimizer_state["param_groups"],
                "scalars": scalars,
            },
            "rng": rngs,
            "world_size": self.world_size,
            "data": {
                "train_examples": len(self.train_examples),
                "fingerprint": self._data_fingerprint,
            },
            "metrics_columns": self._metrics.columns if self._metrics is not None else [],
            "train_config": self.config.to_dict(),
        }
        root = self.out / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        try:
            self.model.save_pretrained(temp)
            atomic_write(
                temp / OPTIMIZER_FILE,
                lambda p: save_file(tensors, p, metadata={"format": "pt"}),
            )
            write_json(temp / STATE_FILE, state)
            _fsync_tree(temp)
            _replace_dir(temp, root / f"step-{position.step:08d}")
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        for old in find_checkpoints(self.out)[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    def _load_checkpoint(self, path: Path) -> dict[str, Any]:
        """Restore weights, optimizer, schedule and position from ``path``; return its state
        (the RNG states are restored later, just before the first step)."""
        from safetensors.torch import load_file

        state = _read_json(path / STATE_FILE)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{path / STATE_FILE}: format {state.get('format')!r}, expected "
                f"{CHECKPOINT_FORMAT!r}"
            )
        saved = TrainConfig.from_dict(state["train_config"])
        fields = _TRAJECTORY_FIELDS
        if self.config.schedule == "cosine":  # where training ends shapes the whole curve
            fields += ("max_steps", "max_epochs")
        changed = [
            f"{name}={getattr(saved, name)!r} -> {getattr(self.config, name)!r}"
            for name in fields
            if getattr(saved, name) != getattr(self.config, name)
        ]
        if changed:
            raise ValueError(
                f"resume: {path} was trained with other settings ({', '.join(changed)}); "
                f"resume with the same ones, or start a new run directory"
            )
        data = state["data"]
        if (
            data["train_examples"] != len(self.train_examples)
            or data["fingerprint"] != self._data_fingerprint
        ):
            raise ValueError(
                f"resume: {path} was trained on other data ({data['train_examples']} examples, "
                f"now {len(self.train_examples)}, or other lengths); pass the same train_examples"
            )
        load_weights(self.model, path / "model.safetensors")
        stored = load_file(path / OPTIMIZER_FILE)
        per_param: dict[int, dict[str, Any]] = {}
        for key, tensor in stored.items():
            index, name = key.split(".", 1)
            per_param.setdefault(int(index), {})[name] = tensor
        for index, values in state["optimizer"]["scalars"].items():
            per_param.setdefault(int(index), {}).update(values)
        self.optimizer.load_state_dict(
            {"state": per_param, "param_groups": state["optimizer"]["param_groups"]}
        )
        self.scheduler.load_state_dict(state["scheduler"])
        window = state["window"]
        self.position = _Position(
            step=state["step"],
            epoch=state["epoch"],
            batch_in_epoch=state["batch_in_epoch"],
            best_val_loss=state["best_val_loss"],
            best_step=state["best_step"],
            bad_evals=state["bad_evals"],
            last_val_loss=state["last_val_loss"],
            train_tokens=state["train_tokens"],
            elapsed_s=state["elapsed_s"],
            window_loss=window["loss"],
            window_tokens=window["tokens"],
            window_seconds=window["seconds"],
        )
        return state

    def _restore_rng(self, state: Mapping[str, Any]) -> None:
        rngs = state["rng"]
        if state["world_size"] == self.world_size and len(rngs) == self.world_size:
            _restore_rng(rngs[self.rank], self.device)
        else:
            # Another number of replicas: the data order is unchanged (global batches do not
            # depend on it), but dropout draws differ from the interrupted run's.
            torch.manual_seed(_rank_seed(self.config.seed, self.position.step * 65536 + self.rank))

    def _write_final_model(self) -> list[str]:
        """Average the last ``average_last`` checkpoints into ``out/model`` (rank 0)."""
        from safetensors.torch import save_file

        chosen = find_checkpoints(self.out)[-self.config.average_last :]
        weights, metadata = _average_checkpoints(chosen)
        temp = Path(tempfile.mkdtemp(prefix=".tmp-model-", dir=self.out))
        try:
            atomic_write(
                temp / "model.safetensors", lambda p: save_file(weights, p, metadata=metadata)
            )
            shutil.copyfile(chosen[-1] / "config.json", temp / "config.json")
            for source in self.tokenizer_files:
                shutil.copyfile(source, temp / source.name)
            _fsync_tree(temp)
            _replace_dir(temp, self.out / "model")
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return [path.name for path in chosen]

    # -- the loop --------------------------------------------------------------------------

    def _prepare_run_directory(self, resume: bool) -> dict[str, Any] | None:
        """Create ``out``, clear interrupted writes, and load the newest checkpoint when
        resuming (returns its state, or None for a fresh start)."""
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            root = self.out / "checkpoints"
            if root.is_dir():
                for stale in root.glob(".tmp-*"):
                    shutil.rmtree(stale, ignore_errors=True)
                for stale in root.glob(".old-*"):
                    shutil.rmtree(stale, ignore_errors=True)
        if self.world_size > 1:
            dist.barrier()
        checkpoints = find_checkpoints(self.out)
        if not resume:
            if checkpoints:
                raise FileExistsError(
                    f"out: {self.out} already holds checkpoints ({checkpoints[-1].name}); pass "
                    f"resume=True to continue that run, or choose another directory"
                )
            return None
        for path in reversed(checkpoints):
            try:
                return self._load_checkpoint(path)
            except (ValueError, KeyError, OSError) as e:
                if isinstance(e, ValueError) and str(e).startswith("resume:"):
                    raise
                warnings.warn(f"{path}: unreadable checkpoint skipped ({e})", stacklevel=3)
        return None

    def train(self, *, resume: bool = False) -> dict[str, Any]:
        """Train until ``max_steps`` / ``max_epochs`` / ``max_minutes`` or early stopping.

        Args:
            resume: continue from the newest complete checkpoint in ``out/checkpoints``
                (a fresh start when there is none). Without it, a run directory that already
                holds checkpoints is an error (FileExistsError).

        Returns:
            The summary (also written to ``out/summary.json``): ``steps``, ``epochs``
            (fractional), ``train_tokens``, ``stop_reason`` (``max_steps``, ``max_epochs``,
            ``max_minutes`` or ``early_stopping``), ``best_val_loss``, ``best_step``,
            ``last_val_loss``, ``elapsed_s``, ``averaged_checkpoints``, ``model_dir``,
            ``resumed_from_step`` (None for a fresh start) and ``world_size``.
        """
        config = self.config
        state = self._prepare_run_directory(resume)
        resumed_from = state["step"] if state is not None else None
        self._last_checkpoint_step = resumed_from
        self._out_of_time_voted = False
        if self.rank == 0:
            self._metrics = _MetricsLog(
                self.out / "metrics.csv",
                keep_until=resumed_from,
                columns=state.get("metrics_columns", ()) if state is not None else (),
                base=self.columns,
            )
        writer = _tensorboard(self.out) if self.rank == 0 else None
        if self.world_size > 1:
            self._ddp = nn.parallel.DistributedDataParallel(
                self.model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                **_NO_BUFFER_SYNC,
            )
        if state is not None:
            self._restore_rng(state)
        else:
            torch.manual_seed(_rank_seed(config.seed, self.rank))
        bar = _progress_bar(self, enabled=self.progress and self.rank == 0)
        self._started = time.monotonic()
        self.model.train()
        stop_reason: str | None = None
        position = self.position
        try:
            # A resumed run may have nothing left to do (it ended, or stopped early).
            stop_reason = self._stop_reason(evaluated=False) or self._stop_reason(evaluated=True)
            epoch_batches: tuple[int, list[list[int]]] = (-1, [])
            while stop_reason is None:
                step_start = time.monotonic()
                if epoch_batches[0] != position.epoch:  # this replica's shares, once an epoch
                    epoch_batches = (position.epoch, self.batcher.batches(position.epoch))
                batches = epoch_batches[1]
                micro = batches[
                    position.batch_in_epoch : position.batch_in_epoch + config.accumulate
                ]
                loss_sum, tokens, lr = self._train_step(micro)
                position.window_seconds += time.monotonic() - step_start
                position.step += 1
                position.batch_in_epoch += len(micro)
                if position.batch_in_epoch >= len(batches):
                    position.epoch += 1
                    position.batch_in_epoch = 0
                position.train_tokens += tokens
                position.window_loss += loss_sum
                position.window_tokens += tokens
                if bar is not None:
                    bar.update(1)
                stop_reason = self._stop_reason(evaluated=False)
                row: dict[str, object] = {}
                if self.valid_batcher is not None and (
                    position.step % config.eval_every == 0 or stop_reason is not None
                ):
                    row.update(self._evaluation_row())
                    stop_reason = stop_reason or self._stop_reason(evaluated=True)
                if row or position.step % config.log_every == 0 or stop_reason is not None:
                    row.update(self._training_row(lr))
                    self._write_row(row, writer, bar)
                if position.step % config.checkpoint_every == 0 or stop_reason is not None:
                    self._save_checkpoint()
            if self._last_checkpoint_step != position.step:
                self._save_checkpoint()  # a resumed run that had nothing left to do
            summary = self._finish(stop_reason, resumed_from)
        finally:
            if bar is not None:
                bar.close()
            if self._metrics is not None:
                self._metrics.close()
            if writer is not None:
                writer.close()
            self._ddp = None
        return summary

    def _stop_reason(self, *, evaluated: bool) -> str | None:
        config, position = self.config, self.position
        if evaluated:
            if config.patience is not None and position.bad_evals >= config.patience:
                return "early_stopping"
            return None
        if config.max_steps is not None and position.step >= config.max_steps:
            return "max_steps"
        if config.max_epochs is not None and position.epoch >= config.max_epochs:
            return "max_epochs"
        if self._out_of_time_voted:
            return "max_minutes"
        return None

    def _evaluation_row(self) -> dict[str, object]:
        position = self.position
        val_loss, accuracy = self._evaluate()
        position.last_val_loss = val_loss
        if position.best_val_loss is None or val_loss < position.best_val_loss:
            position.best_val_loss, position.best_step, position.bad_evals = (
                val_loss,
                position.step,
                0,
            )
        else:
            position.bad_evals += 1
        row: dict[str, object] = {"val_loss": val_loss}
        if accuracy is not None:
            row["val_accuracy"] = accuracy
        return {**row, **self._run_hook(position.step)}

    def _training_row(self, lr: float) -> dict[str, object]:
        """The training columns of a metrics row (the means since the previous row)."""
        position = self.position
        seconds = position.window_seconds
        batches = self.batcher.num_batches(position.epoch)
        row: dict[str, object] = {
            "step": position.step,
            "epoch": round(position.epoch + position.batch_in_epoch / batches, 4),
            "loss": position.window_loss / position.window_tokens
            if position.window_tokens
            else None,
            "lr": lr,
            self.rate_column: round(position.window_tokens / seconds, 1) if seconds > 0 else None,
        }
        position.window_loss, position.window_tokens = 0.0, 0
        position.window_seconds = 0.0
        return row

    def _write_row(self, row: dict[str, object], writer: Any, bar: Any) -> None:
        if self._metrics is not None:
            self._metrics.write(row)
        step = self.position.step
        if writer is not None:
            for key, value in row.items():
                if key not in ("step", "epoch") and isinstance(value, float):
                    writer.add_scalar(key, value, step)
        if bar is not None:
            unit = "img/s" if self.is_classifier else "tok/s"
            shown = {
                "loss": f"{row['loss']:.3f}" if row.get("loss") is not None else "-",
                "lr": f"{row['lr']:.2e}",
                unit: f"{row[self.rate_column]:.0f}" if row.get(self.rate_column) else "-",
            }
            if row.get("val_loss") is not None:
                shown["val"] = f"{row['val_loss']:.3f}"
            bar.set_postfix(shown, refresh=False)

    def _finish(self, stop_reason: str | None, resumed_from: int | None) -> dict[str, Any]:
        position = self.position
        averaged: list[str] = []
        if self.rank == 0:
            averaged = self._write_final_model()
        batches = self.batcher.num_batches(position.epoch)
        summary = {
            "steps": position.step,
            "epochs": round(position.epoch + position.batch_in_epoch / batches, 4),
            "train_tokens": position.train_tokens,
            "stop_reason": stop_reason,
            "best_val_loss": position.best_val_loss,
            "best_step": position.best_step,
            "last_val_loss": position.last_val_loss,
            "elapsed_s": round(position.elapsed_s + (time.monotonic() - self._started), 3),
            "averaged_checkpoints": averaged,
            "model_dir": str(self.out / "model"),
            "resumed_from_step": resumed_from,
            "world_size": self.world_size,
            "dropped_examples": getattr(self.train_examples, "dropped", 0),
        }
        if self.rank == 0:
            write_json(self.out / "summary.json", summary)
        if self.world_size > 1:
            dist.barrier()  # out/model exists for every rank once train() returns
        return summary


# -- helpers ---------------------------------------------------------------------------------

# The models' buffers are fixed tables (positional encodings, grown lazily per process), not
# statistics: DDP must not broadcast them before each forward. (torch >= 2.10 renamed the
# option; the old name warns there.)
_NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device: 'cuda' was requested but CUDA is not available")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _as_examples(examples: object, name: str) -> Examples:
    if isinstance(examples, Examples):
        return examples
    if isinstance(examples, Sequence) and not isinstance(examples, (str, bytes)):
        try:
            return Examples(examples)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{name}: {e}") from None
    raise TypeError(f"{name}: expected Examples (make_examples), got {type(examples).__name__}")


def _as_images(images: object, name: str) -> LabelledImages:
    if not isinstance(images, LabelledImages):
        raise TypeError(
            f"{name}: a VisionTransformer trains on LabelledImages (attnlab.data.images), got "
            f"{type(images).__name__}"
        )
    return images


def _check_images(images: LabelledImages, config: Any, name: str) -> None:
    """The images are the shape the model takes, and their labels are its classes."""
    expected = (config.in_channels, config.image_size, config.image_size)
    if images.image_shape != expected:
        raise ValueError(
            f"{name}: images of shape {images.image_shape} (C, H, W), but the model takes "
            f"{expected}"
        )
    if images.num_classes != config.num_classes:
        raise ValueError(
            f"{name}: {images.num_classes} classes, but the model has num_classes="
            f"{config.num_classes}"
        )


def _optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam (sec. 5.3) at ``lr=1.0`` (the schedule sets the rate), or AdamW with decoupled
    weight decay on the matrices and kernels only when ``weight_decay > 0``."""
    options = {"lr": 1.0, "betas": config.betas, "eps": config.eps}
    if config.weight_decay == 0:
        return torch.optim.Adam(model.parameters(), **options)
    norms_and_tables = (nn.LayerNorm, nn.Embedding)
    no_decay: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if param.dim() < 2 or isinstance(module, norms_and_tables) or name != "weight":
                no_decay.add(id(param))
    params = list(model.parameters())
    groups = [
        {
            "params": [p for p in params if id(p) not in no_decay],
            "weight_decay": config.weight_decay,
        },
        {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], **options)


def _batcher(name: str, examples: Examples, max_tokens: int, **options: Any) -> TokenBatcher:
    try:
        return TokenBatcher.for_examples(examples, max_tokens, **options)
    except ValueError as e:  # an example longer than the budget: say which set it is in
        raise ValueError(f"{name}: {e}") from None


def _tokenizer_files(directory: str | os.PathLike | None) -> list[Path]:
    if directory is None:
        return []
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizers_dir: directory not found: {path}")
    files = [path / name for name in TOKENIZER_FILES if (path / name).is_file()]
    if not files:
        raise FileNotFoundError(
            f"tokenizers_dir: {path} holds none of {list(TOKENIZER_FILES)} (save_tokenizers "
            f"writes them)"
        )
    return files


@contextlib.contextmanager
def _global_rng_untouched(device: torch.device) -> Iterator[None]:
    """Run a block (the user's hook) without changing torch's, Python's or NumPy's RNG state."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _progress_bar(trainer: Trainer, *, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    config = trainer.config
    total = config.max_steps
    if config.max_epochs is not None:
        per_epoch = math.ceil(trainer.batcher.num_batches(0) / config.accumulate)
        estimate = config.max_epochs * per_epoch
        total = estimate if total is None else min(total, estimate)
    return tqdm(
        total=total,
        initial=trainer.position.step,
        unit="step",
        file=sys.stderr,
        dynamic_ncols=True,
        desc="train",
    )

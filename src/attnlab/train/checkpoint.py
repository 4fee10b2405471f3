"""Checkpoints: ``out/checkpoints/step-NNNNNNNN/`` with the weights, the optimizer, the
schedule, where training stands and the RNG states, built in a temporary directory, flushed to
disk and renamed into place in one step (a crash, a kill or a full disk leaves the previous
checkpoints intact); reading one back, checked completely before anything is used; and the
final model, the average of the last checkpoints (Vaswani et al. 2017, sec. 6.1).

Files of a checkpoint::

    model.safetensors, config.json   the model (save_pretrained)
    optimizer.safetensors            the optimizer's tensors (Adam's moments), no pickle
    state.json                       the rest: step, epoch, position in the epoch, best and
                                     last validation loss, schedule, RNG states, the
                                     TrainConfig, a fingerprint of the training data, the
                                     SHA-256 of the other three files and its own checksum

Resuming checks the newest checkpoint whole before touching the model or the optimizer: the
digests (any flipped bit), the schema of ``state.json``, the weights' header, every
optimizer tensor against its parameter, the schedule, the RNG states and the position. A
damaged one is set aside as ``checkpoints/damaged-step-N`` with a warning naming it and what
was wrong, and the previous complete one is used; when none is usable, one error lists them.
A checkpoint of another run (other settings, other data, another model) is an error at once.
A NaN in a checkpoint whose digests hold is the run's own (it diverged) and resumes as it is;
in one of the first format (no digests), a value that is not finite is taken for damage.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LRScheduler

from .._io import atomic_write, atomic_write_dir, not_written, write_json
from .._io import read_json as _io_read_json
from .._rundir import (
    CHECKPOINT_FILES,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
    TOKENIZER_NAMES,
    WEIGHTS_FILE,
    find_checkpoints,
)
from .._tensorfile import read_safetensors, read_safetensors_header, save_safetensors
from ..models.saved import (
    PretrainedModel,
    check_weights,
    read_config,
    set_weights,
)
from .config import TrainConfig
from .distributed import barrier
from .integrity import (
    check_digests,
    check_scheduler_state,
    check_schema,
    file_digest,
    optimizer_state,
    state_checksum,
)
from .position import Position
from .rng import check_rng_states

__all__ = [
    "CHECKPOINT_FILES",
    "CHECKPOINT_FORMAT",
    "average_checkpoints",
    "find_checkpoints",
    "load_checkpoint",
    "load_newest",
    "prepare_run_directory",
    "save_checkpoint",
    "tokenizer_files",
    "write_final_model",
]

CHECKPOINT_FORMAT = "attnlab-checkpoint-2"
#: Read too: a checkpoint of the first format has no digests, and is checked for the rest.
OLD_FORMATS = ("attnlab-checkpoint-1",)
DAMAGED_PREFIX = "damaged-"


def read_json(path: Path) -> dict[str, Any]:
    """:func:`attnlab._io.read_json`, a file that cannot be read (missing, a directory) a
    ValueError too: a checkpoint's file, which damage may take."""
    try:
        return _io_read_json(path)
    except OSError as e:
        raise ValueError(f"{path}: not a readable JSON file: {e}") from None


def average_checkpoints(checkpoints: Sequence[Path]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The element-wise mean (in float64, stored back in each tensor's dtype) of the weights of
    ``checkpoints``, and the newest one's safetensors metadata."""
    total: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    metadata: dict[str, str] = {}
    for path in checkpoints:
        # A run's own checkpoints: NaN is what a diverged run holds, averaged as it is.
        weights, metadata = read_safetensors(path / WEIGHTS_FILE, finite=False)
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
    return averaged, metadata


def tokenizer_files(directory: str | os.PathLike | None) -> list[Path]:
    if directory is None:
        return []
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizers_dir: directory not found: {path}")
    files = [path / name for name in TOKENIZER_NAMES if (path / name).is_file()]
    if not files:
        raise FileNotFoundError(
            f"tokenizers_dir: {path} holds none of {list(TOKENIZER_NAMES)} (save_tokenizers "
            f"writes them)"
        )
    return files


def prepare_run_directory(out: Path, *, resume: bool, rank: int, world_size: int) -> list[Path]:
    """Create ``out`` and clear what interrupted saves left (rank 0), then return its complete
    checkpoints; without ``resume`` there must be none (FileExistsError)."""
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        root = out / CHECKPOINTS_DIR
        stale = [*out.glob(".model.*.tmp"), *out.glob(".old-model.*"), *out.glob(".tmp-model-*")]
        if root.is_dir():
            for pattern in (".step-*.tmp", ".old-*", ".tmp-*"):
                stale += root.glob(pattern)
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
    barrier(world_size)
    checkpoints = find_checkpoints(out)
    if checkpoints and not resume:
        raise FileExistsError(
            f"out: {out} already holds checkpoints ({checkpoints[-1].name}); pass "
            f"resume=True (attnlab train --resume) to continue that run, or choose another "
            f"directory (attnlab train --overwrite starts it over)"
        )
    return checkpoints


def load_newest(
    checkpoints: Sequence[Path],
    load: Callable[[Path], dict[str, Any]],
    *,
    set_aside: bool = True,
) -> dict[str, Any] | None:
    """``load(path)`` of the newest checkpoint that loads, None when there are none.

    A damaged one (``load`` raised ValueError or OSError) is skipped with a warning naming it
    and what was wrong; once an older one has loaded, the damaged ones are renamed
    ``damaged-step-N`` (with ``set_aside``: the replica that writes), so that neither later
    resumes nor the final average see them. A ``resume:`` error (another run's checkpoint) is
    raised at once. Raises ValueError listing every checkpoint and its fault when none loads.
    """
    damaged: list[tuple[Path, str]] = []
    for path in reversed(checkpoints):
        try:
            state = load(path)
        except (ValueError, OSError) as e:
            if isinstance(e, ValueError) and str(e).startswith("resume:"):
                raise
            damaged.append((path, str(e)))
            warnings.warn(f"{path}: damaged checkpoint skipped: {e}", stacklevel=3)
            continue
        if set_aside:
            for bad, _ in damaged:
                _rename_aside(bad)
        return state
    if damaged:
        faults = "; ".join(f"{path.name}: {why}" for path, why in damaged)
        raise ValueError(
            f"resume: no usable checkpoint in {checkpoints[0].parent} ({len(damaged)} tried, "
            f"newest first): {faults}"
        )
    return None


def _rename_aside(path: Path) -> None:
    """Rename the damaged checkpoint ``path`` to ``damaged-step-N`` (``-2``, ... if taken)."""
    target = path.with_name(DAMAGED_PREFIX + path.name)
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{DAMAGED_PREFIX}{path.name}-{number}")
    try:
        os.replace(path, target)
    except OSError as e:
        warnings.warn(f"{path}: could not be set aside ({e})", stacklevel=4)


def save_checkpoint(
    out: Path,
    model: PretrainedModel,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    *,
    keep: int,
) -> None:
    """Write ``out/checkpoints/step-N`` (N: ``state["step"]``) as one unit, then delete all
    but the newest ``keep`` checkpoints. ``state`` holds everything but the weights and the
    optimizer, which are added here (its tensors in ``optimizer.safetensors``, the rest in
    ``state.json``, with the digests of the other files and its own checksum).

    Raises:
        OSError: the disk refused (naming the file); the previous checkpoints are intact.
    """
    optimizer_state_dict = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in optimizer_state_dict["state"].items():
        for key, value in values.items():
            if isinstance(value, Tensor):
                tensors[f"{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    state = {
        **state,
        "format": CHECKPOINT_FORMAT,
        "optimizer": {"param_groups": optimizer_state_dict["param_groups"], "scalars": scalars},
    }
    # What state.json will read back as (tuples become lists): what the checksum covers.
    state = json.loads(json.dumps(state))

    def build(temp: Path) -> None:
        model.write_files(temp)
        atomic_write(
            temp / OPTIMIZER_FILE, lambda p: save_safetensors(tensors, p, {"format": "pt"})
        )
        files = {name: file_digest(temp / name) for name in CHECKPOINT_FILES if name != STATE_FILE}
        body = {**state, "files": files}
        body["checksum"] = state_checksum(body)
        write_json(temp / STATE_FILE, body)

    root = out / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state['step']:08d}"
    try:
        atomic_write_dir(final, build)
    except OSError as error:  # name the checkpoint's file, not the temporary one
        failed = next((final / n for n in CHECKPOINT_FILES if n in str(error)), final)
        raise not_written(error, failed, what="the previous checkpoints are intact") from error
    for old in find_checkpoints(out)[:-keep]:
        try:
            _delete(old)
        except OSError as e:  # the new checkpoint is written: not a reason to stop
            warnings.warn(f"{old}: an old checkpoint could not be deleted ({e})", stacklevel=3)


def _delete(path: Path) -> None:
    """Delete the checkpoint ``path``, first renaming it so that a crash half-way leaves no
    ``step-N`` behind (``prepare_run_directory`` clears the rest)."""
    trash = path.with_name(f".old-{path.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _described_changes(saved: object, ours: dict[str, Any] | None) -> str:
    """What differs between the saved and the current data descriptions, field by field
    (``mixture.weights [1.0, 1.0] -> [3.0, 1.0]``; ``""`` when either is missing: the data
    did not describe itself). Where the corpora differ in number, they are one field."""
    if not isinstance(saved, dict) or ours is None:
        return ""
    before, after = _fields(saved), _fields(ours)
    changed = [
        f"{name} {before.get(name)!r:.80} -> {after.get(name)!r:.80}"
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name) and not name.endswith(".directory")
    ]
    return "; ".join(changed[:4]) or "other lengths"


def _fields(value: object, name: str = "") -> dict[str, object]:
    """``value``'s leaves by dotted name (lists of objects by index: ``corpora[1].key``)."""
    if isinstance(value, dict):
        found: dict[str, object] = {}
        for key, item in value.items():
            found.update(_fields(item, f"{name}.{key}" if name else str(key)))
        return found
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        found = {f"{name}.count": len(value)}
        for i, item in enumerate(value):
            found.update(_fields(item, f"{name}[{i}]"))
        return found
    return {name: value}


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    *,
    examples: int,
    fingerprint: str,
    described: dict[str, Any] | None = None,
    scheduler: LRScheduler | None = None,
    unit: str = "tokens",
    epoch_batches: Callable[[int], int] | None = None,
) -> dict[str, Any]:
    """Check checkpoint ``path`` whole, then load its weights into ``model``, its state into
    ``optimizer`` and ``scheduler`` (when given), and return its ``state.json`` (the position
    checked, against the run's ``epoch_batches`` when given: ready to restore).

    Raises:
        ValueError: ``resume: ...`` when the checkpoint is another run's (other settings, data
            or model); otherwise naming the file and what is damaged in it. Nothing has been
            changed then.
    """
    state_path = path / STATE_FILE
    state = read_json(state_path)
    # With its digests checked, every byte is as the run wrote it: a NaN is the run's own (it
    # diverged), not damage. Without them, a value that is not finite is taken for damage.
    verified = state.get("format") == CHECKPOINT_FORMAT
    if verified:
        check_digests(path, state, STATE_FILE)
    elif state.get("format") not in OLD_FORMATS:
        raise ValueError(
            f"{state_path}: format {state.get('format')!r:.40}, expected {CHECKPOINT_FORMAT!r}"
        )
    try:
        check_schema(state)
        Position.check_state(state, unit)
        if path.name != f"step-{state['step']:08d}":
            raise ValueError(f"step: {state['step']}, but the directory is {path.name}")
        check_rng_states(state["rng"], state["world_size"])
        saved_config = TrainConfig.from_dict(state["train_config"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{state_path}: {e}") from None
    _check_same_run(path, state, saved_config, model, config, examples, fingerprint, described)
    try:
        Position.check_state(state, unit, epoch_batches=epoch_batches)
        if scheduler is not None:
            check_scheduler_state(state["scheduler"], scheduler, step=state["step"])
    except ValueError as e:
        raise ValueError(f"{state_path}: {e}") from None

    weights_path = path / WEIGHTS_FILE
    dtype = check_weights(model, read_safetensors_header(weights_path)[0], weights_path)
    weights, _ = read_safetensors(weights_path, finite=not verified)
    stored, _ = read_safetensors(path / OPTIMIZER_FILE, finite=not verified)
    try:
        loaded = optimizer_state(stored, state["optimizer"], optimizer, step=state["step"])
    except ValueError as e:
        raise ValueError(f"{path}: optimizer state: {e}") from None

    set_weights(model, weights, dtype)
    optimizer.load_state_dict(loaded)
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    return state


def _check_same_run(
    path: Path,
    state: dict[str, Any],
    saved: TrainConfig,
    model: nn.Module,
    config: TrainConfig,
    examples: int,
    fingerprint: str,
    described: dict[str, Any] | None = None,
) -> None:
    """``resume: ...`` unless checkpoint ``path`` continues this run: the settings that shape
    the trajectory, the training data and the model's config are the same (data that
    describes itself, as shards do, is named by what differs: corpora, max_len, mixture)."""
    changed = config.trajectory_changes(saved)
    if changed:
        raise ValueError(
            f"resume: {path} was trained with other settings ({', '.join(changed)}); "
            f"resume with the same ones, or start a new run directory"
        )
    data = state["data"]
    if data["train_examples"] != examples or data["fingerprint"] != fingerprint:
        changes = _described_changes(data.get("described"), described)
        if changes:
            raise ValueError(
                f"resume: {path} was trained on other data ({changes}); resume with the same "
                f"corpora, max_len and mixture, or start a new run directory"
            )
        raise ValueError(
            f"resume: {path} was trained on other data ({data['train_examples']} examples, "
            f"now {examples}, or other lengths); pass the same train_examples"
        )
    ours = getattr(model, "config", None)
    if hasattr(ours, "to_dict"):
        mine, theirs = ours.to_dict(), read_config(path)[1].to_dict()  # type: ignore[union-attr]
        if theirs != mine:
            diff = [f"{k}={v!r} -> {mine[k]!r}" for k, v in theirs.items() if mine.get(k) != v]
            raise ValueError(
                f"resume: {path} holds another model ({', '.join(diff)}); resume with the "
                f"same model config, or start a new run directory"
            )


def write_final_model(out: Path, average_last: int, tokenizers: Sequence[Path]) -> list[str]:
    """Average the last ``average_last`` checkpoints of ``out`` into ``out/model`` (one unit)
    with the newest one's config and the ``tokenizers`` files; return the checkpoints' names."""
    chosen = find_checkpoints(out)[-average_last:]
    weights, metadata = average_checkpoints(chosen)

    def build(temp: Path) -> None:
        atomic_write(temp / WEIGHTS_FILE, lambda p: save_safetensors(weights, p, metadata))
        shutil.copyfile(chosen[-1] / CONFIG_FILE, temp / CONFIG_FILE)
        for source in tokenizers:
            shutil.copyfile(source, temp / source.name)

    final = out / "model"
    try:
        atomic_write_dir(final, build)
    except OSError as error:  # name the model's file, not the temporary one
        failed = next((final / n for n in (WEIGHTS_FILE, CONFIG_FILE) if n in str(error)), final)
        raise not_written(error, failed, what="the checkpoints are intact") from error
    return [path.name for path in chosen]

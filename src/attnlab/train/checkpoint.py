"""Checkpoints: ``out/checkpoints/step-NNNNNNNN/`` with the weights, the optimizer, the
schedule, where training stands and the RNG states, each written to a temporary directory,
flushed to disk and renamed into place (a crash leaves the previous checkpoints intact);
reading one back, checked against the run that resumes it; and the final model, the average
of the last checkpoints (Vaswani et al. 2017, sec. 6.1).

Files of a checkpoint::

    model.safetensors, config.json   the model (save_pretrained)
    optimizer.safetensors            the optimizer's tensors (Adam's moments), no pickle
    state.json                       the rest: step, epoch, position in the epoch, best and
                                     last validation loss, schedule, RNG states, the
                                     TrainConfig, and a fingerprint of the training data
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._io import atomic_write, current_umask, write_json
from ..data.tokenizer import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE, TOKENIZER_FILE
from ..pretrained import CONFIG_FILE, WEIGHTS_FILE, PretrainedModel, load_weights
from .config import TrainConfig
from .distributed import barrier

__all__ = [
    "CHECKPOINT_FILES",
    "CHECKPOINT_FORMAT",
    "find_checkpoints",
    "load_checkpoint",
    "load_newest",
    "prepare_run_directory",
    "save_checkpoint",
    "tokenizer_files",
    "write_final_model",
]

CHECKPOINT_FORMAT = "attnlab-checkpoint-1"
TOKENIZER_FILES = (TOKENIZER_FILE, SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE)
STATE_FILE = "state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
CHECKPOINT_FILES = (WEIGHTS_FILE, CONFIG_FILE, OPTIMIZER_FILE, STATE_FILE)


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


def fsync_tree(directory: Path) -> None:
    """Flush the files of ``directory`` and the directory itself to disk (crash safety beyond
    a killed process: a power loss)."""
    for path in directory.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on directories
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_dir(temp: Path, final: Path) -> None:
    """Move the finished directory ``temp`` to ``final``, replacing an old one."""
    os.chmod(temp, 0o777 & ~current_umask())  # mkdtemp makes 0700 directories
    if final.exists():
        trash = Path(tempfile.mkdtemp(prefix=".old-", dir=final.parent))
        os.replace(final, trash / final.name)
        os.replace(temp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(temp, final)
    fsync_dir(final.parent)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def average_checkpoints(checkpoints: Sequence[Path]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The element-wise mean (in float64, stored back in each tensor's dtype) of the weights of
    ``checkpoints``, and the newest one's safetensors metadata."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    total: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in checkpoints:
        weights = load_file(path / WEIGHTS_FILE)
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
    with safe_open(checkpoints[-1] / WEIGHTS_FILE, framework="pt") as handle:
        metadata = handle.metadata() or {}
    return averaged, metadata


def tokenizer_files(directory: str | os.PathLike | None) -> list[Path]:
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


def prepare_run_directory(out: Path, *, resume: bool, rank: int, world_size: int) -> list[Path]:
    """Create ``out`` and clear what interrupted saves left (rank 0), then return its complete
    checkpoints; without ``resume`` there must be none (FileExistsError)."""
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        root = out / "checkpoints"
        if root.is_dir():
            for stale in root.glob(".tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            for stale in root.glob(".old-*"):
                shutil.rmtree(stale, ignore_errors=True)
    barrier(world_size)
    checkpoints = find_checkpoints(out)
    if checkpoints and not resume:
        raise FileExistsError(
            f"out: {out} already holds checkpoints ({checkpoints[-1].name}); pass "
            f"resume=True to continue that run, or choose another directory"
        )
    return checkpoints


def load_newest(
    checkpoints: Sequence[Path], load: Callable[[Path], dict[str, Any]]
) -> dict[str, Any] | None:
    """``load(path)`` of the newest checkpoint that loads; one that is unreadable (truncated
    files, missing keys) is skipped with a warning, but a ``resume:`` error (another run's
    checkpoint) is raised. None when no checkpoint loads."""
    for path in reversed(checkpoints):
        try:
            return load(path)
        except (ValueError, KeyError, OSError) as e:
            if isinstance(e, ValueError) and str(e).startswith("resume:"):
                raise
            warnings.warn(f"{path}: unreadable checkpoint skipped ({e})", stacklevel=4)
    return None


def save_checkpoint(
    out: Path,
    model: PretrainedModel,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    *,
    keep: int,
) -> None:
    """Write ``out/checkpoints/step-N`` (N: ``state["step"]``) atomically, then delete all but
    the newest ``keep`` checkpoints. ``state`` holds everything but the weights and the
    optimizer, which are added here (its tensors in ``optimizer.safetensors``, the rest in
    ``state.json``)."""
    from safetensors.torch import save_file

    optimizer_state = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in optimizer_state["state"].items():
        for key, value in values.items():
            if isinstance(value, Tensor):
                tensors[f"{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    state = {
        **state,
        "optimizer": {"param_groups": optimizer_state["param_groups"], "scalars": scalars},
    }
    root = out / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        model.save_pretrained(temp)
        atomic_write(
            temp / OPTIMIZER_FILE, lambda p: save_file(tensors, p, metadata={"format": "pt"})
        )
        write_json(temp / STATE_FILE, state)
        fsync_tree(temp)
        replace_dir(temp, root / f"step-{state['step']:08d}")
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    for old in find_checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    *,
    examples: int,
    fingerprint: str,
) -> dict[str, Any]:
    """Check that checkpoint ``path`` continues this run (format, the settings that shape the
    trajectory, the training data: ValueError ``resume: ...`` otherwise), load its weights into
    ``model`` and its state into ``optimizer``, and return its ``state.json``."""
    from safetensors.torch import load_file

    state = read_json(path / STATE_FILE)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path / STATE_FILE}: format {state.get('format')!r}, expected {CHECKPOINT_FORMAT!r}"
        )
    changed = config.trajectory_changes(TrainConfig.from_dict(state["train_config"]))
    if changed:
        raise ValueError(
            f"resume: {path} was trained with other settings ({', '.join(changed)}); "
            f"resume with the same ones, or start a new run directory"
        )
    data = state["data"]
    if data["train_examples"] != examples or data["fingerprint"] != fingerprint:
        raise ValueError(
            f"resume: {path} was trained on other data ({data['train_examples']} examples, "
            f"now {examples}, or other lengths); pass the same train_examples"
        )
    load_weights(model, path / WEIGHTS_FILE)
    stored = load_file(path / OPTIMIZER_FILE)
    per_param: dict[int, dict[str, Any]] = {}
    for key, tensor in stored.items():
        index, name = key.split(".", 1)
        per_param.setdefault(int(index), {})[name] = tensor
    for index, values in state["optimizer"]["scalars"].items():
        per_param.setdefault(int(index), {}).update(values)
    optimizer.load_state_dict(
        {"state": per_param, "param_groups": state["optimizer"]["param_groups"]}
    )
    return state


def write_final_model(out: Path, average_last: int, tokenizers: Sequence[Path]) -> list[str]:
    """Average the last ``average_last`` checkpoints of ``out`` into ``out/model`` with the
    newest one's config and the ``tokenizers`` files; return the checkpoints' names."""
    from safetensors.torch import save_file

    chosen = find_checkpoints(out)[-average_last:]
    weights, metadata = average_checkpoints(chosen)
    temp = Path(tempfile.mkdtemp(prefix=".tmp-model-", dir=out))
    try:
        atomic_write(temp / WEIGHTS_FILE, lambda p: save_file(weights, p, metadata=metadata))
        shutil.copyfile(chosen[-1] / CONFIG_FILE, temp / CONFIG_FILE)
        for source in tokenizers:
            shutil.copyfile(source, temp / source.name)
        fsync_tree(temp)
        replace_dir(temp, out / "model")
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return [path.name for path in chosen]

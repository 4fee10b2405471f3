"""What a checkpoint is checked for before a run resumes from it.

A checkpoint's ``state.json`` carries the SHA-256 digest of each of its other files and a
checksum of its own content (:func:`state_checksum`), so that any damage, a single flipped bit
included, is found before anything is used (:func:`check_digests`). The rest is checked for
what it must be whatever its origin: the schema of ``state.json`` (:func:`check_schema`), every
optimizer tensor against its parameter (:func:`optimizer_state`), and the schedule's state
against the run's scheduler (:func:`check_scheduler_state`). The RNG states and the position
are checked by :func:`attnlab.train.rng.check_rng_states` and
:meth:`attnlab.train.position.Position.check_state`.

Every check raises ValueError naming what is wrong; nothing here changes a model, an optimizer
or a generator.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler

from .._checks import brief, is_int

__all__ = [
    "check_digests",
    "check_scheduler_state",
    "check_schema",
    "file_digest",
    "optimizer_state",
    "state_checksum",
]

_CHUNK = 1 << 20
_HEX = re.compile(r"^[0-9a-f]{64}$")


def file_digest(path: Path) -> str:
    """The SHA-256 of the file ``path``, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def state_checksum(state: Mapping[str, Any]) -> str:
    """The SHA-256 of ``state`` without its ``checksum`` key, as canonical JSON (sorted keys,
    no spaces): what JSON reads back gives the same checksum."""
    body = {key: value for key, value in state.items() if key != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_digests(directory: Path, state: Mapping[str, Any], state_file: str) -> None:
    """Raise ValueError unless ``state`` (read from ``directory / state_file``) matches its
    checksum and each file its ``files`` names matches its digest."""
    where = directory / state_file
    if state.get("checksum") != state_checksum(state):
        raise ValueError(f"{where}: its content does not match its checksum (damaged)")
    files = state.get("files")
    if not (isinstance(files, dict) and files) or not all(
        isinstance(name, str) and "/" not in name and isinstance(d, str) and _HEX.match(d)
        for name, d in files.items()
    ):
        raise ValueError(f"{where}: files: expected file names and their SHA-256 digests")
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            raise ValueError(f"{path}: missing")
        if file_digest(path) != expected:
            raise ValueError(f"{path}: its content does not match its digest in {where} (damaged)")


def check_schema(state: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first top-level key of ``state`` that is missing or of the
    wrong type (the position's and the RNG's own fields are checked by their modules)."""
    kinds: dict[str, type | tuple[type, ...]] = {
        "scheduler": dict,
        "rng": list,
        "world_size": int,
        "data": dict,
        "train_config": dict,
        "optimizer": dict,
    }
    for key, kind in kinds.items():
        if key not in state:
            raise ValueError(f"{key}: missing")
        value = state[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{key}: expected a {_kind(kind)}, got {brief(value)}")
    if state["world_size"] < 1:
        raise ValueError(f"world_size: expected a positive int, got {state['world_size']}")
    data = state["data"]
    if not (is_int(data.get("train_examples")) and isinstance(data.get("fingerprint"), str)):
        raise ValueError(f"data: expected train_examples and fingerprint, got {brief(data)}")
    columns = state.get("metrics_columns", [])
    if not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)):
        raise ValueError(f"metrics_columns: expected a list of names, got {brief(columns)}")


def optimizer_state(
    tensors: Mapping[str, Tensor],
    saved: Mapping[str, Any],
    optimizer: torch.optim.Optimizer,
    *,
    step: int,
) -> dict[str, Any]:
    """The state dict that ``optimizer.load_state_dict`` takes, from a checkpoint's optimizer
    ``tensors`` (``"INDEX.NAME"``) and ``saved`` (its ``param_groups`` and per-parameter
    ``scalars``), checked against ``optimizer``: the same groups over the same parameters with
    the same kinds of settings; every tensor of a parameter that exists, shaped as it (or a
    a scalar for a step count), finite; each parameter with state has the same names;
    second moments non-negative, step counts in ``[0, step]``. Raises ValueError naming the
    tensor or setting."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    groups = _check_groups(saved.get("param_groups"), optimizer.state_dict()["param_groups"])
    per_param: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        found = re.fullmatch(r"(\d+)\.(\w+)", key)
        if found is None or int(found.group(1)) >= len(params):
            raise ValueError(f"{key}: not a tensor of one of the {len(params)} parameters")
        index, name = int(found.group(1)), found.group(2)
        shape = tuple(params[index].shape)
        if tuple(tensor.shape) != (() if name == "step" else shape):
            raise ValueError(
                f"{key}: shape {tuple(tensor.shape)}, but parameter {index} is {shape}"
            )
        if not tensor.dtype.is_floating_point:
            raise ValueError(f"{key}: dtype {tensor.dtype}, expected a floating dtype")
        if name.endswith("exp_avg_sq") and tensor.numel() and float(tensor.amin()) < 0:
            raise ValueError(f"{key}: a second moment below 0")
        if name == "step" and not (tensor.dim() == 0 and 0 <= float(tensor) <= step):
            raise ValueError(f"{key}: expected a step count in [0, {step}], got {tensor!r:.40}")
        per_param.setdefault(index, {})[name] = tensor
    scalars = saved.get("scalars", {})
    if not isinstance(scalars, dict):
        raise ValueError(f"scalars: expected an object, got {brief(scalars)}")
    for index_text, values in scalars.items():
        if not (index_text.isdigit() and int(index_text) < len(params)):
            raise ValueError(f"scalars: {index_text!r:.20} is not a parameter's index")
        if not isinstance(values, dict) or not all(
            isinstance(v, (int, float, bool)) or v is None for v in values.values()
        ):
            raise ValueError(f"scalars[{index_text}]: expected numbers, got {brief(values)}")
        per_param.setdefault(int(index_text), {}).update(values)
    names = {frozenset(values) for values in per_param.values()}
    if len(names) > 1:
        raise ValueError(f"parameters hold different state: {sorted(map(sorted, names))}")
    return {"state": per_param, "param_groups": groups}


def _check_groups(saved: object, current: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not (isinstance(saved, list) and len(saved) == len(current)):
        raise ValueError(f"param_groups: expected {len(current)} groups, got {brief(saved)}")
    for number, (group, now) in enumerate(zip(saved, current, strict=True)):
        where = f"param_groups[{number}]"
        if not isinstance(group, dict) or group.get("params") != now["params"]:
            raise ValueError(f"{where}: not a group over the run's parameters {now['params']}")
        unknown = set(group) - set(now)
        if unknown:
            raise ValueError(f"{where}: unknown settings {sorted(unknown)}")
        for key, value in group.items():
            if key != "params" and not _same_kind(value, now[key]):
                raise ValueError(f"{where}.{key}: {brief(value)} is not a {now[key]!r:.30}'s kind")
    return saved


def check_scheduler_state(saved: Mapping[str, Any], scheduler: LRScheduler, *, step: int) -> None:
    """Raise ValueError unless ``saved`` is a state of ``scheduler``'s kind (its keys, their
    kinds, as many rates as groups) at ``step`` (``last_epoch``: the scheduler steps once an
    optimizer step)."""
    current = scheduler.state_dict()
    unknown = set(saved) - set(current)
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    for key in ("base_lrs", "last_epoch"):
        if key not in saved:
            raise ValueError(f"{key}: missing")
    for key, value in saved.items():
        if not _same_kind(value, current[key]):
            raise ValueError(f"{key}: {brief(value)} is not a {current[key]!r:.30}'s kind")
    if saved["last_epoch"] != step:
        raise ValueError(f"last_epoch: {saved['last_epoch']}, but the checkpoint is at {step}")


def _same_kind(value: object, like: object) -> bool:
    """Whether ``value`` (read from JSON) can stand for ``like``: numbers finite, flags and
    nulls interchangeable (optional flags), sequences as long, element by element."""
    if like is None or isinstance(like, bool):
        return value is None or isinstance(value, bool)
    if isinstance(like, (int, float)):
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and (isinstance(value, int) or not isinstance(like, int) or value == int(value))
        )
    if isinstance(like, str):
        return isinstance(value, str)
    if isinstance(like, Sequence):
        return (
            isinstance(value, list)
            and len(value) == len(like)
            and all(_same_kind(v, w) for v, w in zip(value, like, strict=True))
        )
    if isinstance(like, Mapping):
        return isinstance(value, dict)
    return False


def _kind(kind: type | tuple[type, ...]) -> str:
    names = {dict: "JSON object", list: "list", int: "int"}
    return names.get(kind, str(kind))  # type: ignore[call-overload]

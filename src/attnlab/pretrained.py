"""Saved models: the file names, reading and writing them, and the model-type registry.

A saved model is a directory with ``config.json`` (the config's fields and its ``model_type``)
and ``model.safetensors`` (the weights; no pickle). The ``model_type`` names the class that
reads it: :func:`register_model_type` adds a class to the registry (:mod:`attnlab.model`
registers ``transformer``, ``lm`` and ``encoder``, :mod:`attnlab.vision` ``vit``), and
:func:`load_pretrained` builds whichever class a directory names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from ._io import atomic_write
from ._version import __version__

__all__ = [
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "PretrainedModel",
    "load_pretrained",
    "load_weights",
    "model_class",
    "model_types",
    "read_config",
    "register_model_type",
]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

# model_type -> class, in registration order (the order error messages list them in).
_MODEL_TYPES: dict[str, type[PretrainedModel]] = {}

M = TypeVar("M", bound="type[PretrainedModel]")


def register_model_type(cls: M) -> M:
    """Register ``cls`` under its ``model_type`` so that :func:`load_pretrained` and
    :func:`read_config` know it; returns ``cls`` (usable as a class decorator)."""
    _MODEL_TYPES[cls.model_type] = cls
    return cls


def model_types() -> list[str]:
    """The registered model types, in registration order."""
    return list(_MODEL_TYPES)


def model_class(model_type: object) -> type[PretrainedModel]:
    """The class registered as ``model_type``; ValueError naming the known ones otherwise."""
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"model_type: expected one of {list(_MODEL_TYPES)}, got {model_type!r}")
    return _MODEL_TYPES[model_type]


def unique_state(module: nn.Module) -> dict[str, Tensor]:
    """The state dict with each tied tensor once (its first name): safetensors stores no
    aliases, and the model re-ties on construction."""
    state: dict[str, Tensor] = {}
    seen: set[int] = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        state[name] = tensor.detach()
    return state


def read_config(directory: str | os.PathLike[str]) -> tuple[str, Any]:
    """Read ``config.json`` of a saved model: ``(model_type, config)``, the config an instance of
    the model class's ``config_class``; errors name the file."""
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (save_pretrained writes it)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    model_type = data.pop("model_type", None)
    data.pop("attnlab_version", None)
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"{path}: model_type: expected one of {list(_MODEL_TYPES)}, got {model_type!r}"
        )
    try:
        return model_type, _MODEL_TYPES[model_type].config_class.from_dict(data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def load_weights(model: nn.Module, path: Path) -> None:
    """Load ``model.safetensors`` into ``model``, checking every key and shape."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (save_pretrained writes it)")
    try:
        stored = load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable safetensors file (truncated?): {e}") from None
    dtypes = {t.dtype for t in stored.values() if t.dtype.is_floating_point}
    if len(dtypes) == 1:  # build in the precision it was saved in (a float64 model stays one)
        model.to(dtypes.pop())
    expected = unique_state(model)
    missing = [k for k in expected if k not in stored]
    unknown = [k for k in stored if k not in expected]
    if missing:
        raise ValueError(
            f"{path}: missing weights {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    if unknown:
        raise ValueError(
            f"{path}: unknown weights {unknown[:5]}{' ...' if len(unknown) > 5 else ''} "
            f"(saved by another model or config?)"
        )
    for name, tensor in stored.items():
        target = expected[name]
        if tensor.shape != target.shape:
            raise ValueError(
                f"{path}: {name}: shape {tuple(tensor.shape)} does not match the config's "
                f"{tuple(target.shape)}"
            )
        if target.dtype.is_floating_point and not tensor.dtype.is_floating_point:
            raise ValueError(f"{path}: {name}: dtype {tensor.dtype}, expected a floating dtype")
    with torch.no_grad():
        for name, tensor in stored.items():
            expected[name].copy_(tensor)


class PretrainedModel(nn.Module):
    """save_pretrained / from_pretrained, shared by the models.

    A model class names its ``model_type`` (its key in the registry and in ``config.json``)
    and its ``config_class``: a dataclass with ``to_dict()`` and ``from_dict()``.
    """

    model_type: ClassVar[str]
    config_class: ClassVar[type[Any]]
    config: Any

    def num_parameters(self) -> int:
        """Parameters, tied ones counted once (equals :func:`count_parameters`)."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if
        needed). Each file is written to a temporary name and renamed, so a crash never leaves
        a half-written file under the real name. Returns the directory."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.contiguous().cpu() for k, v in unique_state(self).items()}
        metadata = {"format": "pt", "model_type": self.model_type}
        atomic_write(directory / WEIGHTS_FILE, lambda p: save_file(state, p, metadata=metadata))
        config = {"model_type": self.model_type, "attnlab_version": __version__}
        config.update(self.config.to_dict())
        text = json.dumps(config, indent=2) + "\n"
        atomic_write(directory / CONFIG_FILE, lambda p: Path(p).write_text(text, encoding="utf-8"))
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike[str],
        *,
        device: torch.device | str | None = None,
    ) -> PretrainedModel:
        """Load a model written by :meth:`save_pretrained`, in eval mode, in the precision its
        weights were saved in, on ``device`` (default CPU).

        Errors name the file and, for weights, the key: a missing or truncated file, another
        model type, unknown or missing weights, wrong shapes.
        """
        model_type, config = read_config(directory)
        if model_type != cls.model_type:
            raise ValueError(
                f"{Path(directory) / CONFIG_FILE}: holds a {model_type!r} model "
                f"({_MODEL_TYPES[model_type].__name__}), not {cls.model_type!r} ({cls.__name__}); "
                f"use attnlab.load_pretrained to load any model"
            )
        model = cls(config)
        load_weights(model, Path(directory) / WEIGHTS_FILE)
        if device is not None:
            model = model.to(device)
        return model.eval()


def load_pretrained(
    directory: str | os.PathLike[str], *, device: torch.device | str | None = None
) -> PretrainedModel:
    """Load any model written by ``save_pretrained``; its class comes from ``config.json``."""
    model_type, _ = read_config(directory)
    return _MODEL_TYPES[model_type].from_pretrained(directory, device=device)

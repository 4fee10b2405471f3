"""Saved models: the file names, reading and writing them, and the model-type registry.

A saved model is a directory with ``config.json`` (the config's fields and its ``model_type``)
and ``model.safetensors`` (the weights; no pickle). The ``model_type`` names the class that
reads it: :func:`register_model_type` adds a class to the registry
(:mod:`attnlab.models.transformer` registers ``transformer``, ``lm`` and ``encoder``,
:mod:`attnlab.models.vision` ``vit``), and :func:`load_pretrained` builds whichever class a
directory names.

Loading trusts neither file. ``config.json`` is checked field by field, with bounds on every
size (:data:`LOAD_LIMITS`), so a damaged or hostile one is one clear error rather than a
terabyte allocation. The weights file's header is read and checked first (its structure, that
the data is all there, every tensor's name, dtype and shape against the model the config
describes, and the total against the config's parameter count) while the model exists only on
PyTorch's meta device, without memory. Only then are the tensors read (every float checked
finite) and given to the model as its parameters: nothing is allocated twice or initialised
only to be overwritten.
"""

from __future__ import annotations

import errno as errnos
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .._io import atomic_write, atomic_write_dir, not_written, read_json
from .._rundir import CONFIG_FILE, WEIGHTS_FILE
from .._tensorfile import (
    FLOAT_DTYPES,
    TensorInfo,
    read_safetensors,
    read_safetensors_header,
    save_safetensors,
)
from .._version import __version__

__all__ = [
    "CONFIG_FILE",
    "LOAD_LIMITS",
    "WEIGHTS_FILE",
    "PretrainedModel",
    "check_weights",
    "load_pretrained",
    "load_weights",
    "model_class",
    "read_config",
    "read_config_file",
    "register_model_type",
    "set_weights",
]

#: The largest value a loaded ``config.json`` may give each size field (any model family that
#: has the field). Far above any real model (the widest published Transformers have d_model
#: near 25,000, vocabularies near 256,000), far below what would exhaust a machine.
LOAD_LIMITS: dict[str, int] = {
    "vocab_size": 1 << 24,
    "tgt_vocab_size": 1 << 24,
    "type_vocab_size": 1 << 24,
    "num_classes": 1 << 24,
    "d_model": 1 << 16,
    "d_ff": 1 << 20,
    "num_heads": 1 << 16,
    "num_kv_heads": 1 << 16,
    "num_encoder_layers": 1 << 10,
    "num_decoder_layers": 1 << 10,
    "num_layers": 1 << 10,
    "max_len": 1 << 24,
    "image_size": 1 << 16,
    "patch_size": 1 << 16,
    "in_channels": 1 << 12,
}
#: The most elements the fixed tables that a model computes rather than saves (sinusoidal
#: position tables, ALiBi slopes) may have, together: 1 GiB in float32.
MAX_FIXED_ELEMENTS = 1 << 28
# model_type -> class, in registration order (the order error messages list them in).
_MODEL_TYPES: dict[str, type[PretrainedModel]] = {}

M = TypeVar("M", bound="type[PretrainedModel]")


def register_model_type(cls: M) -> M:
    """Register ``cls`` under its ``model_type`` so that :func:`load_pretrained` and
    :func:`read_config` know it; returns ``cls`` (usable as a class decorator)."""
    _MODEL_TYPES[cls.model_type] = cls
    return cls


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


# -- config.json -------------------------------------------------------------------------------


def read_config_file(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object of ``config.json`` in ``directory``, as it is (unchecked): the one place
    that file is opened and parsed. FileNotFoundError for a missing directory or file; else as
    :func:`read_json`. :func:`read_config` checks its fields."""
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing (every saved model directory has it, e.g. OUT/model of attnlab train)"
        )
    return read_json(path)


def read_config(directory: str | os.PathLike[str]) -> tuple[str, Any]:
    """Read ``config.json`` of a saved model (:func:`read_config_file`): ``(model_type,
    config)``, the config an instance of the model class's ``config_class``, every size within
    :data:`LOAD_LIMITS`; errors name the file and the field."""
    path = Path(directory) / CONFIG_FILE
    data = read_config_file(directory)
    model_type = data.pop("model_type", None)
    data.pop("attnlab_version", None)
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"{path}: model_type: expected one of {list(_MODEL_TYPES)}, got {model_type!r}"
        )
    try:
        config = _MODEL_TYPES[model_type].config_class.from_dict(data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
    for name, limit in LOAD_LIMITS.items():
        value = getattr(config, name, None)
        if isinstance(value, int) and value > limit:
            raise ValueError(
                f"{path}: {name}: {value:,} is beyond what attnlab loads (at most {limit:,}); "
                f"a damaged or foreign config.json?"
            )
    return model_type, config


# -- weights into a model ----------------------------------------------------------------------


def check_weights(
    model: nn.Module, header: dict[str, TensorInfo], path: Path
) -> torch.dtype | None:
    """Check the tensors of ``header`` (from ``path``) against ``model``'s state, which may be
    on the meta device: the same names (tied tensors once), shapes, and a float where the model
    has one. Returns the one float dtype of the file (None: several, or none)."""
    expected = unique_state(model)
    missing = [k for k in expected if k not in header]
    unknown = [k for k in header if k not in expected]
    if missing:
        raise ValueError(
            f"{path}: missing weights {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    if unknown:
        raise ValueError(
            f"{path}: unknown weights {unknown[:5]}{' ...' if len(unknown) > 5 else ''} "
            f"(saved by another model or config?)"
        )
    for name, target in expected.items():  # the model's order: its first tensor first
        info = header[name]
        if info.shape != tuple(target.shape):
            raise ValueError(
                f"{path}: {name}: shape {info.shape} does not match the config's "
                f"{tuple(target.shape)}"
            )
        if target.dtype.is_floating_point and info.dtype not in FLOAT_DTYPES:
            raise ValueError(
                f"{path}: {name}: dtype {info.dtype}, expected a floating dtype "
                f"({', '.join(str(d) for d in FLOAT_DTYPES)})"
            )
    floats = {info.dtype for info in header.values() if info.dtype.is_floating_point}
    return floats.pop() if len(floats) == 1 else None


def load_weights(model: nn.Module, path: Path) -> None:
    """Load ``model.safetensors`` into ``model``, checking every key, shape and value first.

    The model may be on the meta device (as :meth:`PretrainedModel.from_pretrained` builds
    it): the file's tensors then become its parameters, tied ones tied again, and the tables
    it computes rather than saves are computed. A file of one float dtype sets the model's
    (a float64 model stays one)."""
    header, _ = read_safetensors_header(path)
    dtype = check_weights(model, header, path)
    stored, _ = read_safetensors(path)
    set_weights(model, stored, dtype)


def set_weights(model: nn.Module, stored: dict[str, Tensor], dtype: torch.dtype | None) -> None:
    """Give ``model`` the tensors ``stored`` (checked by :func:`check_weights`, which gave
    ``dtype``): copied into its parameters, or, for a model on the meta device, made its
    parameters (see :func:`load_weights`)."""
    on_meta = any(t.is_meta for t in model.state_dict(keep_vars=True).values())
    if dtype is not None and not on_meta:
        model.to(dtype)
    expected = unique_state(model)
    for name, tensor in stored.items():
        target = expected[name]
        want = dtype if dtype is not None and tensor.dtype.is_floating_point else target.dtype
        stored[name] = tensor.to(want)
    if on_meta:
        _materialize(model, stored)
        if dtype is not None:
            model.to(dtype)
        return
    with torch.no_grad():
        for name, tensor in stored.items():
            expected[name].copy_(tensor)


def _materialize(model: nn.Module, stored: dict[str, Tensor]) -> None:
    """Give the meta-device ``model`` the tensors ``stored`` (one per tied group), tie the
    groups again, and compute the buffers that are not saved (each module that has such a
    buffer rebuilds it in ``reset_buffers()``; an empty one is just made real)."""
    first_name: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in first_name:
            aliases[name] = first_name[id(tensor)]
        else:
            first_name[id(tensor)] = name
    model.load_state_dict(stored, strict=False, assign=True)
    for alias, name in aliases.items():
        owner, _, leaf = alias.rpartition(".")
        source, _, source_leaf = name.rpartition(".")
        setattr(model.get_submodule(owner), leaf, getattr(model.get_submodule(source), source_leaf))
    for module in model.modules():
        meta = [
            (n, b) for n, b in module.named_buffers(recurse=False) if b is not None and b.is_meta
        ]
        if any(b.numel() for _, b in meta):
            reset = getattr(module, "reset_buffers", None)
            if reset is None:
                raise RuntimeError(
                    f"{type(module).__name__}: has a buffer that is not saved and no "
                    f"reset_buffers() to compute it on load"
                )
            reset()
        else:
            for n, b in meta:
                setattr(module, n, torch.empty(b.shape, dtype=b.dtype))
    left = [n for n, t in model.state_dict(keep_vars=True).items() if t.is_meta]
    left += [n for n, b in model.named_buffers() if b.is_meta]
    if left:
        raise RuntimeError(f"{type(model).__name__}: {left[:3]} still on the meta device")


class _SkipInitOnMeta(TorchFunctionMode):
    """Skips the in-place value-only operations (random initialisation, its scaling and
    clamping) on meta tensors: they compute nothing there, yet some (``normal_``, ``erfinv_``,
    ``clamp_``, through torch's reference implementations) import ``torch._dynamo``, seconds
    of a command's start. Thread-local, as every torch function mode."""

    SKIPPED = frozenset(
        ["normal_", "uniform_", "erfinv_", "clamp_", "fill_", "zero_", "mul_", "add_", "copy_"]
    )

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.SKIPPED:
            # A Tensor method gets the tensor first; torch.nn.init's functions by keyword.
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


def _fixed_elements(model: nn.Module) -> int:
    saved = {id(t) for t in model.state_dict(keep_vars=True).values()}
    return sum(b.numel() for b in model.buffers() if id(b) not in saved)


# -- the models' base class --------------------------------------------------------------------


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

    @classmethod
    def parameters_for(cls, config: Any) -> int | None:
        """The parameter count of a model of this class built from ``config``, computed from
        the config alone (the config's ``num_parameters()`` by default; None: not known)."""
        count = getattr(config, "num_parameters", None)
        return int(count()) if callable(count) else None

    def write_files(self, directory: str | os.PathLike[str]) -> None:
        """Write ``config.json`` and ``model.safetensors`` into the existing ``directory``, each
        atomically (:meth:`save_pretrained` makes them one unit)."""
        directory = Path(directory)
        state = {k: v.contiguous().cpu() for k, v in unique_state(self).items()}
        metadata = {"format": "pt", "model_type": self.model_type}
        atomic_write(directory / WEIGHTS_FILE, lambda p: save_safetensors(state, p, metadata))
        config = {"model_type": self.model_type, "attnlab_version": __version__}
        config.update(self.config.to_dict())
        text = json.dumps(config, indent=2) + "\n"
        atomic_write(directory / CONFIG_FILE, lambda p: Path(p).write_text(text, encoding="utf-8"))

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` as one unit, and
        return the directory.

        The directory is built beside the old one, flushed to disk, and swapped in by one
        rename (:func:`attnlab._io.atomic_write_dir`): after a crash or a power loss a reader
        finds the old model or the new, never a mix. Every other file or folder of an existing
        ``directory`` (tokenizers, a job's ``job.json``, notes) is carried into the new one,
        hard-linked where the file system allows, else copied. Where the directory cannot be
        swapped (it is the working directory or a mount point, or its parent is read-only) the
        two files are replaced one after the other, each atomically. A symbolic link is
        followed: the directory it points to is replaced.

        Raises:
            NotADirectoryError: ``directory`` exists and is not a directory.
            OSError: the disk refused (naming the file, errno kept); the old model is intact.
        """
        directory = Path(directory)
        if directory.is_symlink():
            directory = directory.resolve()
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(f"{directory}: exists and is not a directory")
        if not directory.exists():
            directory.parent.mkdir(parents=True, exist_ok=True)
        elif _swap_refused(directory):
            self.write_files(directory)
            return directory

        def build(temp: Path) -> None:
            if directory.is_dir():
                _carry_over(directory, temp)
            try:
                self.write_files(temp)
            except OSError as error:  # name the model's file, not the temporary one
                failed = WEIGHTS_FILE if WEIGHTS_FILE in str(error) else CONFIG_FILE
                what = "the previous model, if any, is intact"
                raise not_written(error, directory / failed, what=what) from error

        atomic_write_dir(directory, build)
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

        Both files are checked before any memory is taken: ``config.json`` field by field
        (sizes within :data:`LOAD_LIMITS`), the weights' header against the model the config
        describes, built on the meta device (every name, dtype and shape, the total against
        the config's parameter count); then the weights are read, checked finite, and become
        the model's parameters. Errors name the file and, for weights, the key.
        """
        model_type, config = read_config(directory)
        config_path = Path(directory) / CONFIG_FILE
        if model_type != cls.model_type:
            raise ValueError(
                f"{config_path}: holds a {model_type!r} model "
                f"({_MODEL_TYPES[model_type].__name__}), not {cls.model_type!r} ({cls.__name__}); "
                f"use attnlab.load_pretrained to load any model"
            )
        path = Path(directory) / WEIGHTS_FILE
        header, _ = read_safetensors_header(path)
        with torch.device("meta"), _SkipInitOnMeta():
            model = cls(config)
        check_weights(model, header, path)
        expected = cls.parameters_for(config)
        stored = sum(info.numel for info in header.values())
        if expected is not None and stored != expected:
            raise ValueError(
                f"{path}: holds {stored:,} weights, but {config_path} describes a model of "
                f"{expected:,} parameters"
            )
        fixed = _fixed_elements(model)
        if fixed > MAX_FIXED_ELEMENTS:
            raise ValueError(
                f"{config_path}: the model would compute {fixed:,} fixed table entries (at "
                f"most {MAX_FIXED_ELEMENTS:,}); a damaged or foreign config.json?"
            )
        load_weights(model, path)
        if device is not None:
            model = model.to(device)
        return model.eval()


def load_pretrained(
    directory: str | os.PathLike[str], *, device: torch.device | str | None = None
) -> PretrainedModel:
    """Load any model written by ``save_pretrained``; its class comes from ``config.json``."""
    model_type, _ = read_config(directory)
    return _MODEL_TYPES[model_type].from_pretrained(directory, device=device)


# -- save_pretrained's directory ---------------------------------------------------------------

_TEMP_NAME = re.compile(r"^\.(config\.json|model\.safetensors)\..*\.tmp$")


def _swap_refused(directory: Path) -> bool:
    """Whether ``directory`` cannot be replaced by a rename: the working directory (or one
    above it), a mount point, or in a parent this process may not write."""
    real = directory.resolve()
    cwd = Path.cwd().resolve()
    return (
        real == cwd
        or real in cwd.parents
        or os.path.ismount(real)
        or not os.access(real.parent, os.W_OK | os.X_OK)
    )


def _carry_over(old: Path, new: Path) -> None:
    """Put every entry of ``old`` but the model's two files (and their temporaries) into
    ``new``: files hard-linked (else copied), folders and links recreated."""
    for entry in old.iterdir():
        if entry.name in (CONFIG_FILE, WEIGHTS_FILE) or _TEMP_NAME.match(entry.name):
            continue
        target = new / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno not in (errnos.EXDEV, errnos.EPERM, errnos.EMLINK, errnos.ENOTSUP):
            raise
        shutil.copy2(source, target)

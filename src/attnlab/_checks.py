"""Argument checks shared by the modules: each error names the argument and what was expected."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor


def check_positive_int(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is an int >= 1 (bools are not counts)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def check_offset(offset: object, name: str = "offset") -> None:
    """Raise ValueError unless ``offset`` is an int >= 0."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"{name}: expected a non-negative int, got {offset!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_rate(value: object, name: str) -> float:
    """Return ``value`` as a float, or raise ValueError unless it is a number in [0, 1)."""
    if not (_is_number(value) and 0 <= value < 1):
        raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    return float(value)


def check_positive_number(value: object, name: str) -> float:
    """Return ``value`` as a float, or raise ValueError unless it is a finite number > 0."""
    if not (_is_number(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    return float(value)


def shape_of(value: object) -> object:
    """What to print for an argument expected to be a tensor: its shape, else its type."""
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def dataclass_from(cls: type, data: object, what: str) -> Any:
    """``cls(**data)`` for a dataclass ``cls``, refusing a non-mapping (TypeError) and unknown
    keys (ValueError ``unknown {what} fields [...]``, with the known ones)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"data: expected a mapping of {what} fields, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown {what} fields {unknown}; known: {sorted(known)}")
    return cls(**data)


class PresetConfig:
    """What the models' config dataclasses share: checked on construction, named presets, the
    per-head width, and a JSON-ready dict form.

    A subclass is a dataclass with a ``PRESETS`` table of ``name -> {field: value}``, the fields
    ``d_model`` and ``num_heads``, and a ``validate()`` that raises ValueError naming the field.
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}

    def __post_init__(self) -> None:
        self.validate()  # type: ignore[attr-defined]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads  # type: ignore[attr-defined]

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Any:
        """A named configuration (see :meth:`preset_names`), with fields replaced by
        ``overrides``, e.g. ``TransformerConfig.preset("small", positional="rotary")``."""
        if name not in cls.PRESETS:
            raise ValueError(f"preset: unknown name {name!r}; expected one of {cls.preset_names()}")
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
        if unknown:
            raise ValueError(f"overrides: unknown config fields {unknown}")
        return cls(**{**cls.PRESETS[name], **overrides})

    @classmethod
    def preset_names(cls) -> list[str]:
        return list(cls.PRESETS)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Build from a mapping such as ``to_dict()``'s; unknown keys are an error."""
        return dataclass_from(cls, data, "config")

"""Argument checks shared by the modules: each error names the argument and what was expected.

Every module checks its arguments with these, so that one kind of mistake reads the same
everywhere: ``d_model: expected a positive int, got 0``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard, TypeVar

T = TypeVar("T")


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float, and not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: object) -> TypeGuard[int]:
    """An int, and not a bool (True is not a count). For checks whose message or exception is
    their own (a TypeError, an API's error); otherwise :func:`check_int`."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_type(value: object, kind: type[T] | tuple[type[T], ...], name: str, expected: str) -> T:
    """Return ``value``, or raise TypeError unless it is an instance of ``kind``:
    ``config: expected a TrainConfig, got dict`` (``expected`` says what was wanted)."""
    if not isinstance(value, kind):
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")
    return value


def check_choice(value: object, choices: Iterable[str], name: str, *, none: bool = False) -> Any:
    """``value`` if it is one of ``choices`` (or None, with ``none``), else ValueError:
    ``lang: expected one of en, zh, got 'fr'`` (``... or None, got ...`` with ``none``)."""
    options = list(choices)
    if (none and value is None) or value in options:
        return value
    alternative = " or None" if none else ""
    raise ValueError(f"{name}: expected one of {', '.join(options)}{alternative}, got {value!r}")


def _int_kind(minimum: int | None, plain: bool) -> str:
    if minimum is None:
        return "an int"
    if not plain and minimum in (0, 1):
        return "a positive int" if minimum == 1 else "a non-negative int"
    return f"an int >= {minimum}"


def check_int(value: object, name: str, *, minimum: int | None = 1, plain: bool = False) -> int:
    """Return ``value``, or raise ValueError unless it is an int >= ``minimum`` (bools are not
    counts). Minimum 1 reads "a positive int", 0 "a non-negative int", any other (and every
    minimum when ``plain``) "an int >= minimum"; None: any int, "an int"."""
    if not is_int(value) or (minimum is not None and value < minimum):
        raise ValueError(f"{name}: expected {_int_kind(minimum, plain)}, got {value!r}")
    return value


def check_optional_int(
    value: object, name: str, *, minimum: int | None = 1, plain: bool = False
) -> int | None:
    """:func:`check_int`, but None passes too (the message says so: "a positive int or
    None")."""
    if value is None or (is_int(value) and (minimum is None or value >= minimum)):
        return value
    raise ValueError(f"{name}: expected {_int_kind(minimum, plain)} or None, got {value!r}")


def check_positive_int(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is an int >= 1 (bools are not counts)."""
    check_int(value, name, minimum=1)


def check_offset(offset: object, name: str = "offset") -> None:
    """Raise ValueError unless ``offset`` is an int >= 0."""
    check_int(offset, name, minimum=0)


def check_bool(value: object, name: str, error: type[Exception] = ValueError) -> bool:
    """Return ``value``, or raise ``error`` unless it is a bool (0 and 1 are not)."""
    if not isinstance(value, bool):
        raise error(f"{name}: expected a bool, got {value!r}")
    return value


def check_rate(value: object, name: str) -> float:
    """Return ``value`` as a float, or raise ValueError unless it is a number in [0, 1)."""
    if not (is_number(value) and 0 <= value < 1):
        raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    return float(value)


def check_positive_number(value: object, name: str) -> float:
    """Return ``value`` as a float, or raise ValueError unless it is a finite number > 0."""
    if not (is_number(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    return float(value)


def shape_of(value: object) -> object:
    """What to print for an argument expected to be a tensor: its shape, else its type."""
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported
    is_tensor = torch is not None and isinstance(value, torch.Tensor)
    return tuple(value.shape) if is_tensor else type(value).__name__  # type: ignore[attr-defined]


def brief(value: object) -> str:
    """``repr(value)`` for a message, cut to 60 characters (the last three ``...``)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def dataclass_from(cls: type, data: object, what: str) -> Any:
    """``cls(**data)`` for a dataclass ``cls``, refusing a non-mapping (TypeError) and unknown
    keys (ValueError, see :func:`check_keys`)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"data: expected a mapping of {what} fields, got {type(data).__name__}")
    check_keys(data, [f.name for f in dataclasses.fields(cls)], what)
    return cls(**data)


def check_keys(data: Mapping[str, object], known: Iterable[str], what: str) -> None:
    """Raise ValueError ``unknown {what} fields [...]`` unless every key of ``data`` is one of
    ``known``; with the nearest known key when one is close (``did you mean``), else the
    known ones."""
    known = sorted(known)
    unknown = sorted(set(data) - set(known))
    if not unknown:
        return
    near = closest(unknown[0], known) if len(unknown) == 1 else None
    hint = f"did you mean {near!r}?" if near else f"known: {known}"
    raise ValueError(f"unknown {what} fields {unknown}; {hint}")


def closest(name: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` nearest to ``name`` when it is close (a likely typo), else None."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return close[0] if close else None

"""Argument checks shared by the modules: each error names the argument and what was expected."""

from __future__ import annotations


def check_positive_int(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is an int >= 1 (bools are not counts)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def check_offset(offset: object, name: str = "offset") -> None:
    """Raise ValueError unless ``offset`` is an int >= 0."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"{name}: expected a non-negative int, got {offset!r}")

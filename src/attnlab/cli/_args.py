"""Argument types that several command groups use."""

from __future__ import annotations

import argparse


def parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 4,2, got {text!r}"
        ) from None
    if not lengths or min(lengths) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative lengths, got {text!r}")
    return lengths


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value

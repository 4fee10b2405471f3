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


#: ``--device``: the same choices, default and help on every command that runs a model.
DEVICE_CHOICES = ("auto", "cpu", "cuda")
DEVICE_HELP = "auto (default): CUDA when available, else cpu"


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--device`` flag (default None: ``auto``, or for ``train``
    the job's ``[train] device``)."""
    parser.add_argument("--device", choices=DEVICE_CHOICES, default=None, help=DEVICE_HELP)


def device_of(value: str | None) -> str:
    """The device ``--device VALUE`` names: ``cpu`` or ``cuda`` (None and ``auto``: CUDA when
    available). ValueError naming --device when CUDA is asked for but not available."""
    import torch

    if value in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if value == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--device: cuda was asked for, but CUDA is not available on this machine "
            "(torch.cuda.is_available() is False); use --device cpu or auto"
        )
    if value not in DEVICE_CHOICES:
        raise ValueError(f"--device: expected one of {', '.join(DEVICE_CHOICES)}, got {value!r}")
    return value

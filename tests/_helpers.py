"""Builders that several test files share (imported, never copied): the tests' tiny config,
random token ids and padded prompt batches. A helper that one file alone uses stays in it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from attnlab import TransformerConfig

#: The tiny preset's special ids: pad, bos, eos.
PAD, BOS, EOS = 0, 1, 2
#: The first id that is no special token.
FIRST_ID = 3


def tiny(**overrides: object) -> TransformerConfig:
    """The tests' preset, without dropout unless asked (so that outputs are deterministic)."""
    return TransformerConfig.preset("tiny", **{"dropout": 0.0, **overrides})


def token_ids(batch: int, length: int, seed: int, vocab: int = 1000) -> Tensor:
    """``(batch, length)`` random ids that are never pad / bos / eos."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_ID, vocab, (batch, length), generator=g)


def right_padded(rows: list[list[int]], pad: int = PAD) -> Tensor:
    """``rows`` as one ``(B, T)`` batch, each padded at its end."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])


def left_padded(rows: list[list[int]], pad: int = PAD) -> Tensor:
    """``rows`` as one ``(B, T)`` batch, each padded at its start (prompts that end together)."""
    width = max(len(r) for r in rows)
    return torch.tensor([[pad] * (width - len(r)) + r for r in rows])


def subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (sub)command of ``parser`` as ``("viz attention", its parser)``, at any depth:
    walked from argparse's own structures, not from what the CLI's reference generator says."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from subcommands(sub, f"{prefix}{name} ")

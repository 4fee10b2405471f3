"""``attnlab masks``: the attention masks of a padded batch, printed as 0/1 grids (the tour
draws one the same way: :func:`grid`)."""

from __future__ import annotations

import argparse
import sys

import torch

from ..nn.masks import causal_mask, combine_masks, key_mask, padding_mask
from ._args import add_mask_flags, check_pad_to


def grid(mask: torch.Tensor) -> str:
    """A 2-D bool mask as a 0/1 grid: rows are queries, columns keys."""
    rows, cols = mask.shape
    width = len(str(cols - 1))
    margin = len(f"query {rows - 1}") + 4
    lines = ["keys".rjust(margin) + " " + " ".join(f"{j:>{width}}" for j in range(cols))]
    for i in range(rows):
        cells = " ".join(f"{int(v):>{width}}" for v in mask[i].tolist())
        lines.append(f"query {i}".rjust(margin) + " " + cells)
    return "\n".join(lines)


def cmd_masks(args: argparse.Namespace) -> int:
    lengths = args.lengths
    check_pad_to(lengths, args.pad_to)
    padded = padding_mask(lengths, args.pad_to)
    t = padded.shape[1]
    if t == 0:
        print("error: every length is 0, nothing to draw", file=sys.stderr)
        return 2
    masks = key_mask(padded).expand(-1, -1, t, t)  # (B, 1, T, T)
    title = "key padding"
    if args.causal:
        masks = combine_masks(masks, causal_mask(t))
        title = "key padding AND look-ahead (causal)"
    for b, length in enumerate(lengths):
        print(f"sequence {b}: length {length}, padded to {t}")
        print(f"  padding mask (1 = real token): {padded[b].int().tolist()}")
        print(f"  attention mask, {title} (1 = may attend):")
        print("    " + grid(masks[b, 0]).replace("\n", "\n    "))
        print()
    return 0


def add_parsers(sub) -> None:
    masks = sub.add_parser(
        "masks",
        help="print padding and look-ahead masks as 0/1 grids",
        description=(
            "Print the attention masks of a padded batch (1 = may attend): key padding, and "
            "with --causal (the default) key padding AND look-ahead; `attnlab viz masks` draws "
            "the same masks."
        ),
    )
    add_mask_flags(masks)
    masks.set_defaults(func=cmd_masks)

"""The tutorial's claims, run: each one measured on attnlab's own modules, checked, and written
into a Markdown report with its figures (``attnlab explain --out DIR``).

One section per claim of the tutorial (the points T1..T12 of ``seed/DIGEST.md``) and the
paper's Table 1; each section states the claim, what was run, the numbers, and the checks that
decide it. :func:`explain` returns the sections; a failed check fails its section.

* T3: why scores are divided by sqrt(d_k): softmax entropy and gradient against d_k.
* T5, T6: the cost of multi-head attention against the head count, and the single- vs
  multi-head experiment (the whole difference is W^O).
* T7: without positional information self-attention is permutation-equivariant.
* T10, T11: masked weights are exactly 0; the decoder cannot see the future.
* T12: the two masking styles (scores set to -inf vs a mask vector in the input).
* Table 1 (Vaswani et al. 2017): per-layer cost of self-attention, recurrent and convolutional
  layers, counted and timed, n = 16 .. 4096 at d = 512.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from .._io import atomic_write
from .attention import heads_claim, scaling_claim
from .order_and_masks import masking_styles_claim, masks_claim, order_claim
from .section import Section
from .table1 import table1_claim

__all__ = ["REPORT", "SECTIONS", "Section", "explain"]

REPORT = "report.md"
SECTIONS = (
    scaling_claim,
    heads_claim,
    order_claim,
    masks_claim,
    masking_styles_claim,
    table1_claim,
)


def explain(
    out_dir: str | Path,
    *,
    quick: bool = False,
    seed: int = 0,
    progress: Callable[[Section], None] | None = None,
) -> list[Section]:
    """Run every claim, write ``report.md`` and the figures into ``out_dir`` (created), and
    return the sections (``Section.passed`` says whether each claim held). ``quick`` runs
    smaller experiments (Table 1 up to n = 1024); ``progress`` is called after each section."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    sections = []
    for run in SECTIONS:
        section = run(out, quick, gen)
        sections.append(section)
        if progress is not None:
            progress(section)
    passed = sum(s.passed for s in sections)
    head = [
        "# The tutorial's claims, run",
        "",
        f"attnlab checked {len(sections)} claims of the tutorial and the paper on its own "
        f"modules: {passed} held, {len(sections) - passed} failed"
        f"{' (quick run)' if quick else ''}; seed {seed}, torch {torch.__version__}.",
        "",
        *(f"- {s.key}: {s.title}: **{'PASS' if s.passed else 'FAIL'}**" for s in sections),
        "",
    ]
    text = "\n".join(head) + "\n" + "\n".join(s.markdown() for s in sections)
    atomic_write(out / REPORT, lambda p: Path(p).write_text(text, encoding="utf-8"))
    return sections

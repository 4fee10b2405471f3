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

The report is written in English (``report.md``) and, with ``lang="zh"``, also in Chinese, the
tutorial's language (``report.zh.md``, from the same run: the same numbers, checks and figures;
only the prose differs, see :mod:`.section`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..._io import atomic_write
from .attention import heads_claim, scaling_claim
from .order_and_masks import masking_styles_claim, masks_claim, order_claim
from .section import LANGS, Prose, Section, check_lang, in_lang
from .table1 import table1_claim

__all__ = [
    "LANGS",
    "REPORT",
    "REPORTS",
    "SECTIONS",
    "Prose",
    "Section",
    "explain",
    "in_lang",
    "render",
]

REPORT = "report.md"
#: The report's file name in each language; figures are shared.
REPORTS = {"en": REPORT, "zh": "report.zh.md"}
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
    lang: str = "en",
) -> list[Section]:
    """Run every claim, write ``report.md`` and the figures into ``out_dir`` (created), and
    return the sections (``Section.passed`` says whether each claim held). ``quick`` runs
    smaller experiments (Table 1 up to n = 1024); ``progress`` is called after each section.
    ``lang="zh"`` also writes the report in Chinese, ``report.zh.md``, beside the English one:
    both from this run, so they state the same numbers and verdicts."""
    lang = check_lang(lang)
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
    for language in dict.fromkeys(("en", lang)):  # English always; the other beside it
        _write(out / REPORTS[language], render(sections, language, quick=quick, seed=seed))
    return sections


def _write(path: Path, text: str) -> None:
    atomic_write(path, lambda temp: Path(temp).write_text(text, encoding="utf-8"))


def render(sections: list[Section], lang: str = "en", *, quick: bool = False, seed: int = 0) -> str:
    """The Markdown report of ``sections`` (as :func:`explain` returns them) in ``lang``, one of
    :data:`LANGS`: a summary of the verdicts, then each section. ``quick`` and ``seed`` are
    those of the run, for the summary line."""
    lang = check_lang(lang)
    passed = sum(s.passed for s in sections)
    failed = len(sections) - passed
    summary = Prose(
        f"attnlab checked {len(sections)} claims of the tutorial and the paper on its own "
        f"modules: {passed} held, {failed} failed{' (quick run)' if quick else ''}; "
        f"seed {seed}, torch {torch.__version__}.",
        f"attnlab 用自己的模块检验了教程和论文中的 {len(sections)} 条论断：{passed} 条成立，"
        f"{failed} 条不成立{'（快速运行）' if quick else ''}；seed {seed}，torch "
        f"{torch.__version__}。",
    )
    head = [
        in_lang(Prose("# The tutorial's claims, run", "# 教程中的论断，逐条运行检验"), lang),
        "",
        in_lang(summary, lang),
        "",
    ]
    if lang == "zh":
        head += [
            "这份报告由 `attnlab explain --lang zh` 生成：每条论断都在 attnlab 自己的模块上实际"
            "运行、计数并检验；编号对应原教程的要点。图中的坐标轴标签和标题是英文的（这样不需要"
            "中文字体）；同一次运行的英文报告见 [report.md](report.md)。",
            "",
        ]
    head += [
        f"- {s.key}: {in_lang(s.title, lang)}: **{'PASS' if s.passed else 'FAIL'}**"
        for s in sections
    ]
    return "\n".join([*head, ""]) + "\n" + "\n".join(s.markdown(lang) for s in sections)

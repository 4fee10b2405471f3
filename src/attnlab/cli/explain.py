"""``attnlab explain``: the tutorial's claims run as experiments, into a Markdown report with
figures (:mod:`attnlab.instruments.explain`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import add_out_flag, add_seed_flag


def cmd_explain(args: argparse.Namespace) -> int:
    from ..instruments.explain import REPORT, REPORTS, explain, in_lang

    print(
        f"Running the tutorial's claims{' (quick)' if args.quick else ''}; report and figures "
        f"go to {args.out}/",
        flush=True,
    )

    def show(section) -> None:
        title = in_lang(section.title, args.lang)
        print(f"  {'PASS' if section.passed else 'FAIL'}  {section.key}: {title}")
        for text, ok in section.checks:
            if not ok:
                print(f"        failed: {in_lang(text, args.lang)}")

    sections = explain(args.out, quick=args.quick, seed=args.seed, progress=show, lang=args.lang)
    failed = [s.key for s in sections if not s.passed]
    held = len(sections) - len(failed)
    report = Path(args.out) / REPORTS[args.lang]
    english = f" (English: {Path(args.out) / REPORT})" if args.lang != "en" else ""
    print(f"\n{held}/{len(sections)} claims held. Report: {report}{english}")
    return 1 if failed else 0


def add_parsers(sub) -> None:
    explain = sub.add_parser(
        "explain",
        help="run the tutorial's claims as experiments; write a Markdown report with figures",
        description=(
            "Run each claim of the tutorial (T3 scaling, T5/T6 heads and FLOPs, T7 order, "
            "T10/T11 masks, T12 masking styles) and the paper's Table 1 on attnlab's modules, "
            "check it, and write report.md with its figures into --out (with --lang zh, also "
            "report.zh.md: the same run in Chinese, the tutorial's language). Exits 1 if a claim "
            "fails."
        ),
    )
    add_out_flag(explain, "the directory for report.md and its figures; required", required=True)
    explain.add_argument(
        "--quick", action="store_true", help="smaller experiments (Table 1 up to n = 1024)"
    )
    add_seed_flag(explain)
    explain.add_argument(
        "--lang",
        choices=("en", "zh"),
        default="en",
        help="language of the report: en writes report.md; zh writes report.zh.md (Chinese, "
        "the tutorial's language) beside report.md, both from the same run (default en)",
    )
    explain.set_defaults(func=cmd_explain)

"""The two engines' beam search on one trained translation recipe (issue 59 item 3): how far
CTranslate2's beam must run for attnlab's length penalty to pick the same outputs, chosen on the
validation split, and then both engines' BLEU on validation and test.

attnlab's beam ranks finished hypotheses by GNMT's ``log P / ((5 + |Y|) / 6) ** alpha``;
CTranslate2's by ``log P / |Y| ** lp``. The ctranslate2 engine therefore lets CTranslate2
collect ``patience`` times the beam in finished hypotheses and ranks them itself by the
decoding's ``alpha`` (:data:`attnlab.inference.engines.PATIENCE`). Both searches extend and
finish hypotheses alike, so what a small patience loses is a best output that the torch
engine's search finished later. Each value of ``--patiences`` decodes the validation split; the
smallest that gives the most outputs equal to the torch engine's is the choice, and the library's
``PATIENCE`` must be it (a test holds them together). The test split is then scored once, on
both engines, at the recipe's ``[eval]``.

    python tools/engine_parity.py runs/multi30k-en-de [--patiences 1 1.5 2]
        [--out benchmarks/results/engine_multi30k.json]

The goal, printed with PASS or FAIL and never asserted: BLEU on both splits within ``--goal``
(0.2) of the torch engine's.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path
from typing import Any

import attnlab
import attnlab.inference.engines as engines
from attnlab._io import write_json
from attnlab._rundir import read_job_file
from attnlab.jobs import Job, evaluate_model

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "engine_multi30k.json"
PATIENCES = (1.0, 1.5, 2.0)
GOAL = 0.2
ALL = 10**9  # examples: every hypothesis, in the split's order


def choose_patience(rows: list[dict[str, Any]]) -> float:
    """The smallest patience among the rows with the most outputs equal to the torch engine's."""
    most = max(row["same"] for row in rows)
    return min(row["patience"] for row in rows if row["same"] == most)


def _decode(model: Path, split: str, job: Job, corpus: Any, engine: str) -> dict[str, Any]:
    result = evaluate_model(model, split=split, corpus=corpus, job=job, engine=engine, examples=ALL)
    result["outputs"] = [example["hypothesis"] for example in result["examples"]]
    return result


def _same(a: dict[str, Any], b: dict[str, Any]) -> int:
    return sum(x == y for x, y in zip(a["outputs"], b["outputs"], strict=True))


def _scores(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result.get(k) for k in ("bleu", "chrf", "bleu_tokenized", "sentences")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory (attnlab train --out)")
    parser.add_argument(
        "--patiences", type=float, nargs="+", default=list(PATIENCES), help="(1 1.5 2)"
    )
    parser.add_argument("--goal", type=float, default=GOAL, help="BLEU difference allowed (0.2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the results file")
    args = parser.parse_args(argv)
    if not (args.run / "model" / "job.json").is_file():
        parser.error(f"run: {args.run} holds no model/job.json (not an `attnlab train` run)")
    if any(p < 1 for p in args.patiences):
        parser.error(f"--patiences: expected numbers >= 1, got {args.patiences}")
    job = Job.from_dict(read_job_file(args.run / "model"))
    decoding = job.eval.decoding
    if decoding.beam_size == 1:
        parser.error(f"run: {args.run} decodes greedily ([eval] beam_size 1): no beam to rank")
    corpus, model = job.task.load(), args.run / "model"
    results = {"valid": {"torch": _decode(model, "valid", job, corpus, "torch")}}
    sweep, decoded = [], {}
    for patience in args.patiences:
        engines.PATIENCE = patience
        decoded[patience] = found = _decode(model, "valid", job, corpus, "ctranslate2")
        row = {"patience": patience, "same": _same(found, results["valid"]["torch"])}
        sweep.append(row | {"bleu": found["bleu"]})
        print(f"valid: patience {patience:g}: {row['same']} of {found['sentences']} the same")
    patience = choose_patience(sweep)
    engines.PATIENCE = patience
    print(f"valid: patience {patience:g} chosen (beam {decoding.beam_size})", flush=True)
    results["valid"]["ctranslate2"] = decoded[patience]
    results["test"] = {e: _decode(model, "test", job, corpus, e) for e in engines.ENGINES}
    scores: dict[str, dict[str, Any]] = {}
    for split, found in results.items():
        scores[split] = {e: _scores(r) for e, r in found.items()}
        scores[split]["same"] = _same(found["torch"], found["ctranslate2"])
        for engine, result in found.items():
            print(f"{split:>5} {engine:>11}: BLEU {result['bleu']:.2f} chrF {result['chrf']:.2f}")
    differences = {s: scores[s]["ctranslate2"]["bleu"] - scores[s]["torch"]["bleu"] for s in scores}
    met = all(abs(d) <= args.goal for d in differences.values())
    for split, d in differences.items():
        print(f"{split}: ctranslate2 - torch = {d:+.2f} BLEU, {scores[split]['same']} the same")
    print(f"goal: |difference| <= {args.goal} on both splits: {'PASS' if met else 'FAIL'}")
    write_json(
        args.out,
        {
            "date": datetime.date.today().isoformat(),
            "machine": platform.processor() or platform.machine(),
            "attnlab": attnlab.__version__,
            "run": args.run.name,
            "task": job.task.name,
            "beam_size": decoding.beam_size,
            "alpha": decoding.alpha,
            "sweep": sweep,
            "patience": patience,
            "scores": scores,
            "differences": differences,
            "goal": args.goal,
            "met": met,
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The two engines' beam search on one trained translation recipe (issue 59 item 3): choose the
ctranslate2 engine's length penalty on the validation split, then score the recipe's model with
both engines on validation and test.

attnlab's beam ranks finished hypotheses by GNMT's ``log P / ((5 + |Y|) / 6) ** alpha``;
CTranslate2 by ``log P / |Y| ** lp``, where ``|Y|`` counts the end-of-sentence token. The same
``alpha`` does not mean the same ranking, so each recipe's ``ct2_length_penalty`` is chosen
the way its ``alpha`` was: on validation only, the best BLEU over ``--lps`` at the recipe's own
beam size (the first listed value wins a tie). The test split is then scored once, with the
choice, on both engines, beside the torch engine at the recipe's ``[eval]``.

    python tools/engine_parity.py runs/multi30k-en-de [--lps 0.6 0.8 1.0 1.2 1.4 1.6]
        [--record] [--out benchmarks/results/engine_multi30k.json]

``--record`` writes the chosen value into the ``[eval]`` of RUN/model/job.json (and
RUN/best/job.json where there is one), beside ``alpha``, so ``attnlab translate --engine
ctranslate2 --model RUN/model`` decodes with it. The goal, printed with PASS or FAIL and never
asserted: BLEU on both splits within ``--goal`` (0.2) of the torch engine's.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import platform
import sys
from pathlib import Path
from typing import Any

import attnlab
from attnlab._io import read_json, write_json
from attnlab._rundir import read_job_file
from attnlab.jobs import Job, evaluate_model

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "engine_multi30k.json"
LPS = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6)
GOAL = 0.2


def _choose_decoding():
    spec = importlib.util.spec_from_file_location(
        "choose_decoding", Path(__file__).parent / "choose_decoding.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def choose_lp(rows: list[dict[str, Any]]) -> float:
    """The length penalty of the row with the best BLEU (the first such row on a tie)."""
    best = max(row["bleu"] for row in rows)
    return next(row["alpha"] for row in rows if row["bleu"] == best)


def _scores(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result.get(k) for k in ("bleu", "chrf", "bleu_tokenized", "sentences")}


def record(run: Path, lp: float) -> list[str]:
    """Write ``ct2_length_penalty = lp`` into the ``[eval]`` of the run's model directories."""
    written = []
    for name in ("model", "best"):
        path = run / name / "job.json"
        if path.is_file():
            job = read_json(path)
            job["eval"]["ct2_length_penalty"] = lp
            write_json(path, job)
            written.append(str(path))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory (attnlab train --out)")
    parser.add_argument("--lps", type=float, nargs="+", default=list(LPS), help="(0.6 .. 1.6)")
    parser.add_argument("--goal", type=float, default=GOAL, help="BLEU difference allowed (0.2)")
    parser.add_argument("--record", action="store_true", help="write the choice into the run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the results file")
    args = parser.parse_args(argv)
    if not (args.run / "model" / "job.json").is_file():
        parser.error(f"run: {args.run} holds no model/job.json (not an `attnlab train` run)")
    if any(lp < 0 for lp in args.lps):
        parser.error(f"--lps: expected numbers >= 0, got {args.lps}")
    job = Job.from_dict(read_job_file(args.run / "model"))
    decoding = job.eval.decoding
    if decoding.beam_size == 1:
        parser.error(f"run: {args.run} decodes greedily ([eval] beam_size 1): no length penalty")
    corpus = job.task.load()
    model = args.run / "model"
    sweep = _choose_decoding().score_run(
        args.run, "valid", [decoding.beam_size], args.lps, ["model"], "ctranslate2"
    )
    lp = choose_lp(sweep)
    print(f"valid: ct2_length_penalty {lp} chosen (beam {decoding.beam_size})", flush=True)
    engines = {"torch": decoding, "ctranslate2": decoding.updated(ct2_length_penalty=lp)}
    scores: dict[str, dict[str, Any]] = {}
    for split in ("valid", "test"):
        scores[split] = {}
        for engine, options in engines.items():
            result = evaluate_model(
                model, split=split, corpus=corpus, job=job, decoding=options, engine=engine
            )
            scores[split][engine] = _scores(result)
            print(f"{split:>5} {engine:>11}: BLEU {result['bleu']:.2f} chrF {result['chrf']:.2f}")
    differences = {s: scores[s]["ctranslate2"]["bleu"] - scores[s]["torch"]["bleu"] for s in scores}
    met = all(abs(d) <= args.goal for d in differences.values())
    for split, d in differences.items():
        print(f"{split}: ctranslate2 - torch = {d:+.2f} BLEU")
    print(f"goal: |difference| <= {args.goal} on both splits: {'PASS' if met else 'FAIL'}")
    written = record(args.run, lp) if args.record else []
    for path in written:
        print(f"recorded ct2_length_penalty {lp} in {path}")
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
            "sweep": [
                {"ct2_length_penalty": r["alpha"], "bleu": r["bleu"], "chrf": r["chrf"]}
                for r in sweep
            ],
            "ct2_length_penalty": lp,
            "scores": scores,
            "differences": differences,
            "goal": args.goal,
            "met": met,
            "recorded": bool(written),
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

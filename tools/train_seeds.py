"""Train one recipe over several seeds, a few runs at a time, and tabulate what they scored: the
mean, spread and range that a README's seed table reports.

Each seed trains as its own ``attnlab train --config CONFIG --seed S --out OUT/seedS`` process
with ``--threads`` torch threads (``OMP_NUM_THREADS``), ``--jobs`` of them at once. On 2 cores two
1-thread runs side by side trained as many tokens a second between them as one 2-thread run
(Multi30K, d_model 128, 2026-12-01), and both finish together; the recipe being bounded by
steps, the models do not depend on how the cores were shared (only on the thread count, which
changes the rounding).

A rerun picks up where it stopped: a seed whose ``results.json`` exists is reported, not
retrained; one killed after a checkpoint resumes from it (``--resume``); one killed before its
first checkpoint starts over. Each run's output goes to ``OUT/seedS.log``; the table goes to
standard output and, with the runs' own numbers, to ``OUT/seeds.json``.

Run::

    .venv/bin/python tools/train_seeds.py --config configs/multi30k-en-de.toml \\
        --out runs/multi30k-seeds --seeds 0 1 2 --jobs 2 --threads 1 -- --max-minutes 170

Arguments after ``--`` go to every ``attnlab train`` (there, ``--max-minutes 170`` lifts the
recipe's 60-minute cap, which two runs sharing 2 cores would otherwise reach).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from attnlab._io import write_json

RESULTS = "results.json"
# The scores a results.json may hold, in the order a table shows them (bleu_tokenized: the
# literature's variant, lowercased and Moses-tokenised, where the task names a target language).
SCORES = ("bleu", "bleu_tokenized", "chrf", "exact_match", "accuracy", "perplexity")


def command(config: Path, seed: int, out: Path, extra: list[str]) -> list[str]:
    """``attnlab train`` for ``seed`` into ``out``: fresh, resumed from its last checkpoint, or
    started over when a killed run left no checkpoint."""
    argv = [sys.executable, "-m", "attnlab", "train", "--config", str(config)]
    argv += ["--seed", str(seed), "--out", str(out), "--no-progress"]
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        argv.append("--resume")
    elif out.exists():
        argv.append("--overwrite")
    return argv + extra


def run_seeds(
    config: Path, seeds: list[int], out: Path, jobs: int, threads: int, extra: list[str]
) -> dict[int, int]:
    """Train every seed without a ``results.json``, ``jobs`` at a time; ``{seed: exit code}``."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    waiting = [s for s in seeds if not (out / f"seed{s}" / RESULTS).is_file()]
    for seed in seeds:
        if seed not in waiting:
            print(f"seed {seed}: already trained ({out / f'seed{seed}' / RESULTS})", flush=True)
    running: dict[int, tuple[subprocess.Popen[bytes], float, Any]] = {}
    codes: dict[int, int] = {}
    while waiting or running:
        while waiting and len(running) < jobs:
            seed = waiting.pop(0)
            argv = command(config, seed, out / f"seed{seed}", extra)
            log = open(out / f"seed{seed}.log", "ab")  # noqa: SIM115 (closed when it ends)
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
            running[seed] = (process, time.monotonic(), log)
            print(
                f"seed {seed}: training ({' '.join(argv[3:])}), {threads} thread(s), "
                f"log {out / f'seed{seed}.log'}",
                flush=True,
            )
        time.sleep(0.2)
        for seed, (process, start, log) in list(running.items()):
            if process.poll() is None:
                continue
            log.close()
            del running[seed]
            codes[seed] = process.returncode
            minutes = (time.monotonic() - start) / 60
            state = "done" if process.returncode == 0 else f"FAILED (exit {process.returncode})"
            print(f"seed {seed}: {state} after {minutes:.1f} min", flush=True)
    return codes


def row_of(seed: int, run: Path) -> dict[str, Any]:
    """One seed's scores and training figures, from its ``results.json``."""
    results = json.loads((run / RESULTS).read_text(encoding="utf-8"))
    training = results.get("training", {})
    row: dict[str, Any] = {"seed": seed, "run": str(run), "split": results.get("split")}
    row.update({name: results[name] for name in SCORES if results.get(name) is not None})
    row["steps"] = training.get("steps")
    row["epochs"] = training.get("epochs")
    row["training_minutes"] = training["elapsed_s"] / 60 if "elapsed_s" in training else None
    row["stop_reason"] = training.get("stop_reason")
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{score: {"mean", "sd", "min", "max"}}`` over the seeds (sd: the sample's, 0 for one)."""
    summary = {}
    for name in SCORES:
        values = [row[name] for row in rows if name in row]
        if len(values) == len(rows) and values:
            summary[name] = {
                "mean": statistics.fmean(values),
                "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
                "min": min(values),
                "max": max(values),
            }
    return summary


def shown(name: str, value: float) -> str:
    """A score as a table shows it: fractions as percentages, the rest to 2 decimals."""
    return f"{value:.1%}" if name in ("exact_match", "accuracy") else f"{value:.2f}"


def table(rows: list[dict[str, Any]], summary: dict[str, dict[str, float]]) -> str:
    """The rows and their summary as a Markdown table."""
    names = [name for name in SCORES if name in summary]
    lines = [
        "| seed | " + " | ".join(names) + " | steps (epochs) | training minutes | stop |",
        "|---" * (len(names) + 4) + "|",
    ]
    for row in rows:
        scores = " | ".join(shown(name, row[name]) for name in names)
        epochs = f" ({row['epochs']:.1f})" if row["epochs"] is not None else ""
        minutes = f"{row['training_minutes']:.1f}" if row["training_minutes"] is not None else "?"
        lines.append(
            f"| {row['seed']} | {scores} | {row['steps']:,}{epochs} | {minutes} | "
            f"{row['stop_reason']} |"
        )
    spread = " | ".join(
        f"{shown(name, s['mean'])} ± {shown(name, s['sd'])} "
        f"({shown(name, s['min'])}-{shown(name, s['max'])})"
        for name, s in ((name, summary[name]) for name in names)
    )
    lines.append(f"| mean ± sd (range) | {spread} | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the recipe (TOML)")
    parser.add_argument("--out", type=Path, required=True, help="runs go to OUT/seedS")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="(0 1 2)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads a run (1)")
    args = parser.parse_args(argv)
    if not args.config.is_file():
        parser.error(f"--config: {args.config}: no such file")
    if args.jobs < 1 or args.threads < 1:
        parser.error(f"--jobs/--threads: expected >= 1, got {args.jobs} and {args.threads}")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds: expected distinct seeds, got {args.seeds}")
    args.out.mkdir(parents=True, exist_ok=True)
    codes = run_seeds(args.config, args.seeds, args.out, args.jobs, args.threads, extra)
    failed = sorted(seed for seed, code in codes.items() if code != 0)
    for seed in failed:
        print(f"seed {seed}: see {args.out / f'seed{seed}.log'}", file=sys.stderr)
    done = [s for s in args.seeds if (args.out / f"seed{s}" / RESULTS).is_file()]
    if not done:
        return 1
    rows = [row_of(seed, args.out / f"seed{seed}") for seed in done]
    summary = summarise(rows)
    print(f"\n{args.config} over seeds {done} ({rows[0]['split']} split):")
    print(table(rows, summary))
    write_json(
        args.out / "seeds.json",
        {"config": str(args.config), "rows": rows, "summary": summary, "extra": extra},
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

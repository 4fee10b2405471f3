"""The teachers' decoding on 1 process and on several (issue 58 item 2): the same `[distill]`
job run plainly and under ``torchrun``, each process on 1 torch thread, each run with a cache of
its own; the decoding's wall time from each student's ``results.json``, and the two corpora
compared byte for byte.

    python benchmarks/distill_processes.py [--teacher runs/numbers/model] [--sources 9000]
        [--beam 4] [--chunk-size 500] [--processes 2] [--quick]
        [--out benchmarks/results/distill_processes.json]

The job: the numbers task with ``--sources`` training pairs (test and validation 500 each),
``--teacher`` (a numbers model: ``make demo`` trains ``runs/numbers``) decoding every training
source with beam ``--beam`` in chunks of ``--chunk-size``, and a tiny student trained for 2
steps (its training is not what is timed). Reported: ``decode_wall_seconds`` (the run's clock
from the start of decoding to its last chunk, as rank 0 sees it: the others' chunks included),
the chunks' summed ``decode_seconds``, the ratio of the processes' wall time to the single
process's, the issue's goal (at most 0.62x for 2 processes; printed with PASS or FAIL, never
asserted), and whether the corpora are equal (the exit status is 1 if not). ``--quick``: 1,000
sources in chunks of 100, for the smoke test. Run it alone on the machine: it times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import attnlab
from common import cpu_model, write_json

DEFAULT_OUT = Path(__file__).parent / "results" / "distill_processes.json"
#: The issue's goal for 2 processes of 1 thread against 1 process of 1 thread.
GOAL = 0.62


def job(teacher: str, sources: int, beam: int, chunk_size: int) -> str:
    """The student's job file (TOML): numbers, ``sources`` training pairs, one teacher."""
    return f"""
[task]
name = "numbers"
high = {sources + 999}
valid_size = 500
test_size = 500

[tokenizer]
vocab_size = 300

[model]
preset = "small"
d_model = 32
d_ff = 64
num_heads = 2
num_encoder_layers = 1
num_decoder_layers = 1

[train]
max_steps = 2
warmup = 1
eval_every = 2
checkpoint_every = 2
average_last = 1
max_tokens = 512

[eval]
beam_size = 1
bleu_sentences = 0

[distill]
teachers = [{json.dumps(str(Path(teacher).resolve()))}]
beam_size = {beam}
chunk_size = {chunk_size}
"""


def run(config: Path, out: Path, cache: Path, processes: int) -> dict:
    """``attnlab train`` of ``config`` on ``processes`` processes of 1 thread: its
    ``results.json``'s corpus record, the wall time of the whole command, and the corpus."""
    env = dict(os.environ, ATTNLAB_CACHE=str(cache), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    train = ["attnlab", "train", "--config", str(config), "--out", str(out), "--no-progress"]
    if processes == 1:
        command = [sys.executable, "-m", *train]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += ["--nproc_per_node", str(processes), "-m", *train]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    (made,) = results["distill"]["corpora"]
    corpus = Path(made["directory"])
    return {
        "processes": made["processes"],
        "pairs": made["pairs"],
        "decode_wall_seconds": made["decode_wall_seconds"],
        "decode_seconds_summed": round(made["decode_seconds"], 3),
        "command_seconds": round(seconds, 2),
        "corpus": {name: (corpus / name).read_bytes() for name in ("src.txt", "tgt.txt")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default="runs/numbers/model")
    parser.add_argument("--sources", type=int, default=9000)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--chunk-size", type=int, default=500)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1,000 sources in chunks of 100")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.sources, args.chunk_size = 1000, 100
    if not (Path(args.teacher) / "config.json").is_file():
        parser.error(f"--teacher: no model directory at {args.teacher} (`make demo` trains one)")
    with tempfile.TemporaryDirectory(prefix="distill-processes-") as tmp:
        root = Path(tmp)
        config = root / "student.toml"
        config.write_text(job(args.teacher, args.sources, args.beam, args.chunk_size), "utf-8")
        one = run(config, root / "one", root / "cache1", 1)
        many = run(config, root / "many", root / "cache2", args.processes)
    same = one.pop("corpus") == many.pop("corpus")
    ratio = round(many["decode_wall_seconds"] / one["decode_wall_seconds"], 3)
    goal = {"ratio": ratio, "target": f"<= {GOAL}", "passed": ratio <= GOAL}
    report = {
        "benchmark": "distill_processes",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "teacher": args.teacher,
        "job": {"sources": args.sources, "beam": args.beam, "chunk_size": args.chunk_size},
        "threads_per_process": 1,
        "torch_version": torch.__version__,
        "attnlab_version": attnlab.__version__,
        "python_version": platform.python_version(),
        "cpu": {"model": cpu_model(), "logical_cpus": os.cpu_count()},
        "one_process": one,
        "processes": many,
        "wall_ratio": ratio,
        "same_corpus": same,
        "goal": goal if args.processes == 2 else None,
    }
    write_json(args.out, report)
    print(f"{args.sources:,} sources, beam {args.beam}, chunks of {args.chunk_size}, 1 thread each")
    for name, r in (("1 process", one), (f"{args.processes} processes", many)):
        print(
            f"  {name:12s} decoding {r['decode_wall_seconds']:8.2f} s wall "
            f"({r['decode_seconds_summed']:.2f} s summed over the chunks)"
        )
    print(f"  ratio {ratio:.3f}x; the same corpus byte for byte: {same}")
    if args.processes == 2:
        print(f"  goal: 2 processes <= {GOAL}x 1 process: {'PASS' if goal['passed'] else 'FAIL'}")
    print(f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

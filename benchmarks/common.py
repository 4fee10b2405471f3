"""Shared by the benchmark scripts: interleaved timing, the fp32 GEMM peak, the report table.

Every benchmark compares attnlab with a torch baseline measured in the same run, as ratios:
absolute times on a shared machine mean little.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import attnlab


@dataclass
class Row:
    """One line of the table (and of the JSON)."""

    key: str
    label: str
    unit: str
    attnlab: float
    attnlab_best: float
    baseline_name: str
    baseline: float
    baseline_best: float
    ratio: float
    ratio_best: float
    target: str | None = None
    passed: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)


def check_target(
    ratio: float, target: float | None, higher_is_better: bool
) -> tuple[str | None, bool | None]:
    """The target as text and whether ``ratio`` meets it (``None``: informational row)."""
    if target is None:
        return None, None
    if higher_is_better:
        return f">= {target:.2f}", ratio >= target
    return f"<= {target:.2f}", ratio <= target


# -- timing ----------------------------------------------------------------------------------


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the garbage collector from running inside timed regions."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def interleaved(
    fns: dict[str, Callable[[], object]], reps: int, warmup: int, block: int = 1
) -> dict[str, list[float]]:
    """Time each callable ``reps`` times, interleaved and with a rotating order; seconds.

    With ``block > 1`` each turn runs a contender ``block`` times back to back (each call timed),
    so that one contender's memory traffic does not evict the next one's working set: this is
    how a kernel runs in a real loop, and how the GEMM peak it is compared with is measured.
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    with gc_paused():
        for i in range(max(reps // block, 1)):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                fn = fns[name]
                for _ in range(block):
                    start = time.perf_counter()
                    fn()
                    samples[name].append(time.perf_counter() - start)
    return samples


def summary(samples: list[float]) -> dict[str, Any]:
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "reps": len(samples),
        "samples_s": [round(s, 7) for s in samples],
    }


def time_row(
    key: str,
    label: str,
    samples: dict[str, list[float]],
    ours: str,
    base: str,
    target: float | None,
    details: dict[str, Any],
) -> Row:
    """A row comparing two timed contenders (milliseconds, ratio ours / base)."""
    a, b = samples[ours], samples[base]
    paired = statistics.median(x / y for x, y in zip(a, b, strict=True))
    med_a, med_b = statistics.median(a), statistics.median(b)
    ratio = med_a / med_b
    text, ok = check_target(ratio, target, higher_is_better=False)
    details = {
        **details,
        ours: summary(a),
        base: summary(b),
        "paired_ratio_median": paired,
    }
    return Row(
        key=key,
        label=label,
        unit="ms",
        attnlab=med_a * 1e3,
        attnlab_best=min(a) * 1e3,
        baseline_name=base,
        baseline=med_b * 1e3,
        baseline_best=min(b) * 1e3,
        ratio=ratio,
        ratio_best=min(a) / min(b),
        target=text,
        passed=ok,
        details=details,
    )


def ops_in(fn: Callable[[], object]) -> list[str]:
    """Names of the aten ops one call of ``fn`` runs (to show which kernels are taken)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sorted({e.name for e in prof.events() if e.name.startswith("aten::")})


def gemm_times(n: int, reps: int, seed: int = 0) -> list[float]:
    """Seconds per fp32 `torch.mm` of two n x n matrices (2 n^3 FLOPs), `reps` samples."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    c = torch.empty(n, n)
    return interleaved({"mm": lambda: torch.mm(a, b, out=c)}, reps, warmup=2)["mm"]


def cpu_model() -> str:
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, check=True, timeout=10)
        for line in done.stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_table(rows: list[Row]) -> None:
    headers = [
        "measurement",
        "unit",
        "attnlab med (best)",
        "baseline med (best)",
        "ratio",
        "(best)",
        "target",
        "result",
    ]
    table = []
    for r in rows:
        result = "info" if r.passed is None else ("PASS" if r.passed else "FAIL")
        table.append(
            [
                r.label,
                r.unit,
                f"{fmt(r.attnlab)} ({fmt(r.attnlab_best)})",
                f"{fmt(r.baseline)} ({fmt(r.baseline_best)})",
                f"{r.ratio:.3f}",
                f"({r.ratio_best:.3f})",
                r.target or "-",
                result,
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def gemm_summary(n: int, before: list[float], after: list[float]) -> dict[str, Any]:
    """The GEMM rate from ``gemm_times`` samples taken before and after the measurements: the
    peak (best sample) and the median rate, in GFLOP/s."""
    flops = 2 * n**3
    both = before + after
    return {
        "n": n,
        "flops": flops,
        "peak_gflops": flops / min(both) / 1e9,
        "median_gflops": flops / statistics.median(both) / 1e9,
        "before": summary(before),
        "after": summary(after),
    }


def finish(
    benchmark: str,
    args: Any,
    plan: Any,
    rows: list[Row],
    wall: float,
    extra: dict[str, Any],
) -> int:
    """Print the targets line, write the JSON report to ``args.out``, return the exit code
    (1 only with ``args.check`` and a missed target)."""
    targets = [r for r in rows if r.passed is not None]
    failed = [r for r in targets if not r.passed]
    print(f"targets met: {len(targets) - len(failed)}/{len(targets)}; wall time {wall:.1f} s")
    report = {
        "benchmark": benchmark,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "torch_version": torch.__version__,
        "attnlab_version": attnlab.__version__,
        "python_version": platform.python_version(),
        "threads": args.threads,
        "cpu": {
            "model": cpu_model(),
            "processor": platform.processor(),
            "machine": platform.machine(),
            "logical_cpus": os.cpu_count(),
        },
        "plan": asdict(plan),
        **extra,
        "wall_time_s": wall,
        "all_targets_met": not failed,
        "measurements": [asdict(r) for r in rows],
    }
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 1 if args.check and failed else 0


def write_json(path: str | os.PathLike, report: Any) -> None:
    """``report`` as indented JSON at ``path`` (its folder made), written atomically: a reader
    finds the old report or the new one, never half of one."""
    from attnlab._io import atomic_write

    text = json.dumps(report, indent=2) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temp: Path(temp).write_text(text, encoding="utf-8"))


def base_parser(doc: str, default_out: Path, quick_help: str) -> argparse.ArgumentParser:
    """The options every benchmark script has: --quick, --out, --threads, --check."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", type=Path, default=default_out, help="JSON output path")
    parser.add_argument(
        "--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch threads"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    return parser

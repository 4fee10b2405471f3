"""Benchmark attnlab's attention against torch, side by side in one run.

What is measured (all fp32 on CPU, ``torch.set_num_threads(--threads)``):

1. ``MultiHeadAttention`` vs ``torch.nn.MultiheadAttention(512, 8, batch_first=True)`` at
   (B, T) = (8, 256) and (2, 1024); the attnlab module is ``MultiHeadAttention.from_torch`` of the
   torch one, so the weights are identical.

   a. Training step: forward + backward (``train()``, dropout 0, ``need_weights=False``), input
      requiring grad, gradients reset to ``None`` each step. Target: attnlab / torch <= 1.0.
   b. Inference: forward under ``torch.inference_mode()`` in ``eval()`` with key padding (lengths
      drawn from a fixed seed so that ~25% of positions are padding). torch gets
      ``key_padding_mask`` (True = pad) and ``need_weights=False``, which takes its native
      "fast path"; attnlab gets ``mask=key_mask(padding)``. Target: attnlab / torch <= 0.75.
      For information, torch with the fast path disabled
      (``torch.backends.mha.set_fastpath_enabled(False)``) is timed in the same loop.

2. Attention throughput: ``attnlab.scaled_dot_product_attention`` forward on (1, 8, n, 64),
   no mask, no grad, for n in {512, 2048, 4096}, in GFLOP/s counting ``4 * B * H * n^2 * Dh``
   FLOPs (QK^T and AV, two FLOPs per multiply-add), as a fraction of the fp32 GEMM rate
   measured in the same run (several ``torch.mm`` of square matrices, ``2 n^3`` FLOPs, before
   and after this section; their best is the peak). Target: median attnlab GFLOP/s over median
   GEMM GFLOP/s >= 0.65. torch's own
   ``F.scaled_dot_product_attention`` and the naive ``softmax(QK^T / sqrt(d)) V`` are timed in
   the same loop for context.

3. Peak memory of one forward at n = 4096 (B=1, H=8, Dh=64, no grad), attnlab SDPA vs naive:
   the call runs under ``torch.profiler.profile(profile_memory=True)`` and the allocator events
   it records (allocations positive, frees negative) are replayed in time order; the peak of the
   running sum is the peak extra memory of the call (inputs allocated before it are excluded,
   the output is included). If the profiler gives no usable events, each contender instead
   runs in a fresh subprocess and the ``ru_maxrss`` growth over the call is reported (after a
   warm-up at small n). Target: attnlab / naive <= 0.02.

Timing: every contender is warmed up, then the contenders are interleaved (A B A B ..., the
order rotated each repetition so none always runs first; the throughput section runs each
contender three times per turn, A A A B B B ..., as a kernel runs in a loop); medians are
compared with medians and minima with minima (for throughput: the median attention rate over the
median GEMM rate, and the best over the best GEMM rate, its peak). Timings use
``time.perf_counter``; the garbage collector is off while timing.

Run::

    .venv/bin/python benchmarks/attention.py            # full run, about 3-4 minutes on 2 cores
    .venv/bin/python benchmarks/attention.py --quick    # smoke run, well under a minute
    .venv/bin/python benchmarks/attention.py --threads 1 --out /tmp/a.json --check

It prints a table (rows: measurements; columns: attnlab, baseline, ratio, target, pass/fail)
and writes JSON (default ``benchmarks/results/attention.json``). Pass/fail is informational: the
exit code is 0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

import attnlab
from attnlab.nn.masks import key_mask, padding_mask
from common import (
    Row,
    base_parser,
    check_target,
    cpu_model,
    finish,
    gemm_summary,
    gemm_times,
    interleaved,
    ops_in,
    print_table,
    summary,
    time_row,
)

D_MODEL = 512
NUM_HEADS = 8
MHA_SHAPES = ((8, 256), (2, 1024))
SDPA_HEADS = 8
SDPA_HEAD_DIM = 64
PAD_FRACTION = 0.25
SEED = 0
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "attention.json"

TARGET_TRAIN = 1.0  # attnlab / torch time, at most
TARGET_EVAL = 0.75  # attnlab / torch (fast path) time, at most
TARGET_PEAK_FRACTION = 0.65  # attnlab SDPA GFLOP/s / GEMM peak, at least
TARGET_MEMORY = 0.02  # attnlab / naive peak bytes, at most


@dataclass(frozen=True)
class Plan:
    """How much work each section does (``--quick`` shrinks it)."""

    warmup: int
    train_reps: int
    eval_reps: int
    sdpa_ns: tuple[int, ...]
    sdpa_reps: dict[int, int]
    gemm_n: int
    gemm_reps: int
    mem_n: int


FULL = Plan(
    warmup=3,
    train_reps=45,
    eval_reps=70,
    sdpa_ns=(512, 2048, 4096),
    sdpa_reps={512: 150, 2048: 45, 4096: 18},
    gemm_n=2048,
    gemm_reps=12,
    mem_n=4096,
)
QUICK = Plan(
    warmup=1,
    train_reps=8,
    eval_reps=12,
    sdpa_ns=(512, 2048),
    sdpa_reps={512: 20, 2048: 6},
    gemm_n=2048,
    gemm_reps=5,
    mem_n=4096,
)


# -- 1. multi-head attention -----------------------------------------------------------------


def make_modules(
    batch: int, length: int, *, train: bool
) -> tuple[nn.MultiheadAttention, attnlab.MultiHeadAttention, torch.Generator, Tensor]:
    """The torch module, its attnlab copy (same weights), in train or eval mode, a seeded
    generator and an input ``(batch, length, D_MODEL)`` drawn from it."""
    torch.manual_seed(SEED)
    ref = nn.MultiheadAttention(D_MODEL, NUM_HEADS, dropout=0.0, batch_first=True)
    ours = attnlab.MultiHeadAttention.from_torch(ref)
    ref.train(train)
    ours.train(train)
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(batch, length, D_MODEL, generator=gen, requires_grad=train)
    return ref, ours, gen, x


def bench_train(plan: Plan) -> list[Row]:
    rows = []
    for batch, length in MHA_SHAPES:
        ref, ours, gen, x = make_modules(batch, length, train=True)
        grad_out = torch.randn(batch, length, D_MODEL, generator=gen)

        def step_torch(ref: nn.Module = ref, x: Tensor = x, g: Tensor = grad_out) -> None:
            ref.zero_grad(set_to_none=True)
            x.grad = None
            out, _ = ref(x, x, x, need_weights=False)
            out.backward(g)

        def step_ours(ours: nn.Module = ours, x: Tensor = x, g: Tensor = grad_out) -> None:
            ours.zero_grad(set_to_none=True)
            x.grad = None
            out, _ = ours(x, need_weights=False)
            out.backward(g)

        # Same numbers before timing anything.
        step_torch()
        grad_ref = x.grad.clone()
        step_ours()
        max_diff = (x.grad - grad_ref).abs().max().item()

        samples = interleaved(
            {"attnlab": step_ours, "torch": step_torch}, plan.train_reps, plan.warmup
        )
        rows.append(
            time_row(
                f"train_B{batch}_T{length}",
                f"train fwd+bwd B={batch} T={length}",
                samples,
                "attnlab",
                "torch",
                TARGET_TRAIN,
                {"batch": batch, "length": length, "max_abs_diff_input_grad": max_diff},
            )
        )
    return rows


def padded_lengths(batch: int, length: int, gen: torch.Generator) -> Tensor:
    """Lengths evenly spread over ``[T (1 - 2 p), T]`` (so a fraction ~p of the positions is
    padding even for B = 2), plus a little seeded jitter, in a seeded random order."""
    low = length * (1 - 2 * PAD_FRACTION)
    spread = torch.linspace(low, length, batch) if batch > 1 else torch.tensor([length * 0.75])
    jitter = torch.randint(-length // 32, length // 32 + 1, (batch,), generator=gen)
    lengths = (spread.round().long() + jitter).clamp(1, length)
    return lengths[torch.randperm(batch, generator=gen)]


def bench_eval(plan: Plan) -> list[Row]:
    mha = getattr(torch.backends, "mha", None)
    can_toggle = mha is not None and hasattr(mha, "set_fastpath_enabled")
    rows = []
    for batch, length in MHA_SHAPES:
        ref, ours, gen, x = make_modules(batch, length, train=False)
        lengths = padded_lengths(batch, length, gen)
        padding = padding_mask(lengths, length)  # True = real token
        torch_pad = ~padding  # torch: True = padding
        attn_mask = key_mask(padding)
        pad_fraction = 1.0 - padding.float().mean().item()

        def run_torch(ref: nn.Module = ref, x: Tensor = x, m: Tensor = torch_pad) -> Tensor:
            with torch.inference_mode():
                return ref(x, x, x, key_padding_mask=m, need_weights=False)[0]

        def run_ours(ours: nn.Module = ours, x: Tensor = x, m: Tensor = attn_mask) -> Tensor:
            with torch.inference_mode():
                return ours(x, mask=m)[0]

        def run_torch_slow(run: Callable[[], Tensor] = run_torch) -> Tensor:
            assert mha is not None
            previous = mha.get_fastpath_enabled()
            mha.set_fastpath_enabled(False)
            try:
                return run()
            finally:
                mha.set_fastpath_enabled(previous)

        fns: dict[str, Callable[[], object]] = {"attnlab": run_ours, "torch": run_torch}
        if can_toggle:
            fns["torch_no_fastpath"] = run_torch_slow

        real = padding[:, :, None]
        max_diff = ((run_ours() - run_torch()) * real).abs().max().item()
        details: dict[str, Any] = {
            "batch": batch,
            "length": length,
            "lengths": lengths.tolist(),
            "pad_fraction": pad_fraction,
            "max_abs_diff_real_positions": max_diff,
            "torch_ops": ops_in(run_torch),
            "attnlab_ops": ops_in(run_ours),
        }
        details["torch_fast_path_taken"] = (
            "aten::_native_multi_head_attention" in details["torch_ops"]
        )
        samples = interleaved(fns, plan.eval_reps, plan.warmup)
        label = f"eval fwd keypad B={batch} T={length}"
        rows.append(
            time_row(
                f"eval_B{batch}_T{length}", label, samples, "attnlab", "torch", TARGET_EVAL, details
            )
        )
        if can_toggle:
            rows.append(
                time_row(
                    f"eval_B{batch}_T{length}_no_fastpath",
                    f"{label} (torch fastpath off)",
                    samples,
                    "attnlab",
                    "torch_no_fastpath",
                    None,
                    {"batch": batch, "length": length},
                )
            )
    return rows


# -- 2. attention throughput -----------------------------------------------------------------


def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def sdpa_inputs(n: int) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(SEED)
    shape = (1, SDPA_HEADS, n, SDPA_HEAD_DIM)
    return tuple(torch.randn(shape, generator=gen) for _ in range(3))  # type: ignore[return-value]


def bench_throughput(plan: Plan) -> tuple[list[Row], dict[str, Any]]:
    before = gemm_times(plan.gemm_n, plan.gemm_reps, SEED)
    timed: dict[int, dict[str, list[float]]] = {}
    for n in plan.sdpa_ns:
        q, k, v = sdpa_inputs(n)

        def ours(q: Tensor = q, k: Tensor = k, v: Tensor = v) -> Tensor:
            with torch.inference_mode():
                return attnlab.scaled_dot_product_attention(q, k, v)

        def theirs(q: Tensor = q, k: Tensor = k, v: Tensor = v) -> Tensor:
            with torch.inference_mode():
                return F.scaled_dot_product_attention(q, k, v)

        def naive(q: Tensor = q, k: Tensor = k, v: Tensor = v) -> Tensor:
            with torch.inference_mode():
                return naive_attention(q, k, v)

        fns: dict[str, Callable[[], object]] = {
            "attnlab": ours,
            "torch_sdpa": theirs,
            "naive": naive,
        }
        timed[n] = interleaved(fns, plan.sdpa_reps[n], plan.warmup, block=3)
        del q, k, v
    after = gemm_times(plan.gemm_n, plan.gemm_reps, SEED)
    gemm = gemm_summary(plan.gemm_n, before, after)
    peak = gemm["peak_gflops"]

    q, k, v = sdpa_inputs(256)
    with torch.inference_mode():
        kernel_ops = ops_in(lambda: attnlab.scaled_dot_product_attention(q, k, v))
    rows = []
    for n, samples in timed.items():
        flops = 4 * 1 * SDPA_HEADS * n * n * SDPA_HEAD_DIM
        for name, target in (
            ("attnlab", TARGET_PEAK_FRACTION),
            ("torch_sdpa", None),
            ("naive", None),
        ):
            med = flops / statistics.median(samples[name]) / 1e9
            best = flops / min(samples[name]) / 1e9
            ratio = med / gemm["median_gflops"]  # like with like: median over median
            text, ok = check_target(ratio, target, higher_is_better=True)
            details: dict[str, Any] = {"n": n, "flops": flops, **summary(samples[name])}
            if name == "attnlab":
                details["attnlab_ops"] = kernel_ops
                details["attnlab_over_torch_sdpa_time"] = statistics.median(
                    samples["attnlab"]
                ) / statistics.median(samples["torch_sdpa"])
            label = {
                "attnlab": f"SDPA fwd n={n} (attnlab)",
                "torch_sdpa": f"SDPA fwd n={n} (torch F.sdpa, info)",
                "naive": f"SDPA fwd n={n} (naive, info)",
            }[name]
            rows.append(
                Row(
                    key=f"sdpa_{name}_n{n}",
                    label=label,
                    unit="GFLOP/s",
                    attnlab=med,
                    attnlab_best=best,
                    baseline_name=f"fp32 GEMM peak (mm {plan.gemm_n})",
                    baseline=gemm["median_gflops"],
                    baseline_best=peak,
                    ratio=ratio,
                    ratio_best=best / peak,
                    target=text,
                    passed=ok,
                    details=details,
                )
            )
    return rows, gemm


# -- 3. peak memory --------------------------------------------------------------------------


def _allocation_events(prof: profile) -> list[tuple[int, int]]:
    """(time ns, signed bytes) of every CPU allocator event the profiler recorded."""
    events: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        extra = node.extra_fields
        if type(extra).__name__ == "_ExtraFields_Allocation" and extra.device.type == "cpu":
            events.append((node.start_time_ns, int(extra.alloc_size)))
        stack.extend(node.children)
    events.sort()
    return events


def peak_by_profiler(fn: Callable[[], object]) -> dict[str, Any]:
    """Peak extra bytes allocated during one call of ``fn`` (profiler allocator events)."""
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    events = _allocation_events(prof)
    running = peak = 0
    for _, size in events:
        running += size
        peak = max(peak, running)
    return {"method": "profiler", "peak_bytes": peak, "events": len(events), "net_bytes": running}


def _proc_status_bytes(field_name: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field_name)


def _reset_peak_rss() -> bool:
    """Reset the process's RSS high-water mark (Linux ``clear_refs`` 5); False if impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def mem_worker(kind: str, n: int) -> dict[str, Any]:
    """In a fresh process: growth of the RSS high-water mark over one forward.

    The high-water mark is reset just before the call where Linux allows it; otherwise
    ``ru_maxrss`` is used, which only shows growth above the process's earlier peak (a lower
    bound). Freed memory kept by the C allocator can also hide growth, so this is coarser than
    the profiler method.
    """
    fn_of = {"attnlab": attnlab.scaled_dot_product_attention, "naive": naive_attention}
    fn = fn_of[kind]
    with torch.inference_mode():
        warm = sdpa_inputs(256)
        fn(*warm)
        del warm
        q, k, v = sdpa_inputs(n)
        gc.collect()
        before_rss = _proc_status_bytes("VmRSS")
        reset = _reset_peak_rss()
        before_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out = fn(q, k, v)
        after_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        after_hwm = _proc_status_bytes("VmHWM")
    del out
    if reset:
        peak, method = max(0, after_hwm - before_rss), "VmHWM"
    else:
        peak, method = max(0, after_max - max(before_rss, before_max)), "ru_maxrss"
    return {
        "method": method,
        "peak_bytes": peak,
        "rss_before": before_rss,
        "hwm_after": after_hwm,
        "maxrss_before": before_max,
        "maxrss_after": after_max,
    }


def peak_by_subprocess(kind: str, n: int, threads: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--mem-worker", kind, "--mem-n", str(n)]
    cmd += ["--threads", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_memory(plan: Plan, threads: int, method: str) -> Row:
    n = plan.mem_n
    score_bytes = 1 * SDPA_HEADS * n * n * 4
    results: dict[str, dict[str, Any]] = {}
    notes = []
    if method == "profiler":
        q, k, v = sdpa_inputs(n)
        with torch.inference_mode():
            small = sdpa_inputs(256)
            attnlab.scaled_dot_product_attention(*small)
            naive_attention(*small)
            del small
            results["attnlab"] = peak_by_profiler(
                lambda: attnlab.scaled_dot_product_attention(q, k, v)
            )
            results["naive"] = peak_by_profiler(lambda: naive_attention(q, k, v))
        del q, k, v
        # Sanity: naive must hold at least one (B, H, n, n) score matrix, attnlab its output.
        out_bytes = 1 * SDPA_HEADS * n * SDPA_HEAD_DIM * 4
        if results["naive"]["peak_bytes"] < score_bytes or results["attnlab"]["peak_bytes"] < (
            out_bytes
        ):
            notes.append(f"profiler peaks implausible ({results}); fell back to ru_maxrss")
            method = "rss"
    if method == "rss":
        results = {kind: peak_by_subprocess(kind, n, threads) for kind in ("attnlab", "naive")}
    ours, naive = results["attnlab"]["peak_bytes"], results["naive"]["peak_bytes"]
    ratio = ours / naive if naive else math.inf
    text, ok = check_target(ratio, TARGET_MEMORY, higher_is_better=False)
    mib = 1024 * 1024
    return Row(
        key=f"memory_n{n}",
        label=f"peak mem fwd n={n} ({results['attnlab']['method']})",
        unit="MiB",
        attnlab=ours / mib,
        attnlab_best=ours / mib,
        baseline_name="naive softmax(QK^T)V",
        baseline=naive / mib,
        baseline_best=naive / mib,
        ratio=ratio,
        ratio_best=ratio,
        target=text,
        passed=ok,
        details={
            "n": n,
            "score_matrix_bytes": score_bytes,
            "attnlab": results["attnlab"],
            "naive": results["naive"],
            "notes": notes,
        },
    )


# -- report ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = base_parser(__doc__, DEFAULT_OUT, "fewer repetitions, smaller n")
    parser.add_argument(
        "--mem-method",
        choices=("profiler", "rss"),
        default="profiler",
        help="peak memory via profiler allocator events (default) or ru_maxrss subprocesses",
    )
    parser.add_argument("--mem-worker", choices=("attnlab", "naive"), help=argparse.SUPPRESS)
    parser.add_argument("--mem-n", type=int, default=4096, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.mem_worker:
        print(json.dumps(mem_worker(args.mem_worker, args.mem_n)))
        return 0

    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    print(
        f"attnlab {attnlab.__version__} vs torch {torch.__version__}; threads={args.threads}; "
        f"cpu: {cpu_model()}; {'quick' if args.quick else 'full'} run",
        flush=True,
    )
    rows: list[Row] = []
    sections: list[tuple[str, Callable[[], list[Row]]]] = [
        ("MHA training", lambda: bench_train(plan)),
        ("MHA inference", lambda: bench_eval(plan)),
    ]
    gemm: dict[str, Any] = {}

    def throughput() -> list[Row]:
        got, info = bench_throughput(plan)
        gemm.update(info)
        return got

    sections.append(("attention throughput", throughput))
    sections.append(("peak memory", lambda: [bench_memory(plan, args.threads, args.mem_method)]))
    for name, run in sections:
        t0 = time.perf_counter()
        rows.extend(run())
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)

    wall = time.perf_counter() - started
    print()
    print_table(rows)
    print()
    for r in rows:
        if "torch_fast_path_taken" not in r.details:
            continue
        taken = r.details.get("torch_fast_path_taken")
        print(f"{r.label}: torch fast path taken: {taken}; padding {r.details['pad_fraction']:.1%}")
    print(
        f"GEMM peak {gemm['peak_gflops']:.0f} GFLOP/s (mm {gemm['n']}, best of "
        f"{gemm['before']['reps'] + gemm['after']['reps']}; median {gemm['median_gflops']:.0f})"
    )
    return finish("attention", args, plan, rows, wall, {"gemm": gemm})


if __name__ == "__main__":
    sys.exit(main())

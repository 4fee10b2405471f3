"""Benchmark greedy decoding: attnlab's KV cache vs torch.nn.Transformer re-running its decoder.

What is measured (fp32 on CPU, eval mode, no autograd, ``torch.set_num_threads(--threads)``):

The two models of ``benchmarks/model.py``, with the same weights: the ``small`` preset's shape
(d_model 256, 4 heads, 3 + 3 layers, d_ff 1024, an 8,000-token shared embedding, sinusoidal
positions, tied output). Each decodes 128 new tokens greedily from a batch of 32-token sources:

* attnlab: :func:`attnlab.greedy_search` with ``min_new_tokens = max_new_tokens = 128`` (so
  EOS never ends a row early): the source is encoded once, each decoder layer projects the
  memory's keys and values once, and each step runs the decoder on one new token per row
  against the cached keys and values.
* torch: torch.nn.Transformer has no cache (pytorch issues #107573, #49791), so the usual loop
  encodes the source once and re-runs the decoder on the whole prefix at every step (causal
  mask, ``tgt_is_causal=True``), taking the last position's logits; the same token choice as
  attnlab's (pad, BOS and EOS never chosen).

Both produce the same tokens, which the script checks. Rows:

1. tokens/s at batch 1. Target: attnlab / torch >= 4.
2. tokens/s at batch 32 (informational).
3. per-token latency at batch 1: attnlab's decoding loop timed step by step; the mean of the
   last 16 steps over the mean of the first 16. Target: <= 1.3 (flat: a step's cost does not
   grow with the prefix). torch's ratio is in the details for comparison.
4. beam search (beam 4, length penalty 0.6) tokens/s at batch 32, against attnlab's greedy
   decoding of the same batch (informational): the price of 4 hypotheses per sentence.

Timing: a warm-up run, then the contenders' runs interleaved (order rotated each repetition),
medians compared with medians; the garbage collector is off while timing.

Run::

    .venv/bin/python benchmarks/decode.py            # full run, about 3 minutes on 2 cores
    .venv/bin/python benchmarks/decode.py --quick    # smoke run (fewer tokens, smaller batch)

It prints a table and writes JSON (default ``benchmarks/results/decode.json``); the exit code is
0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import attnlab
from attnlab.generate import beam_search, greedy_search
from common import (
    Row,
    base_parser,
    check_target,
    cpu_model,
    finish,
    interleaved,
    print_table,
    summary,
)
from model import PAD_ID, VOCAB, TorchTransformer, make_models

SEED = 0
SOURCE_LENGTH = 32
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "decode.json"
TARGET_SPEEDUP = 4.0  # attnlab / torch tokens per second at batch 1, at least
TARGET_FLATNESS = 1.3  # mean of the last 16 step times / the first 16, at most
WINDOW = 16


@dataclass(frozen=True)
class Plan:
    new_tokens: int
    big_batch: int
    reps: int
    warmup: int


FULL = Plan(new_tokens=128, big_batch=32, reps=5, warmup=1)
QUICK = Plan(new_tokens=40, big_batch=4, reps=1, warmup=1)


def make_sources(batch: int) -> Tensor:
    gen = torch.Generator().manual_seed(SEED + batch)
    return torch.randint(3, VOCAB, (batch, SOURCE_LENGTH), generator=gen)


# -- the torch loop: no cache, the decoder re-runs the prefix ----------------------------------


@torch.inference_mode()
def torch_greedy(model: TorchTransformer, src: Tensor, new_tokens: int, banned: list[int]):
    """Greedy decoding with torch.nn.Transformer: ids ``(B, new_tokens)``, per-step seconds."""
    core = model.transformer
    memory = core.encoder(model.embed_ids(src))
    ids = torch.full((src.shape[0], 1), 1, dtype=torch.long)  # BOS
    steps = []
    for _ in range(new_tokens):
        start = time.perf_counter()
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        y = core.decoder(model.embed_ids(ids), memory, tgt_mask=causal, tgt_is_causal=True)
        logits = model.head(y[:, -1]).float()
        logits[:, banned] = -float("inf")
        ids = torch.cat([ids, logits.argmax(dim=-1, keepdim=True)], dim=1)
        steps.append(time.perf_counter() - start)
    return ids[:, 1:], steps


# -- attnlab's loop, step by step (what greedy_search runs), for the latency profile -----------


@torch.inference_mode()
def attnlab_steps(model: attnlab.Transformer, src: Tensor, new_tokens: int, banned: list[int]):
    """The cached decoding loop with each step timed: ids ``(B, new_tokens)``, seconds."""
    memory = model.encode(src)
    cache = model.new_cache(memory, model.source_mask(src), capacity=new_tokens)
    token = torch.full((src.shape[0], 1), 1, dtype=torch.long)  # BOS
    out, steps = [], []
    for _ in range(new_tokens):
        start = time.perf_counter()
        logits = model.decode(token, cache=cache)[:, -1].float()
        logits[:, banned] = -float("inf")
        token = logits.argmax(dim=-1, keepdim=True)
        out.append(token)
        steps.append(time.perf_counter() - start)
    return torch.cat(out, dim=1), steps


def flatness(steps: list[float]) -> float:
    """Mean of the last WINDOW step times over the mean of the first WINDOW (after step 0)."""
    first = steps[1 : 1 + WINDOW]  # step 0 also warms caches
    return statistics.mean(steps[-WINDOW:]) / statistics.mean(first)


def rate_row(
    key: str,
    label: str,
    samples: dict[str, list[float]],
    tokens: int,
    names: tuple[str, str],
    baseline_name: str,
    target: float | None,
    details: dict[str, Any],
) -> Row:
    ours, base = names
    rate = {n: tokens / statistics.median(samples[n]) for n in names}
    best = {n: tokens / min(samples[n]) for n in names}
    ratio = rate[ours] / rate[base]
    text, ok = check_target(ratio, target, higher_is_better=True)
    return Row(
        key=key,
        label=label,
        unit="tok/s",
        attnlab=rate[ours],
        attnlab_best=best[ours],
        baseline_name=baseline_name,
        baseline=rate[base],
        baseline_best=best[base],
        ratio=ratio,
        ratio_best=best[ours] / best[base],
        target=text,
        passed=ok,
        details={**details, **{n: summary(samples[n]) for n in names}},
    )


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__, DEFAULT_OUT, "fewer tokens and a smaller batch").parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.nn\.modules\.")
    torch.set_num_threads(args.threads)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    print(
        f"attnlab {attnlab.__version__} vs torch {torch.__version__}; threads={args.threads}; "
        f"cpu: {cpu_model()}; {'quick' if args.quick else 'full'} run",
        flush=True,
    )
    ours, theirs = make_models()
    ours.eval()
    theirs.eval()
    config = ours.config
    banned = sorted({config.pad_id, config.bos_id, config.eos_id})
    n = plan.new_tokens
    fixed = {"max_new_tokens": n, "min_new_tokens": n}
    rows = []
    for batch in (1, plan.big_batch):
        src = make_sources(batch)
        mine = greedy_search(ours, src, **fixed).sequences
        reference, _ = torch_greedy(theirs, src, n, banned)
        same = bool(torch.equal(mine, reference))
        samples = interleaved(
            {
                "attnlab": lambda src=src: greedy_search(ours, src, **fixed),
                "torch": lambda src=src: torch_greedy(theirs, src, n, banned),
            },
            plan.reps,
            plan.warmup,
        )
        rows.append(
            rate_row(
                f"greedy_B{batch}",
                f"greedy tokens/s, batch {batch}{'' if batch == 1 else ' (info)'}",
                samples,
                batch * n,
                ("attnlab", "torch"),
                "torch.nn.Transformer, no cache",
                TARGET_SPEEDUP if batch == 1 else None,
                {"batch": batch, "new_tokens": n, "same_tokens_as_torch": same},
            )
        )
        print(f"batch {batch}: identical tokens from both models: {same}", flush=True)

    # Per-token latency at batch 1, attnlab vs torch, from step-timed loops (median of reps).
    src = make_sources(1)
    ours_flat = statistics.median(
        flatness(attnlab_steps(ours, src, n, banned)[1]) for _ in range(max(plan.reps, 3))
    )
    theirs_flat = statistics.median(
        flatness(torch_greedy(theirs, src, n, banned)[1]) for _ in range(max(plan.reps, 3))
    )
    _, steps = attnlab_steps(ours, src, n, banned)
    text, ok = check_target(ours_flat, TARGET_FLATNESS, higher_is_better=False)
    rows.append(
        Row(
            key="latency_flatness",
            label=f"step time, last {WINDOW} / first {WINDOW}",
            unit="x",
            attnlab=ours_flat,
            attnlab_best=ours_flat,
            baseline_name="flat (1.0)",
            baseline=1.0,
            baseline_best=1.0,
            ratio=ours_flat,
            ratio_best=ours_flat,
            target=text,
            passed=ok,
            details={
                "torch_flatness": theirs_flat,
                "attnlab_step_ms": [round(s * 1e3, 4) for s in steps],
            },
        )
    )

    # Beam search (beam 4) against greedy, both attnlab, on the big batch.
    src = make_sources(plan.big_batch)
    samples = interleaved(
        {
            "beam4": lambda: beam_search(ours, src, beam_size=4, **fixed),
            "greedy": lambda: greedy_search(ours, src, **fixed),
        },
        plan.reps,
        plan.warmup,
    )
    rows.append(
        rate_row(
            f"beam4_B{plan.big_batch}",
            f"beam 4 tokens/s, batch {plan.big_batch} (info)",
            samples,
            plan.big_batch * n,
            ("beam4", "greedy"),
            "attnlab greedy",
            None,
            {"batch": plan.big_batch, "new_tokens": n, "beam_size": 4, "alpha": 0.6},
        )
    )
    wall = time.perf_counter() - started

    print()
    print_table(rows)
    print()
    print(
        f"per-token latency, last {WINDOW} steps / first {WINDOW}: attnlab {ours_flat:.2f}, "
        f"torch (no cache) {theirs_flat:.2f}"
    )
    dims = {"preset": "small", "vocab": VOCAB, "pad_id": PAD_ID, "source_length": SOURCE_LENGTH}
    return finish("decode", args, plan, rows, wall, {"dims": dims})


if __name__ == "__main__":
    raise SystemExit(main())

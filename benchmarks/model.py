"""Benchmark a Transformer training step: attnlab vs torch.nn.Transformer, side by side in one run.

What is measured (fp32 on CPU, ``torch.set_num_threads(--threads)``):

Both models have d_model 256, 4 heads, 3 encoder + 3 decoder layers, d_ff 1024, dropout 0.1
(on residuals, embeddings, attention weights and inside the FFN: torch.nn.Transformer's
places), an 8,000-token shared embedding scaled by sqrt(d_model) plus the sinusoidal encoding,
and the pre-softmax projection tied to it. The torch side is ``nn.Embedding`` +
``nn.Transformer(batch_first=True)`` + ``nn.Linear``; the attnlab side is
``attnlab.Transformer`` whose stacks are ``Encoder.from_torch`` / ``Decoder.from_torch`` of the
torch ones (so it also has torch's final LayerNorms) and whose embedding is a copy of torch's:
the same weights and the same arithmetic, which the script checks (equal loss in eval mode).

A step: forward on a batch of 32 sentence pairs x 64 tokens (source and target), label-smoothed
cross-entropy (0.1), backward, Adam(0.9, 0.98, 1e-9). torch gets ``tgt_mask`` (causal) with
``tgt_is_causal=True`` and ``F.cross_entropy``; attnlab's decoder is causal by construction, and
its loss is :func:`attnlab.train.losses.cross_entropy` as its trainer calls it (fused, written over
the logits; the same value). The process keeps freed memory for reuse as ``attnlab train``
does (:func:`attnlab.train.memory.keep_freed_memory`, for both models) unless
``--system-allocator`` is given; the JSON says which. Rows:

1. tokens/s (source + target tokens per second), unpadded batch. Target: attnlab / torch >= 1.5.
   Beside it (informational): attnlab's step against the same model with torch's loss (what
   the fused loss gains) and, with ``--compile``, attnlab's step through ``torch.compile`` (as
   ``attnlab train --compile``) against the eager one, and the same with the loss left out of
   the graph (run eagerly between its parts): how much of the compiled step's slowdown is the
   loss's.
2. the same with ~20% padding at the end of each sentence (informational): torch gets
   ``src_key_padding_mask``, ``tgt_key_padding_mask`` and ``memory_key_padding_mask``, attnlab
   builds its masks from the pad id.
3. model FLOP utilisation (informational): analytic FLOPs of a training step (``3 x`` the
   forward's matmul FLOPs: projections, attention scores and sums, FFN, logits; see
   ``step_flops``) per second, over the fp32 GEMM peak (``torch.mm`` of 2048 x 2048 matrices)
   measured in the same run, for both models.

Timing: warm-up steps, then the two models' steps interleaved (order rotated each repetition),
medians compared with medians and best with best; the garbage collector is off while timing.

Run::

    .venv/bin/python benchmarks/model.py            # full run, about 2 minutes on 2 cores
    .venv/bin/python benchmarks/model.py --quick    # smoke run
    .venv/bin/python benchmarks/model.py --system-allocator  # glibc's defaults (mmap per
                                                             # large tensor), for comparison
    .venv/bin/python benchmarks/model.py --profile  # also print where the time goes: each
                                                    # op's self time by kind (matrix products,
                                                    # attention, norms, dropout, optimizer...)

It prints a table and writes JSON (default ``benchmarks/results/model.json``); the exit code is
0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

import attnlab
from attnlab.nn.layers import Decoder, Encoder
from attnlab.train.losses import cross_entropy
from attnlab.train.memory import keep_freed_memory
from attnlab.train.step import compiled_loss
from common import (
    Row,
    base_parser,
    check_target,
    cpu_model,
    finish,
    gemm_summary,
    gemm_times,
    interleaved,
    print_table,
    summary,
)

VOCAB = 8000
D_MODEL = 256
NUM_HEADS = 4
NUM_LAYERS = 3
D_FF = 1024
DROPOUT = 0.1
BATCH = 32
LENGTH = 64
PAD_FRACTION = 0.2
PAD_ID = 0
SEED = 0
GEMM_N = 2048
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "model.json"
TARGET_TOKENS = 1.5  # attnlab / torch tokens per second, at least


#: ``--shape multi30k``: the Multi30K recipe's model (configs/multi30k-en-de.toml: d_model 128,
#: 4 + 4 layers, d_ff 256, dropout 0.3) on a batch of its size (4,096 tokens a side);
#: ``multi30k-ff512``: the same with the recipe's earlier d_ff 512.
MULTI30K = dict(D_MODEL=128, NUM_LAYERS=4, D_FF=256, DROPOUT=0.3, BATCH=128, LENGTH=32)
SHAPES = {"small": {}, "multi30k": MULTI30K, "multi30k-ff512": {**MULTI30K, "D_FF": 512}}


def use_shape(name: str) -> None:
    """Rebind the module's dimensions to the shape ``name`` (before any model is built)."""
    globals().update(SHAPES[name])


@dataclass(frozen=True)
class Plan:
    warmup: int
    reps: int
    gemm_reps: int


FULL = Plan(warmup=3, reps=30, gemm_reps=10)
QUICK = Plan(warmup=1, reps=3, gemm_reps=3)


# -- the two models ----------------------------------------------------------------------------


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings and output layer as attnlab's model."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        nn.init.normal_(self.embed.weight, std=D_MODEL**-0.5)
        self.position = attnlab.SinusoidalPositionalEncoding(D_MODEL)
        self.transformer = nn.Transformer(
            D_MODEL,
            NUM_HEADS,
            NUM_LAYERS,
            NUM_LAYERS,
            D_FF,
            dropout=DROPOUT,
            batch_first=True,
        )
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def embed_ids(self, ids: Tensor) -> Tensor:
        x = self.position(self.embed(ids) * math.sqrt(D_MODEL))
        return F.dropout(x, DROPOUT, self.training)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        src_pad, tgt_pad = src == PAD_ID, tgt == PAD_ID  # torch: True = ignore
        pads = bool(src_pad.any() or tgt_pad.any())
        y = self.transformer(
            self.embed_ids(src),
            self.embed_ids(tgt),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad if pads else None,
            tgt_key_padding_mask=tgt_pad if pads else None,
            memory_key_padding_mask=src_pad if pads else None,
        )
        return self.head(y)


def make_models() -> tuple[attnlab.Transformer, TorchTransformer]:
    """Both models with identical weights (attnlab's stacks converted from torch's)."""
    torch.manual_seed(SEED)
    theirs = TorchTransformer()
    config = attnlab.TransformerConfig.preset(
        "small",
        vocab_size=VOCAB,
        d_model=D_MODEL,
        num_heads=NUM_HEADS,
        d_ff=D_FF,
        num_encoder_layers=NUM_LAYERS,
        num_decoder_layers=NUM_LAYERS,
        dropout=DROPOUT,
        attention_dropout=DROPOUT,
        activation_dropout=DROPOUT,
        pad_id=PAD_ID,
    )
    ours = attnlab.Transformer(config)
    ours.encoder = Encoder.from_torch(theirs.transformer.encoder)
    ours.decoder = Decoder.from_torch(theirs.transformer.decoder)
    with torch.no_grad():
        ours.src_embed.token.weight.copy_(theirs.embed.weight)  # shared and tied
    return ours.train(), theirs.train()


def make_batch(padded: bool) -> tuple[Tensor, Tensor]:
    """Source (B, T) and target (B, T + 1) ids; with ``padded``, each sentence ends in pads
    (lengths uniform in [T (1 - 2 f), T], so about a fraction f of the tokens are pads)."""
    gen = torch.Generator().manual_seed(SEED)
    src = torch.randint(PAD_ID + 1, VOCAB, (BATCH, LENGTH), generator=gen)
    tgt = torch.randint(PAD_ID + 1, VOCAB, (BATCH, LENGTH + 1), generator=gen)
    if padded:
        low = int(LENGTH * (1 - 2 * PAD_FRACTION))
        for ids in (src, tgt):
            lengths = torch.randint(low, LENGTH + 1, (BATCH,), generator=gen)
            positions = torch.arange(ids.shape[1])
            ids[positions[None, :] >= lengths[:, None]] = PAD_ID
    return src, tgt


def loss_of(
    model: nn.Module,
    src: Tensor,
    tgt: Tensor,
    *,
    fused: bool = False,
    fused_loss: Callable[..., Tensor] = cross_entropy,
) -> Tensor:
    """Mean label-smoothed cross-entropy of the non-pad targets: torch's, or (``fused``)
    :func:`attnlab.train.losses.cross_entropy` as attnlab's trainer calls it (over the logits);
    ``fused_loss`` replaces that function (the same one kept out of a compiled graph)."""
    logits = model(src, tgt[:, :-1]).reshape(-1, VOCAB)  # (B T, V), teacher forcing
    target = tgt[:, 1:].reshape(-1)
    if fused:
        total = fused_loss(logits, target, ignore_index=PAD_ID, label_smoothing=0.1, inplace=True)
        return total / (target != PAD_ID).sum()
    return F.cross_entropy(logits, target, ignore_index=PAD_ID, label_smoothing=0.1)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    src: Tensor,
    tgt: Tensor,
    *,
    fused: bool = False,
    compiled: bool = False,
    loss_in_graph: bool = True,
):
    loss = loss_of
    kwargs: dict[str, Any] = {}
    if not loss_in_graph:  # dynamo calls this function eagerly, a break in the graph
        kwargs["fused_loss"] = torch.compiler.disable(cross_entropy)
    if compiled:  # as attnlab.train.step compiles the trainer's loss
        loss = compiled_loss(loss_of)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss(model, src, tgt, fused=fused, **kwargs).backward()
        optimizer.step()

    return step


def adam(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)


# -- analytic FLOPs ----------------------------------------------------------------------------


def step_flops(src_len: int, tgt_len: int, batch: int) -> dict[str, int]:
    """Matmul FLOPs (2 per multiply-add) of one training step, by component.

    Forward per sequence: the encoder's Q, K, V and output projections ``4 S d^2`` and FFN
    ``2 S d d_ff`` multiply-adds per layer, attention ``2 S^2 d`` (QK^T and the weighted sum);
    the decoder adds cross-attention (``2 T d^2`` for Q and W_O, ``2 S d^2`` for K and V,
    ``2 T S d``), its causal self-attention counted as the full ``2 T^2 d`` that the kernel
    computes; the logits ``T d V``. Backward is counted as twice the forward, the usual
    approximation (two matmuls per forward matmul).
    """
    d, f, s, t = D_MODEL, D_FF, src_len, tgt_len
    encoder = NUM_LAYERS * (4 * s * d * d + 2 * s * d * f + 2 * s * s * d)
    decoder = NUM_LAYERS * (
        4 * t * d * d  # self-attention projections
        + 2 * t * t * d  # self-attention scores and sum
        + 2 * t * d * d  # cross-attention Q and W_O
        + 2 * s * d * d  # cross-attention K and V (on the memory)
        + 2 * t * s * d  # cross-attention scores and sum
        + 2 * t * d * f  # FFN
    )
    logits = t * d * VOCAB
    forward = {"encoder": encoder, "decoder": decoder, "logits": logits}
    flops = {name: 2 * macs * batch for name, macs in forward.items()}
    flops["forward"] = sum(flops.values())
    flops["training_step"] = 3 * flops["forward"]
    return flops


# -- measurement -------------------------------------------------------------------------------


def check_same_model(ours: nn.Module, theirs: nn.Module, src: Tensor, tgt: Tensor) -> float:
    """|loss difference| of the two models in eval mode (dropout off) on one batch."""
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        diff = abs(loss_of(ours, src, tgt).item() - loss_of(theirs, src, tgt).item())
    ours.train()
    theirs.train()
    return diff


# Where a training step's time goes: each aten op's self time, grouped by what it does.
CATEGORIES = (
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv")),
    ("attention kernel", ("scaled_dot_product", "flash_attention")),
    ("softmax and loss", ("softmax", "nll_loss", "cross_entropy")),
    ("layer norm", ("layer_norm",)),
    ("dropout", ("dropout", "bernoulli", "uniform_")),  # attnlab draws masks with torch.rand
    ("optimizer", ("_foreach", "addcdiv", "lerp", "Optimizer")),
    ("embedding", ("embedding",)),
)
OTHER_OPS = "other element-wise ops and copies"
OUTSIDE = "outside aten ops (Python, autograd, dispatch)"


def category(name: str) -> str:
    for label, patterns in CATEGORIES:
        if any(p in name for p in patterns):
            return label
    return OTHER_OPS if name.startswith("aten::") else OUTSIDE


def profile_steps(step: Callable[[], None], steps: int = 3) -> tuple[Any, float]:
    """``steps`` calls of ``step`` (already warm) under torch.profiler: the profile and their
    wall time in seconds."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - start
    return prof, wall


def time_breakdown(prof: Any, wall: float, steps: int) -> dict[str, Any]:
    """Seconds per step by :data:`CATEGORIES` (self CPU time of the ops, under the profiler),
    plus what no aten op accounts for (``wall``, the profiled steps' time, minus the ops' self
    times): a profiler's view, slower than an unprofiled step by its own overhead. Also the 4
    largest ops among the other element-wise ops and copies, as shares of the wall time."""
    seconds: dict[str, float] = {}
    others: dict[str, float] = {}
    for event in prof.key_averages():
        label = category(event.key)
        seconds[label] = seconds.get(label, 0.0) + event.self_cpu_time_total / 1e6
        if label == OTHER_OPS:
            others[event.key] = event.self_cpu_time_total / 1e6
    seconds[OUTSIDE] = seconds.get(OUTSIDE, 0.0) + max(0.0, wall - sum(seconds.values()))
    top = sorted(others, key=lambda k: -others[k])[:4]
    return {
        "per_step_s": {k: t / steps for k, t in sorted(seconds.items(), key=lambda kv: -kv[1])},
        "largest_other_ops": {k: others[k] / wall for k in top},
    }


def print_breakdown(found: dict[str, dict[str, Any]]) -> None:
    """The :func:`time_breakdown` of each model side by side."""
    breakdowns = {name: b["per_step_s"] for name, b in found.items()}
    names = list(breakdowns)
    labels = list(dict.fromkeys(k for b in breakdowns.values() for k in b))
    print("\nwhere a training step's time goes (ms per step, under torch.profiler):")
    print(f"  {'':<48}" + "".join(f"{n:>22}" for n in names))
    for label in labels:
        cells = []
        for n in names:
            total = sum(breakdowns[n].values())
            t = breakdowns[n].get(label, 0.0)
            cells.append(f"{t * 1e3:>12.1f} ({t / total:>5.1%})")
        print(f"  {label:<48}" + "".join(f"{c:>22}" for c in cells))
    totals = "".join(f"{sum(b.values()) * 1e3:>12.1f}          " for b in breakdowns.values())
    print(f"  {'total':<48}{totals}")
    for name, b in found.items():
        ops = ", ".join(f"{k} {share:.1%}" for k, share in b["largest_other_ops"].items())
        print(f"  {name}: the largest {OTHER_OPS}: {ops}")


def bench(
    plan: Plan, padded: bool, show_profile: bool, compiled: bool = False
) -> tuple[list[Row], dict[str, list[float]]]:
    ours, theirs = make_models()
    src, tgt = make_batch(padded)
    loss_diff = check_same_model(ours, theirs, src, tgt)
    steps = {
        "attnlab": train_step(ours, adam(ours), src, tgt, fused=True),
        "torch": train_step(theirs, adam(theirs), src, tgt),
    }
    extra: dict[str, Callable[[], None]] = {}  # informational contenders (attnlab's own)
    if not padded:  # the same model with torch's loss: what the fused loss gains
        twin = make_models()[0]
        extra["attnlab_torch_loss"] = train_step(twin, adam(twin), src, tgt)
    if compiled:
        for name, in_graph in (("attnlab_compiled", True), ("attnlab_compiled_loss_eager", False)):
            twin = make_models()[0]
            extra[name] = train_step(
                twin, adam(twin), src, tgt, fused=True, compiled=True, loss_in_graph=in_graph
            )
            print(f"compiling {name} ({'padded' if padded else 'unpadded'})...", flush=True)
            start = time.perf_counter()
            extra[name]()
            print(f"  first compiled step {time.perf_counter() - start:.0f} s", flush=True)
    samples = interleaved({**steps, **extra}, plan.reps, plan.warmup)
    tokens = src.numel() + tgt.numel() - BATCH  # the target's last token is only a label
    real = int((src != PAD_ID).sum() + (tgt[:, :-1] != PAD_ID).sum())
    rate = {name: tokens / statistics.median(s) for name, s in samples.items()}
    best = {name: tokens / min(s) for name, s in samples.items()}
    ratio = rate["attnlab"] / rate["torch"]
    text, ok = check_target(ratio, None if padded else TARGET_TOKENS, higher_is_better=True)
    details: dict[str, Any] = {
        "tokens_per_step": tokens,
        "real_tokens_per_step": real,
        "pad_fraction": 1 - real / tokens,
        "eval_loss_abs_diff": loss_diff,
        "attnlab": summary(samples["attnlab"]),
        "torch": summary(samples["torch"]),
    }
    if show_profile:
        details["breakdown"] = {}
        for name, step in steps.items():  # warm: the timed steps ran first
            prof, wall = profile_steps(step)
            print(f"\nprofile, {name}, {'padded' if padded else 'unpadded'} (3 steps):")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
            details["breakdown"][name] = time_breakdown(prof, wall, steps=3)
        print_breakdown(details["breakdown"])
    row = Row(
        key="train_padded" if padded else "train",
        label=f"train step tokens/s{' (20% padding, info)' if padded else ''}",
        unit="tok/s",
        attnlab=rate["attnlab"],
        attnlab_best=best["attnlab"],
        baseline_name="torch.nn.Transformer",
        baseline=rate["torch"],
        baseline_best=best["torch"],
        ratio=ratio,
        ratio_best=best["attnlab"] / best["torch"],
        target=text,
        passed=ok,
        details=details,
    )
    rows = [row]
    for name, label in (
        ("attnlab_torch_loss", "fused loss: attnlab step / the same with torch's loss (info)"),
        ("attnlab_compiled", "torch.compile: compiled / eager attnlab step (info)"),
        (
            "attnlab_compiled_loss_eager",
            "torch.compile, the loss eager: compiled / eager attnlab step (info)",
        ),
    ):
        if name not in samples:
            continue
        fused_rate, fused_best = rate["attnlab"], best["attnlab"]
        other = tokens / statistics.median(samples[name])
        other_best = tokens / min(samples[name])
        if name == "attnlab_torch_loss":
            mine, mine_best, theirs_, theirs_best, base = (
                fused_rate,
                fused_best,
                other,
                other_best,
                "attnlab, torch's loss",
            )
        else:
            mine, mine_best, theirs_, theirs_best, base = (
                other,
                other_best,
                fused_rate,
                fused_best,
                "attnlab, eager",
            )
        rows.append(
            Row(
                key=f"{row.key}_{name}",
                label=label,
                unit="tok/s",
                attnlab=mine,
                attnlab_best=mine_best,
                baseline_name=base,
                baseline=theirs_,
                baseline_best=theirs_best,
                ratio=mine / theirs_,
                ratio_best=mine_best / theirs_best,
                details={name: summary(samples[name])},
            )
        )
    return rows, samples


def utilisation_rows(samples: dict[str, list[float]], gemm: dict[str, Any]) -> list[Row]:
    """Model FLOP utilisation of each model: analytic FLOP/s over the measured GEMM rate."""
    flops = step_flops(LENGTH, LENGTH, BATCH)["training_step"]
    rows = []
    for name in ("attnlab", "torch"):
        med = flops / statistics.median(samples[name]) / 1e9
        top = flops / min(samples[name]) / 1e9
        rows.append(
            Row(
                key=f"mfu_{name}",
                label=f"model FLOP utilisation ({name}, info)",
                unit="GFLOP/s",
                attnlab=med,
                attnlab_best=top,
                baseline_name=f"fp32 GEMM (mm {GEMM_N})",
                baseline=gemm["median_gflops"],
                baseline_best=gemm["peak_gflops"],
                ratio=med / gemm["median_gflops"],
                ratio_best=top / gemm["peak_gflops"],
                details={"step_flops": step_flops(LENGTH, LENGTH, BATCH)},
            )
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = base_parser(__doc__, DEFAULT_OUT, "a few repetitions (smoke run)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print torch.profiler tables and where a step's time goes (also in the JSON)",
    )
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="small",
        help="the models' dimensions: the small preset (default), the Multi30K recipe's, or that "
        "recipe's earlier d_ff 512",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time attnlab's step through torch.compile (as `attnlab train --compile`)",
    )
    parser.add_argument(
        "--system-allocator",
        action="store_true",
        help="leave glibc's allocator as it is (attnlab train keeps freed memory for reuse)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # torch's notes about its nested-tensor fast path (taken by the eval-mode check) are noise.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.nn\.modules\.")
    torch.set_num_threads(args.threads)
    use_shape(args.shape)
    plan = QUICK if args.quick else FULL
    allocator = "system"
    if not args.system_allocator and keep_freed_memory():
        allocator = "freed memory kept (glibc mallopt, as attnlab train)"
    started = time.perf_counter()
    print(
        f"attnlab {attnlab.__version__} vs torch {torch.__version__}; threads={args.threads}; "
        f"cpu: {cpu_model()}; {'quick' if args.quick else 'full'} run, shape {args.shape}; "
        f"allocator: {allocator}",
        flush=True,
    )
    before = gemm_times(GEMM_N, plan.gemm_reps, SEED)
    main_rows, samples = bench(plan, padded=False, show_profile=args.profile, compiled=args.compile)
    padded_rows, _ = bench(plan, padded=True, show_profile=False)
    gemm = gemm_summary(GEMM_N, before, gemm_times(GEMM_N, plan.gemm_reps, SEED))
    rows = [main_rows[0], padded_rows[0], *main_rows[1:], *utilisation_rows(samples, gemm)]
    wall = time.perf_counter() - started

    print()
    print_table(rows)
    print()
    for r in rows[:2]:
        print(
            f"{r.label}: padding {r.details['pad_fraction']:.1%}; |loss attnlab - loss torch| "
            f"in eval mode {r.details['eval_loss_abs_diff']:.2e}"
        )
    print(
        f"GEMM peak {gemm['peak_gflops']:.0f} GFLOP/s (median {gemm['median_gflops']:.0f}); "
        f"a training step is {step_flops(LENGTH, LENGTH, BATCH)['training_step'] / 1e9:.1f} "
        f"GFLOP (analytic)"
    )
    dims = {
        "shape": args.shape,
        "vocab": VOCAB,
        "d_model": D_MODEL,
        "num_heads": NUM_HEADS,
        "layers": NUM_LAYERS,
        "d_ff": D_FF,
        "dropout": DROPOUT,
        "batch": BATCH,
        "length": LENGTH,
    }
    extra = {"dims": dims, "gemm": gemm, "allocator": allocator}
    return finish("model", args, plan, rows, wall, extra)


if __name__ == "__main__":
    raise SystemExit(main())

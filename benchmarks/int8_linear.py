"""Benchmark the int8 linear maps a decoding step could use, against float32 ``torch.addmm``.

A decoder step at batch 1 is a chain of matrix-vector products: it reads every weight once for
one token, so weights of a quarter of the bytes could make it faster. This measures, per call,
the linear maps of one step of ``benchmarks/decode.py``'s model (d_model 256, d_ff 1024, an
8,000-token output projection), at 1 row and at 32:

* ``fp32``: ``torch.addmm`` with the weight pre-transposed, what the fast step runs (the anchor);
* ``dynamic-int8``: FBGEMM's dynamic-quantized linear (``quantized::linear_dynamic``: int8
  weights with a scale per output row, the input quantized per call to 7 bits), what
  ``quantize="int8"`` runs;
* ``weight-only-int8``: torch's weight-only int8 product (``aten::_weight_int8pack_mm``: the same
  int8 weights and scales, float activations), then the bias added in place.

Outputs are checked before timing, against the product with the dequantized weights (codes
times scales) in float64: weight-only to float rounding, dynamic within what its 7-bit input
costs. Each row is one (shape, rows, int8 op): ratio = int8 time / float32 time, below 1 means
the int8 op is faster. No targets: the rows say which op a step should call.

Timing: the three ops of a row interleaved, in a rotating order, each run ``block`` times back
to back per turn (as it runs in a decoding loop); medians compared with medians.

Run::

    .venv/bin/python benchmarks/int8_linear.py --threads 1
    .venv/bin/python benchmarks/int8_linear.py --threads 2 \
        --out benchmarks/results/int8_linear_2t.json
    .venv/bin/python benchmarks/int8_linear.py --quick   # smoke run
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import attnlab
from attnlab.decode import fast as fastdecode
from common import Row, base_parser, cpu_model, finish, interleaved, print_table, time_row

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "int8_linear.json"
#: (name, in, out): the linear maps of one decoder step of decode.py's model.
SHAPES = (
    ("qkv", 256, 768),
    ("attention out", 256, 256),
    ("ffn 1", 256, 1024),
    ("ffn 2", 1024, 256),
    ("output projection", 256, 8000),
)


@dataclass(frozen=True)
class Plan:
    shapes: tuple[tuple[str, int, int], ...]
    rows: tuple[int, ...]
    reps: int
    block: int
    warmup: int


FULL = Plan(shapes=SHAPES, rows=(1, 32), reps=400, block=20, warmup=20)
QUICK = Plan(shapes=SHAPES[:2], rows=(1,), reps=6, block=2, warmup=1)


def contenders(weight: Tensor, bias: Tensor) -> tuple[dict[str, Any], Tensor]:
    """The three ops for ``weight`` ``(out, in)`` and ``bias``, and the dequantized weight.
    Weight-only int8 reads the codes and scales of the library's own packing (unpacked)."""
    dynamic = fastdecode._int8(weight, bias)  # what quantize="int8" packs and runs
    with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated
        warnings.simplefilter("ignore")
        q, _ = torch.ops.quantized.linear_unpack(dynamic.keywords["W_prepack"])
        codes = q.int_repr().contiguous()
        scale = q.q_per_channel_scales().float()
    weight_t = weight.t().contiguous()
    weight_only = partial(torch.ops.aten._weight_int8pack_mm, mat2=codes, scales=scale)
    ops = {
        "fp32": partial(torch.addmm, bias, mat2=weight_t),
        "dynamic-int8": dynamic,
        "weight-only-int8": lambda x: weight_only(x).add_(bias),
    }
    return ops, codes.double() * scale.double()[:, None]


def measure(plan: Plan) -> list[Row]:
    rows: list[Row] = []
    gen = torch.Generator().manual_seed(0)
    for name, d_in, d_out in plan.shapes:
        weight = torch.randn(d_out, d_in, generator=gen) / d_in**0.5
        bias = torch.randn(d_out, generator=gen) * 0.1
        ops, dequantized = contenders(weight, bias)
        for n in plan.rows:
            x = torch.randn(n, d_in, generator=gen)
            exact = x.double() @ dequantized.t() + bias.double()
            spread = float(exact.abs().max())
            errors = {
                k: float((f(x).double() - exact).abs().max()) / spread for k, f in ops.items()
            }
            # Weight-only is the dequantized product to float rounding; dynamic also rounds its
            # input to 7 bits (a relative error of about 1/127 at worst).
            assert errors["weight-only-int8"] < 1e-5, errors
            assert errors["dynamic-int8"] < 0.05, errors
            samples = interleaved(
                {k: partial(f, x) for k, f in ops.items()}, plan.reps, plan.warmup, plan.block
            )
            details = {"shape": [d_in, d_out], "rows": n, "relative_errors": errors}
            for kind in ("dynamic-int8", "weight-only-int8"):
                label = f"{name} {d_in}->{d_out}, {n} row{'s' * (n > 1)}: {kind}"
                key = f"{name.replace(' ', '_')}_R{n}_{kind}"
                row = time_row(key, label, samples, kind, "fp32", None, details)
                for op in (kind, "fp32"):  # medians and minima are kept, not every sample
                    del row.details[op]["samples_s"]
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__, DEFAULT_OUT, "two shapes, one row, few repetitions")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
        print("this torch has no aten::_weight_int8pack_mm", file=sys.stderr)
        return 2
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    print(
        f"attnlab {attnlab.__version__}, torch {torch.__version__}; threads={args.threads}; "
        f"cpu: {cpu_model()}; {'quick' if args.quick else 'full'} run",
        flush=True,
    )
    rows = measure(plan)
    wall = time.perf_counter() - started
    print()
    print_table(rows)
    return finish("int8_linear", args, plan, rows, wall, {})


if __name__ == "__main__":
    sys.exit(main())

"""T3 (scaling the scores by 1/sqrt(d_k)) and T5, T6 (the cost of heads)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..attention import MultiHeadAttention
from ..flops import attention_costs, compare_heads, measure
from ..viz._figures import figure
from .section import Section, save, table

# -- T3: scaling by 1/sqrt(d_k) --------------------------------------------------------------------


def _softmax_stats(scores: Tensor) -> tuple[float, float]:
    """Median over the rows (the typical query) of softmax's entropy, and of the Frobenius
    norm of its Jacobian ``diag(p) - p p^T`` (how much of a change in the scores reaches the
    weights)."""
    p = torch.softmax(scores, dim=-1)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    jacobian = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]
    return float(entropy.median()), float(torch.linalg.matrix_norm(jacobian).median())


def scaling_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T3",
        "why the scores are divided by sqrt(d_k)",
        "Dot products of d_k-dimensional vectors grow with d_k (their variance is d_k for unit "
        "components); unscaled, they push softmax into saturation, where its gradient vanishes. "
        "Dividing by sqrt(d_k) keeps the scores' variance at 1 for every d_k.",
    )
    keys, queries = 64, 100 if quick else 200
    sizes = [4, 16, 64, 256, 1024]
    rows, results = [], {}
    for d_k in sizes:
        q = torch.randn(queries, 1, d_k, generator=gen, dtype=torch.float64)
        k = torch.randn(queries, keys, d_k, generator=gen, dtype=torch.float64)
        scores = (q * k).sum(-1)  # (queries, keys): every product independent
        raw, scaled = _softmax_stats(scores), _softmax_stats(scores / math.sqrt(d_k))
        variance = float(scores.var())
        results[d_k] = (variance, raw, scaled)
        rows.append(
            [
                d_k,
                f"{variance:.1f}",
                f"{raw[0]:.3f}",
                f"{scaled[0]:.3f}",
                f"{raw[1]:.4f}",
                f"{scaled[1]:.4f}",
            ]
        )
    s.body += [
        f"{queries} random queries, each against its own {keys} random keys, components "
        f"N(0, 1), float64; "
        f"medians over the queries. Entropy is in nats (uniform over {keys} keys: "
        f"{math.log(keys):.3f}); the gradient is the Frobenius norm of softmax's Jacobian "
        f"diag(p) - p p^T.",
        "",
        *table(
            [
                "d_k",
                "var(q.k)",
                "entropy, unscaled",
                "entropy, scaled",
                "gradient, unscaled",
                "gradient, scaled",
            ],
            rows,
        ),
    ]
    for d_k, (variance, _, _) in results.items():
        s.check(
            f"var(q.k) = {variance:.1f} is within 15% of d_k = {d_k}",
            abs(variance / d_k - 1) < 0.15,
        )
    low, high = results[sizes[0]], results[sizes[-1]]
    s.check(
        f"unscaled, the softmax gradient falls from {low[1][1]:.4f} (d_k = {sizes[0]}) to "
        f"{high[1][1]:.4f} (d_k = {sizes[-1]}): more than 5x",
        high[1][1] * 5 < low[1][1],
    )
    s.check(
        f"unscaled, the entropy at d_k = {sizes[-1]} ({high[1][0]:.3f}) is under a quarter of "
        f"the uniform {math.log(keys):.3f} (the weights collapse onto a few keys)",
        high[1][0] < 0.25 * math.log(keys),
    )
    entropy = [r[2][0] for r in results.values()]
    gradient = [r[2][1] for r in results.values()]
    s.check(
        f"scaled, entropy ({min(entropy):.3f} .. {max(entropy):.3f}) and gradient "
        f"({min(gradient):.4f} .. {max(gradient):.4f}) stay within 15% across d_k",
        max(entropy) < 1.15 * min(entropy) and max(gradient) < 1.15 * min(gradient),
    )
    fig = figure(9.0, 3.4, 100)
    for i, (label, index) in enumerate((("softmax entropy (nats)", 0), ("softmax gradient", 1))):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.plot(sizes, [results[d][1][index] for d in sizes], "o-", label="q.k (unscaled)")
        ax.plot(sizes, [results[d][2][index] for d in sizes], "s-", label="q.k / sqrt(d_k)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_k")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("T3: scaling keeps softmax out of saturation")
    save(s, fig, out, "t3_scaling.png")
    return s


# -- T5, T6: the cost of heads -------------------------------------------------------------------


def heads_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T5, T6",
        "multi-head attention costs what single-head attention costs, plus W^O",
        "Splitting d_model into h heads of d_model / h channels leaves every product's total "
        "size unchanged, so the cost does not depend on h; a single-head module without an "
        "output projection differs from a multi-head one exactly by W^O.",
    )
    d_model, seq = 512, 32 if quick else 128
    head_counts = [1, 2, 4, 8, 16, 32, 64]
    x = torch.randn(1, seq, d_model, generator=gen)
    measured, rows = {}, []
    for h in head_counts:
        module = MultiHeadAttention(d_model, h).eval()
        with torch.no_grad():
            measured[h] = measure(lambda module=module: module(x)).macs
        parts = {c.name: c.macs for c in attention_costs(seq, seq, d_model, h)}
        projections = parts["q_proj"] + parts["k_proj"] + parts["v_proj"]
        rows.append(
            [
                h,
                d_model // h,
                f"{measured[h]:,}",
                f"{projections:,}",
                f"{parts['scores'] + parts['weighted_sum']:,}",
                f"{parts['out_proj']:,}",
            ]
        )
    s.body += [
        f"attnlab.MultiHeadAttention({d_model}, h) on one input (1, {seq}, {d_model}), counted "
        f"while running (torch's FlopCounterMode with attnlab's formulas for the CPU "
        f"flash-attention kernels), in multiply-accumulates (MACs; FLOPs = 2 x MACs: a count, "
        f"not a rate).",
        "",
        *table(
            ["heads", "head dim", "measured MACs", "Q, K, V projections", "Q K^T and A V", "W^O"],
            rows,
        ),
    ]
    analytic = sum(c.macs for c in attention_costs(seq, seq, d_model, 8))
    s.check(
        f"the measured count is the same for every head count 1..64 ({measured[1]:,} MACs) and "
        f"equals the closed form",
        len(set(measured.values())) == 1 and measured[1] == analytic,
    )
    experiment = compare_heads(2 if quick else 4, seq, d_model, 8)
    single, multi = experiment["single_head"]["macs"], experiment["multi_head"]["macs"]
    s.check(
        f"single head without W^O: {single:,} MACs; 8 heads with W^O: {multi:,}; the "
        f"difference, {multi - single:,}, is exactly W^O's {experiment['w_o']['macs']:,}",
        experiment["difference"] == experiment["w_o"],
    )
    tutorial = compare_heads(measured=False)  # (32, 1024, 512): the tutorial's input
    s.body += [
        "",
        f"At the tutorial's size, input (32, 1024, 512), the closed forms give "
        f"{tutorial['single_head']['macs']:,} MACs for the single-head module and "
        f"{tutorial['multi_head']['macs']:,} for the 8-head one: the numbers the tutorial "
        f"printed with fvcore (which counts one multiply-add as one 'flop'), "
        f"{tutorial['single_head']['flops']:,} and {tutorial['multi_head']['flops']:,} FLOPs.",
    ]
    s.check(
        "the closed forms reproduce the tutorial's fvcore output, 60,129,542,144 and "
        "68,719,476,736",
        (tutorial["single_head"]["macs"], tutorial["multi_head"]["macs"])
        == (60_129_542_144, 68_719_476_736),
    )
    fig = figure(7.0, 3.4, 100)
    ax = fig.add_subplot(1, 1, 1)
    bottom = np.zeros(len(head_counts))
    costs = [{c.name: c.macs for c in attention_costs(seq, seq, d_model, h)} for h in head_counts]
    for label, names in (
        ("Q, K, V", ("q_proj", "k_proj", "v_proj")),
        ("Q K^T, A V", ("scores", "weighted_sum")),
        ("W^O", ("out_proj",)),
    ):
        heights = np.array([sum(c[n] for n in names) for c in costs], dtype=float) / 1e6
        ax.bar([str(h) for h in head_counts], heights, bottom=bottom, label=label)
        bottom += heights
    ax.set_xlabel("heads (d_model = 512)")
    ax.set_ylabel("million MACs")
    ax.set_ylim(0, bottom.max() * 1.3)
    ax.legend(fontsize=8, ncol=3, loc="upper center")
    ax.set_title("T5: the cost of attention does not depend on the number of heads")
    save(s, fig, out, "t5_heads.png")
    return s

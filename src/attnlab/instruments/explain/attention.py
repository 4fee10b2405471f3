"""T3 (scaling the scores by 1/sqrt(d_k)) and T5, T6 (the cost of heads)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ...nn.attention import MultiHeadAttention
from ..flops import attention_costs, compare_heads, measure
from ..viz._figures import figure
from .section import Prose, Section, save, table

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
        Prose("why the scores are divided by sqrt(d_k)", "为什么注意力分数要除以 sqrt(d_k)"),
        Prose(
            "Dot products of d_k-dimensional vectors grow with d_k (their variance is d_k for "
            "unit components); unscaled, they push softmax into saturation, where its gradient "
            "vanishes. Dividing by sqrt(d_k) keeps the scores' variance at 1 for every d_k.",
            "d_k 维向量的点积随 d_k 增大（分量为单位方差时，点积的方差等于 d_k）；不做缩放，"
            "点积的数值很大，会把 softmax 推进饱和区，梯度随之变得很小。除以 sqrt(d_k) 之后，"
            "无论 d_k 取多大，分数的方差都保持为 1。",
        ),
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
    uniform = math.log(keys)
    s.body += [
        Prose(
            f"{queries} random queries, each against its own {keys} random keys, components "
            f"N(0, 1), float64; medians over the queries. Entropy is in nats (uniform over "
            f"{keys} keys: {uniform:.3f}); the gradient is the Frobenius norm of softmax's "
            f"Jacobian diag(p) - p p^T.",
            f"{queries} 个随机 query，每个各自对应 {keys} 个随机 key，各分量服从 N(0, 1)，"
            f"float64 精度；表中取所有 query 的中位数。熵以 nats 为单位（在 {keys} 个 key "
            f"上均匀分布时为 {uniform:.3f}）；梯度指 softmax 的 Jacobian 矩阵 diag(p) - p p^T "
            f"的 Frobenius 范数。",
        ),
        "",
        *table(
            [
                "d_k",
                "var(q.k)",
                Prose("entropy, unscaled", "熵（未缩放）"),
                Prose("entropy, scaled", "熵（缩放后）"),
                Prose("gradient, unscaled", "梯度（未缩放）"),
                Prose("gradient, scaled", "梯度（缩放后）"),
            ],
            rows,
        ),
    ]
    for d_k, (variance, _, _) in results.items():
        s.check(
            Prose(
                f"var(q.k) = {variance:.1f} is within 15% of d_k = {d_k}",
                f"var(q.k) = {variance:.1f}，与 d_k = {d_k} 相差不到 15%",
            ),
            abs(variance / d_k - 1) < 0.15,
        )
    low, high = results[sizes[0]], results[sizes[-1]]
    s.check(
        Prose(
            f"unscaled, the softmax gradient falls from {low[1][1]:.4f} (d_k = {sizes[0]}) to "
            f"{high[1][1]:.4f} (d_k = {sizes[-1]}): more than 5x",
            f"未缩放时，softmax 的梯度从 {low[1][1]:.4f}（d_k = {sizes[0]}）降到 "
            f"{high[1][1]:.4f}（d_k = {sizes[-1]}），降幅超过 5 倍",
        ),
        high[1][1] * 5 < low[1][1],
    )
    s.check(
        Prose(
            f"unscaled, the entropy at d_k = {sizes[-1]} ({high[1][0]:.3f}) is under a quarter "
            f"of the uniform {uniform:.3f} (the weights collapse onto a few keys)",
            f"未缩放时，d_k = {sizes[-1]} 处的熵（{high[1][0]:.3f}）不到均匀分布的熵 "
            f"{uniform:.3f} 的四分之一（权重集中到了少数几个 key 上）",
        ),
        high[1][0] < 0.25 * uniform,
    )
    entropy = [r[2][0] for r in results.values()]
    gradient = [r[2][1] for r in results.values()]
    s.check(
        Prose(
            f"scaled, entropy ({min(entropy):.3f} .. {max(entropy):.3f}) and gradient "
            f"({min(gradient):.4f} .. {max(gradient):.4f}) stay within 15% across d_k",
            f"缩放后，在各个 d_k 下，熵（{min(entropy):.3f} .. {max(entropy):.3f}）和梯度"
            f"（{min(gradient):.4f} .. {max(gradient):.4f}）的变化都在 15% 以内",
        ),
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
        Prose(
            "multi-head attention costs what single-head attention costs, plus W^O",
            "多头注意力的计算量与单头注意力相同，只多出 W^O 一项",
        ),
        Prose(
            "Splitting d_model into h heads of d_model / h channels leaves every product's total "
            "size unchanged, so the cost does not depend on h; a single-head module without an "
            "output projection differs from a multi-head one exactly by W^O.",
            "把 d_model 均分成 h 个头、每个头 d_model / h 个通道，并不改变任何一次矩阵乘法的"
            "总规模，所以计算量与 h 无关；去掉输出投影的单头模块与多头模块之间的差别，恰好就是 "
            "W^O 这一项。",
        ),
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
        Prose(
            f"attnlab.MultiHeadAttention({d_model}, h) on one input (1, {seq}, {d_model}), "
            f"counted while running (torch's FlopCounterMode with attnlab's formulas for the CPU "
            f"flash-attention kernels), in multiply-accumulates (MACs; FLOPs = 2 x MACs: a "
            f"count, not a rate).",
            f"在一个形状为 (1, {seq}, {d_model}) 的输入上运行 "
            f"attnlab.MultiHeadAttention({d_model}, h)，边运行边计数（torch 的 FlopCounterMode，"
            f"加上 attnlab 为 CPU 上 flash-attention 内核补充的公式），单位是乘加次数（MACs；"
            f"FLOPs = 2 x MACs：FLOPs 是运算次数，不是每秒运算次数那样的速率）。",
        ),
        "",
        *table(
            [
                Prose("heads", "头数"),
                Prose("head dim", "每个头的维度"),
                Prose("measured MACs", "实测 MACs"),
                Prose("Q, K, V projections", "Q、K、V 投影"),
                Prose("Q K^T and A V", "Q K^T 与 A V"),
                "W^O",
            ],
            rows,
        ),
    ]
    analytic = sum(c.macs for c in attention_costs(seq, seq, d_model, 8))
    s.check(
        Prose(
            f"the measured count is the same for every head count 1..64 ({measured[1]:,} MACs) "
            f"and equals the closed form",
            f"头数取 1..64 中的每一个值，实测计数都相同（{measured[1]:,} MACs），并且等于解析"
            f"公式给出的值",
        ),
        len(set(measured.values())) == 1 and measured[1] == analytic,
    )
    experiment = compare_heads(2 if quick else 4, seq, d_model, 8)
    single, multi = experiment["single_head"]["macs"], experiment["multi_head"]["macs"]
    w_o = experiment["w_o"]["macs"]
    s.check(
        Prose(
            f"single head without W^O: {single:,} MACs; 8 heads with W^O: {multi:,}; the "
            f"difference, {multi - single:,}, is exactly W^O's {w_o:,}",
            f"不带 W^O 的单头：{single:,} MACs；带 W^O 的 8 头：{multi:,}；两者之差 "
            f"{multi - single:,} 恰好等于 W^O 的 {w_o:,}",
        ),
        experiment["difference"] == experiment["w_o"],
    )
    tutorial = compare_heads(measured=False)  # (32, 1024, 512): the tutorial's input
    one, eight = tutorial["single_head"], tutorial["multi_head"]
    s.body += [
        "",
        Prose(
            f"At the tutorial's size, input (32, 1024, 512), the closed forms give "
            f"{one['macs']:,} MACs for the single-head module and {eight['macs']:,} for the "
            f"8-head one: the numbers the tutorial printed with fvcore (which counts one "
            f"multiply-add as one 'flop'), {one['flops']:,} and {eight['flops']:,} FLOPs.",
            f"在教程使用的尺寸下（输入 (32, 1024, 512)），解析公式给出单头模块 "
            f"{one['macs']:,} MACs、8 头模块 {eight['macs']:,} MACs，正是教程用 fvcore 打印出的"
            f"数字（fvcore 把一次乘加记作一个 'flop'）；换算成 FLOPs 分别是 {one['flops']:,} 和 "
            f"{eight['flops']:,}。",
        ),
    ]
    s.check(
        Prose(
            "the closed forms reproduce the tutorial's fvcore output, 60,129,542,144 and "
            "68,719,476,736",
            "解析公式重现了教程中 fvcore 的输出：60,129,542,144 和 68,719,476,736",
        ),
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

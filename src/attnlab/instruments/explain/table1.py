"""Table 1 of Vaswani et al. 2017: the per-layer cost of self-attention, recurrent and
convolutional layers, counted and timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..flops import table1
from ..viz._figures import figure
from .section import Prose, Section, save, table

# -- Table 1 -------------------------------------------------------------------------------------


def _time(fn: Callable[[], object], reps: int, budget: float = 0.05) -> float:
    """Best of at least ``reps`` timed calls (more, up to 100, while they fit in ``budget``
    seconds) after one warm-up call: on a shared machine the fastest run is the one least
    disturbed, and cheap calls get many chances."""
    fn()
    samples: list[float] = []
    while len(samples) < reps or (sum(samples) < budget and len(samples) < 100):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def table1_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "Table 1",
        Prose(
            "per-layer cost: self-attention, recurrent and convolutional layers",
            "每层的计算量：Self-Attention 层、循环层与卷积层",
        ),
        Prose(
            "A self-attention layer costs O(n^2 d) against a recurrent layer's O(n d^2): it is "
            "cheaper while the sequence is shorter than the representation (n < d), and it needs "
            "O(1) sequential operations against the recurrent layer's O(n).",
            "Self-Attention 层的计算量是 O(n^2 d)，循环层是 O(n d^2)：只要序列长度小于表示的维度"
            "（n < d），Self-Attention 就更便宜；而且它只需要 O(1) 次顺序操作，循环层则需要 "
            "O(n) 次，无法在时间步上并行。",
        ),
    )
    d, heads = 512, 8
    lengths = [16, 64, 256, 1024] if quick else [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    reps = 3 if quick else 5
    rnn = nn.RNN(d, d, batch_first=True).eval()
    conv = nn.Conv1d(d, d, 3, padding=1).eval()
    rows, times = [], {}
    with torch.no_grad():
        warm = torch.randn(1, 64, d, generator=gen)  # first calls initialise the kernels
        for _ in range(3):
            rnn(warm), conv(warm.transpose(1, 2)), F.scaled_dot_product_attention(warm, warm, warm)
        for n in lengths:
            q, k, v = (torch.randn(1, heads, n, d // heads, generator=gen) for _ in range(3))
            x = torch.randn(1, n, d, generator=gen)
            times[n] = (
                _time(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v), reps),
                _time(lambda x=x: rnn(x), reps),
                _time(lambda x=x: conv(x.transpose(1, 2)), reps),
            )
            attention, _, recurrent, convolution, _ = (r["macs"] for r in table1(n, d))
            rows.append(
                [
                    n,
                    f"{attention:,}",
                    f"{recurrent:,}",
                    f"{convolution:,}",
                    *(f"{t * 1e3:.3f}" for t in times[n]),
                ]
            )
    s.body += [
        Prose(
            f"d = {d}. Counts (MACs) from attnlab.instruments.flops.table1: self-attention's "
            f"core Q K^T and A V (2 n^2 d; its projections, 4 n d^2, come on top), a tanh "
            f"recurrent layer (2 n d^2, in n sequential steps), a convolution with kernel 3 "
            f"(3 n d^2). Times: "
            f"best of at least {reps} runs (up to 100 for cheap sizes), fp32, this machine's "
            f"threads: torch's fused attention on {heads} heads, torch.nn.RNN, torch.nn.Conv1d.",
            f"d = {d}。计数（MACs）来自 attnlab.instruments.flops.table1："
            f"Self-Attention 的核心 Q K^T 与 A V（2 n^2 d；投影另计 4 n d^2）、"
            f"tanh 循环层（2 n d^2，分 n 个顺序步骤）、卷积核"
            f"大小为 3 的卷积（3 n d^2）。计时：至少运行 {reps} 次取最快的一次（开销小的尺寸最多 "
            f"100 次），fp32，使用本机的线程：torch 的融合注意力（{heads} 个头）、torch.nn.RNN、"
            f"torch.nn.Conv1d。",
        ),
        "",
        *table(
            [
                "n",
                Prose("self-attention MACs", "Self-Attention MACs"),
                Prose("recurrent MACs", "循环层 MACs"),
                Prose("convolution MACs", "卷积 MACs"),
                Prose("self-attention ms", "Self-Attention 毫秒"),
                Prose("recurrent ms", "循环层毫秒"),
                Prose("convolution ms", "卷积毫秒"),
            ],
            rows,
        ),
    ]
    count_crossover = next(n for n in range(1, 2 * d + 2) if 2 * n * n * d >= 2 * n * d * d)
    s.check(
        Prose(
            f"counted, self-attention becomes as costly as the recurrent layer at n = "
            f"{count_crossover} = d",
            f"按计数，Self-Attention 在 n = {count_crossover} = d 处与循环层一样贵",
        ),
        count_crossover == d,
    )
    ratio = [times[n][0] / times[n][1] for n in lengths]
    s.observe(
        Prose(
            f"timed, self-attention / recurrent grows with n (from {ratio[0]:.3f} at n = "
            f"{lengths[0]} to {ratio[-1]:.2f} at n = {lengths[-1]})",
            f"计时上，Self-Attention 与循环层的耗时之比随 n 增大（从 n = {lengths[0]} 时的 "
            f"{ratio[0]:.3f} 增至 n = {lengths[-1]} 时的 {ratio[-1]:.2f}）",
        ),
        ratio[-1] > ratio[0],
    )
    a, b = lengths[-2], lengths[-1]
    grow_attention = times[b][0] / times[a][0]
    grow_recurrent = times[b][1] / times[a][1]
    s.observe(
        Prose(
            f"from n = {a} to {b}, self-attention's time grows {grow_attention:.1f}x, the "
            f"recurrent layer's {grow_recurrent:.1f}x: quadratic against linear",
            f"从 n = {a} 到 {b}，Self-Attention 的耗时增长 {grow_attention:.1f} 倍，循环层增长 "
            f"{grow_recurrent:.1f} 倍：平方增长对线性增长",
        ),
        grow_attention > grow_recurrent,
    )
    slower = [n for n in lengths if times[n][0] > times[n][1]]
    if slower:
        s.body += [
            "",
            Prose(
                f"Timed on this machine, self-attention is first slower than the recurrent layer "
                f"at n = {slower[0]} (d = {d}): the counted crossover is n = d; time also pays "
                f"for the recurrent layer's {slower[0]} sequential steps.",
                f"在本机计时，Self-Attention 从 n = {slower[0]}（d = {d}）起才慢于循环层：按计数，"
                f"交叉点是 n = d；而耗时还要算上循环层那 {slower[0]} 个顺序步骤。",
            ),
        ]
    else:
        s.body += [
            "",
            Prose(
                f"Timed on this machine, self-attention stays faster than the recurrent layer up "
                f"to n = {lengths[-1]}: the recurrent layer's sequential steps cost more than its "
                f"count says.",
                f"在本机计时，直到 n = {lengths[-1]}，Self-Attention 都比循环层快：循环层的顺序"
                f"步骤实际耗时比它的计数所显示的更多。",
            ),
        ]
    fig = figure(10.0, 3.8, 100)
    ax = fig.add_subplot(1, 2, 1)
    for label, key in (("self-attention", 0), ("recurrent", 1), ("convolution (k=3)", 2)):
        macs = [table1(n, d)[[0, 2, 3][key]]["macs"] for n in lengths]
        ax.plot(lengths, macs, "o-", label=label)
    ax.axvline(d, color="grey", ls="--", lw=1)
    ax.set_title("counted (MACs per layer)")
    ax2 = fig.add_subplot(1, 2, 2)
    for label, key in (("self-attention", 0), ("recurrent", 1), ("convolution (k=3)", 2)):
        ax2.plot(lengths, [times[n][key] * 1e3 for n in lengths], "o-", label=label)
    ax2.axvline(d, color="grey", ls="--", lw=1)
    ax2.set_title("timed (ms per layer)")
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("sequence length n (dashed: n = d = 512)")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    save(s, fig, out, "table1.png")
    return s

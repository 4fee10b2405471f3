"""T7 (order: self-attention without positions is permutation-equivariant), T10, T11 (masked
weights are exactly 0; the decoder cannot see the future) and T12 (two ways to mask)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ...models.transformer import TransformerConfig, TransformerLM
from ...nn.attention import MultiHeadAttention
from ...nn.masks import key_mask, padding_mask
from ...nn.positional import RotaryEmbedding, SinusoidalPositionalEncoding
from .. import viz
from ..viz._figures import figure
from .section import Prose, Section, save, table

# -- T7: order -----------------------------------------------------------------------------------


def order_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T7",
        Prose("attention alone is blind to order", "仅靠注意力无法感知顺序"),
        Prose(
            "Without positional information, permuting the input tokens of self-attention "
            "permutes its outputs and changes nothing else; a positional encoding breaks that "
            "symmetry.",
            "没有位置信息时，打乱 Self-Attention 输入 token 的顺序，输出只会按同样的方式被打乱，"
            "除此之外没有任何变化；加入位置编码就打破了这种对称性。",
        ),
    )
    d_model, length = 64, 10
    mha = MultiHeadAttention(d_model, 4).eval()
    rotary = MultiHeadAttention(d_model, 4, positional=RotaryEmbedding(16)).eval()
    rotary.load_state_dict(mha.state_dict())
    x = torch.randn(1, length, d_model, generator=gen)
    perm = torch.randperm(length, generator=gen)
    pe = SinusoidalPositionalEncoding(d_model)
    with torch.no_grad():
        plain = (mha(x[:, perm])[0] - mha(x)[0][:, perm]).abs().max().item()
        sinusoidal = (mha(pe(x[:, perm]))[0] - mha(pe(x))[0][:, perm]).abs().max().item()
        rope = (rotary(x[:, perm])[0] - rotary(x)[0][:, perm]).abs().max().item()
    s.body += [
        Prose(
            f"MultiHeadAttention({d_model}, 4), a random input of {length} tokens and a random "
            f"permutation P; the table gives max |f(P x) - P f(x)|.",
            f"MultiHeadAttention({d_model}, 4)，随机输入 {length} 个 token，随机置换 P；"
            f"表中给出 max |f(P x) - P f(x)|。",
        ),
        "",
        *table(
            [Prose("positional information", "位置信息"), "max |f(Px) - P f(x)|"],
            [
                [Prose("none", "无"), f"{plain:.1e}"],
                [
                    Prose(
                        "sinusoidal, added to the input (sec. 3.5)",
                        "正弦位置编码，加在输入上（论文 3.5 节）",
                    ),
                    f"{sinusoidal:.3f}",
                ],
                [
                    Prose(
                        "rotary (RoPE), inside attention", "旋转位置编码（RoPE），作用在注意力内部"
                    ),
                    f"{rope:.3f}",
                ],
            ],
        ),
    ]
    s.check(
        Prose(
            f"without positions, f(Px) = P f(x) (difference {plain:.1e} < 1e-5)",
            f"没有位置信息时 f(Px) = P f(x)（差 {plain:.1e} < 1e-5）",
        ),
        plain < 1e-5,
    )
    s.check(
        Prose(
            f"with the sinusoidal encoding it is not (difference {sinusoidal:.3f} > 1e-2)",
            f"加上正弦位置编码后不再相等（差 {sinusoidal:.3f} > 1e-2）",
        ),
        sinusoidal > 1e-2,
    )
    s.check(
        Prose(
            f"with RoPE it is not either (difference {rope:.3f} > 1e-2)",
            f"用 RoPE 也不相等（差 {rope:.3f} > 1e-2）",
        ),
        rope > 1e-2,
    )
    viz.positional_encoding(128, 100, path=out / "t7_positional_encoding.png")
    s.figures.append("t7_positional_encoding.png")
    return s


# -- T10, T11: masks -------------------------------------------------------------------------------


def masks_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T10, T11",
        Prose(
            "masked weights are exactly 0; the decoder cannot see the future",
            "被 mask 的权重恰好为 0；解码器看不到未来",
        ),
        Prose(
            "A padding mask gives padded keys zero weight, so padding changes nothing for the "
            "real tokens; the look-ahead mask hides later positions, so a decoder's output at "
            "position t does not depend on the tokens after t.",
            "padding mask 让填充出来的 key 权重为零，所以填充不会改变真实 token 的结果；"
            "look-ahead mask（下三角矩阵）遮住后面的位置，所以解码器在位置 t 的输出不依赖 t "
            "之后的 token，不会利用未来信息。",
        ),
    )
    d_model = 32
    mha = MultiHeadAttention(d_model, 4).eval()
    lengths = [5, 3]
    x = torch.randn(2, 5, d_model, generator=gen)
    real = padding_mask(lengths)
    with torch.no_grad():
        out_padded, weights = mha(x, mask=key_mask(real), need_weights=True)
        alone, _ = mha(x[1:, :3])
    on_pads = weights[1, :, :, 3:].abs().max().item()
    unchanged = (out_padded[1, :3] - alone[0]).abs().max().item()
    s.check(
        Prose(
            f"weight on the padded keys: {on_pads} (exactly 0)",
            f"填充 key 上的权重：{on_pads}（恰好为 0）",
        ),
        on_pads == 0.0,
    )
    s.check(
        Prose(
            f"the real tokens' outputs equal those of the sentence alone ({unchanged:.1e})",
            f"真实 token 的输出与单独输入这句话时相同（{unchanged:.1e}）",
        ),
        unchanged < 1e-6,
    )

    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    lm = TransformerLM(TransformerConfig.preset("tiny", dropout=0.0)).eval()
    ids = torch.randint(3, 1000, (1, 12), generator=gen)
    changed = ids.clone()
    changed[0, 7:] = torch.randint(3, 1000, (5,), generator=gen)
    with torch.no_grad():
        before, after = lm(ids), lm(changed)
        maps = lm.attention(ids)
    past = (before[0, :7] - after[0, :7]).abs().max().item()
    future = (before[0, 7:] - after[0, 7:]).abs().max().item()
    above = max(w[0].triu(diagonal=1).abs().max().item() for w in maps.decoder)
    s.body += [
        Prose(
            f"Padding: MultiHeadAttention({d_model}, 4) on a batch of sentences of lengths "
            f"{lengths}, with the key padding mask. Look-ahead: the tiny TransformerLM on 12 "
            f"tokens, then on the same tokens with positions 7..11 replaced.",
            f"padding mask：MultiHeadAttention({d_model}, 4) 作用于一批长度为 {lengths} 的句子，"
            f"使用 key padding mask。look-ahead mask：tiny 配置的 TransformerLM 先处理 12 个 "
            f"token，再处理把位置 7..11 换掉后的同一序列。",
        ),
        "",
        *table(
            [Prose("quantity", "量"), Prose("value", "数值")],
            [
                [Prose("max weight on padded keys", "填充 key 上的最大权重"), f"{on_pads}"],
                [
                    Prose(
                        "max change of logits at positions 0..6", "位置 0..6 上 logits 的最大变化"
                    ),
                    f"{past:.1e}",
                ],
                [
                    Prose(
                        "max change of logits at positions 7..11",
                        "位置 7..11 上 logits 的最大变化",
                    ),
                    f"{future:.3f}",
                ],
                [
                    Prose(
                        "max weight above the diagonal, every layer and head",
                        "对角线以上的最大权重（所有层、所有头）",
                    ),
                    f"{above}",
                ],
            ],
        ),
    ]
    s.check(
        Prose(
            f"changing tokens 7..11 leaves positions 0..6 unchanged ({past:.1e} < 1e-6)",
            f"改动 token 7..11 之后，位置 0..6 的输出不变（{past:.1e} < 1e-6）",
        ),
        past < 1e-6,
    )
    s.check(
        Prose(
            f"... and changes the later positions ({future:.3f})",
            f"……而后面位置的输出随之改变（{future:.3f}）",
        ),
        future > 1e-3,
    )
    s.check(
        Prose(
            f"every weight above the diagonal is exactly 0 ({above})",
            f"对角线以上的每个权重都恰好为 0（{above}）",
        ),
        above == 0.0,
    )
    viz.masks(lengths, causal=True, path=out / "t10_masks.png")
    viz.attention_heatmaps(
        [maps.decoder[0][0]],
        [str(t) for t in ids[0].tolist()],
        title="T11: decoder self-attention, layer 1 (look-ahead masked)",
        path=out / "t11_causal_weights.png",
    )
    s.figures += ["t10_masks.png", "t11_causal_weights.png"]
    return s


# -- T12: two ways to mask -----------------------------------------------------------------------


def masking_styles_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T12",
        Prose(
            "masking in the scores vs a mask vector in the input",
            "在分数上做 mask，还是在输入中放掩码向量",
        ),
        Prose(
            "Masking can zero the attention weights of masked positions (scores set to -inf "
            "before softmax), or replace the masked input vectors with a special mask vector. "
            "Only the first removes the masked positions from the computation.",
            "mask 有两种做法：把被掩盖位置的注意力权重置零（在 softmax 之前把分数设为 -inf），"
            "或者把被掩盖位置的输入向量换成一个特殊的掩码向量。只有前一种真正把这些位置从计算中"
            "去掉。",
        ),
    )
    d_model, real_len = 32, 4
    mha = MultiHeadAttention(d_model, 4).eval()
    x = torch.randn(1, real_len, d_model, generator=gen)
    mask_vector = torch.randn(d_model, generator=gen)
    outputs, weights = {}, {}
    with torch.no_grad():
        alone, _ = mha(x)
        for pads in (2, 6):
            padded = torch.cat([x, torch.zeros(1, pads, d_model)], dim=1)
            real = padding_mask([real_len], real_len + pads)
            a, wa = mha(padded, mask=key_mask(real), need_weights=True)
            vector = torch.cat([x, mask_vector.expand(1, pads, d_model)], dim=1)
            b, wb = mha(vector, need_weights=True)
            outputs[pads] = (a[0, :real_len], b[0, :real_len])
            weights[pads] = (wa[0].mean(0), wb[0].mean(0))
        # Zeroing weights after softmax: renormalised it is the -inf mask; raw, rows sum < 1.
        with_mask = torch.cat([x, mask_vector.expand(1, 2, d_model)], dim=1)
        q, k, _ = mha.project(with_mask)  # per head: (1, H, T, Dh)
        scores = q @ k.transpose(-1, -2) / math.sqrt(mha.head_dim)  # (1, H, T, T)
        zeroed = torch.softmax(scores, dim=-1)
        zeroed[..., real_len:] = 0.0
        renormalised = zeroed / zeroed.sum(-1, keepdim=True)
        inf_scores = scores.masked_fill(
            ~padding_mask([real_len], real_len + 2)[:, None, None, :], -math.inf
        )
        same = (renormalised - torch.softmax(inf_scores, dim=-1)).abs().max().item()
        row_sum = zeroed[0, :, :real_len].sum(-1).min().item()
    exact = max((outputs[p][0] - alone[0]).abs().max().item() for p in outputs)
    vector_diff = min((outputs[p][1] - alone[0]).abs().max().item() for p in outputs)
    depends = (outputs[2][1] - outputs[6][1]).abs().max().item()
    leaked = min(weights[p][1][:real_len, real_len:].sum(-1).min().item() for p in weights)
    s.body += [
        Prose(
            f"MultiHeadAttention({d_model}, 4) on a sentence of {real_len} tokens followed by 2 "
            f"or 6 masked positions: (a) zeros with the key padding mask (scores -inf, so "
            f"weights 0); (b) a fixed 'mask vector' in their place and no attention mask.",
            f"MultiHeadAttention({d_model}, 4) 作用于一个 {real_len} 个 token 的句子，后接 2 个"
            f"或 6 个被掩盖的位置：(a) 这些位置填零向量，并使用 key padding mask（分数为 -inf，"
            f"因此权重为 0）；(b) 在这些位置放一个固定的“掩码向量”，不使用任何注意力 mask。",
        ),
        "",
        *table(
            [
                Prose("quantity", "量"),
                Prose("(a) -inf scores", "(a) 分数设为 -inf"),
                Prose("(b) mask vector", "(b) 掩码向量"),
            ],
            [
                [
                    Prose(
                        "max difference of the real tokens' outputs from the sentence alone",
                        "真实 token 的输出与单独输入这句话时的最大差",
                    ),
                    f"{exact:.1e}",
                    f"{vector_diff:.3f}",
                ],
                [
                    Prose(
                        "weight the real tokens give the masked positions (at least)",
                        "真实 token 分给被掩盖位置的权重（最小值）",
                    ),
                    "0",
                    f"{leaked:.3f}",
                ],
                [
                    Prose(
                        "outputs with 2 vs 6 masked positions differ by",
                        "掩盖 2 个与 6 个位置时输出之差",
                    ),
                    "0",
                    f"{depends:.3f}",
                ],
            ],
        ),
        "",
        Prose(
            f"Zeroing the weights after softmax is the same as (a) only once the rows are "
            f"renormalised (difference {same:.1e}); without renormalising, the real tokens' rows "
            f"sum to as little as {row_sum:.3f} instead of 1.",
            f"在 softmax 之后把权重置零，只有每行重新归一化之后才与 (a) 相同（差 {same:.1e}）；"
            f"不重新归一化，真实 token 那几行的权重之和最低只有 {row_sum:.3f}，而不是 1。",
        ),
    ]
    s.check(
        Prose(
            f"(a) the real tokens' outputs are those of the sentence alone ({exact:.1e})",
            f"(a) 真实 token 的输出与单独输入这句话时相同（{exact:.1e}）",
        ),
        exact < 1e-6,
    )
    s.check(
        Prose(
            f"(b) they are not ({vector_diff:.3f} > 1e-3): the mask vector is attended to "
            f"(weight {leaked:.3f})",
            f"(b) 不相同（{vector_diff:.3f} > 1e-3）：掩码向量也分到了注意力（权重 {leaked:.3f}）",
        ),
        vector_diff > 1e-3 and leaked > 0,
    )
    s.check(
        Prose(
            f"(b) the result depends on how many positions are masked ({depends:.3f})",
            f"(b) 结果取决于掩盖了多少个位置（{depends:.3f}）",
        ),
        depends > 1e-3,
    )
    s.check(
        Prose(
            f"zeroing after softmax and renormalising equals -inf scores ({same:.1e})",
            f"softmax 之后置零再重新归一化，等价于把分数设为 -inf（{same:.1e}）",
        ),
        same < 1e-6 and row_sum < 1.0,
    )
    fig = figure(8.0, 3.8, 100)
    top = max(float(w.max()) for w in weights[2])
    for i, (title, w) in enumerate(
        (("(a) -inf scores", weights[2][0]), ("(b) mask vector", weights[2][1]))
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        image = ax.imshow(w.numpy(), vmin=0, vmax=top, cmap="viridis")
        ax.set_title(title)
        ax.set_xlabel("key (last 2 masked)")
        ax.set_ylabel("query")
    fig.colorbar(image, ax=fig.axes, shrink=0.8, label="weight (mean over heads)")
    fig.suptitle("T12: only masking the scores removes the masked positions")
    save(s, fig, out, "t12_masking_styles.png")
    return s

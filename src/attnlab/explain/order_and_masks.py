"""T7 (order: self-attention without positions is permutation-equivariant), T10, T11 (masked
weights are exactly 0; the decoder cannot see the future) and T12 (two ways to mask)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from .. import viz
from ..attention import MultiHeadAttention
from ..masks import key_mask, padding_mask
from ..model import TransformerConfig, TransformerLM
from ..positional import RotaryEmbedding, SinusoidalPositionalEncoding
from ..viz._figures import figure
from .section import Section, save, table

# -- T7: order -----------------------------------------------------------------------------------


def order_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T7",
        "attention alone is blind to order",
        "Without positional information, permuting the input tokens of self-attention permutes "
        "its outputs and changes nothing else; a positional encoding breaks that symmetry.",
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
        f"MultiHeadAttention({d_model}, 4), a random input of {length} tokens and a random "
        f"permutation P; the table gives max |f(P x) - P f(x)|.",
        "",
        *table(
            ["positional information", "max |f(Px) - P f(x)|"],
            [
                ["none", f"{plain:.1e}"],
                ["sinusoidal, added to the input (sec. 3.5)", f"{sinusoidal:.3f}"],
                ["rotary (RoPE), inside attention", f"{rope:.3f}"],
            ],
        ),
    ]
    s.check(f"without positions, f(Px) = P f(x) (difference {plain:.1e} < 1e-5)", plain < 1e-5)
    s.check(
        f"with the sinusoidal encoding it is not (difference {sinusoidal:.3f} > 1e-2)",
        sinusoidal > 1e-2,
    )
    s.check(f"with RoPE it is not either (difference {rope:.3f} > 1e-2)", rope > 1e-2)
    viz.positional_encoding(128, 100, path=out / "t7_positional_encoding.png")
    s.figures.append("t7_positional_encoding.png")
    return s


# -- T10, T11: masks -------------------------------------------------------------------------------


def masks_claim(out: Path, quick: bool, gen: torch.Generator) -> Section:
    s = Section(
        "T10, T11",
        "masked weights are exactly 0; the decoder cannot see the future",
        "A padding mask gives padded keys zero weight, so padding changes nothing for the real "
        "tokens; the look-ahead mask hides later positions, so a decoder's output at position "
        "t does not depend on the tokens after t.",
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
    s.check(f"weight on the padded keys: {on_pads} (exactly 0)", on_pads == 0.0)
    s.check(
        f"the real tokens' outputs equal those of the sentence alone ({unchanged:.1e})",
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
        f"Padding: MultiHeadAttention({d_model}, 4) on a batch of sentences of lengths "
        f"{lengths}, with the key padding mask. Look-ahead: the tiny TransformerLM on 12 "
        f"tokens, then on the same tokens with positions 7..11 replaced.",
        "",
        *table(
            ["quantity", "value"],
            [
                ["max weight on padded keys", f"{on_pads}"],
                ["max change of logits at positions 0..6", f"{past:.1e}"],
                ["max change of logits at positions 7..11", f"{future:.3f}"],
                ["max weight above the diagonal, every layer and head", f"{above}"],
            ],
        ),
    ]
    s.check(
        f"changing tokens 7..11 leaves positions 0..6 unchanged ({past:.1e} < 1e-6)", past < 1e-6
    )
    s.check(f"... and changes the later positions ({future:.3f})", future > 1e-3)
    s.check(f"every weight above the diagonal is exactly 0 ({above})", above == 0.0)
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
        "masking in the scores vs a mask vector in the input",
        "Masking can zero the attention weights of masked positions (scores set to -inf before "
        "softmax), or replace the masked input vectors with a special mask vector. Only the "
        "first removes the masked positions from the computation.",
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
        f"MultiHeadAttention({d_model}, 4) on a sentence of {real_len} tokens followed by 2 or "
        f"6 masked positions: (a) zeros with the key padding mask (scores -inf, so weights 0); "
        f"(b) a fixed 'mask vector' in their place and no attention mask.",
        "",
        *table(
            ["quantity", "(a) -inf scores", "(b) mask vector"],
            [
                [
                    "max difference of the real tokens' outputs from the sentence alone",
                    f"{exact:.1e}",
                    f"{vector_diff:.3f}",
                ],
                [
                    "weight the real tokens give the masked positions (at least)",
                    "0",
                    f"{leaked:.3f}",
                ],
                ["outputs with 2 vs 6 masked positions differ by", "0", f"{depends:.3f}"],
            ],
        ),
        "",
        f"Zeroing the weights after softmax is the same as (a) only once the rows are "
        f"renormalised (difference {same:.1e}); without renormalising, the real tokens' rows sum "
        f"to as little as {row_sum:.3f} instead of 1.",
    ]
    s.check(
        f"(a) the real tokens' outputs are those of the sentence alone ({exact:.1e})", exact < 1e-6
    )
    s.check(
        f"(b) they are not ({vector_diff:.3f} > 1e-3): the mask vector is attended to "
        f"(weight {leaked:.3f})",
        vector_diff > 1e-3 and leaked > 0,
    )
    s.check(
        f"(b) the result depends on how many positions are masked ({depends:.3f})", depends > 1e-3
    )
    s.check(
        f"zeroing after softmax and renormalising equals -inf scores ({same:.1e})",
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

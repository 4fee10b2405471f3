"""``attnlab tour``: a short tour of the attention core, checked
against torch as it goes."""

from __future__ import annotations

import argparse

import torch

from .. import __version__
from ..decode.search import beam_search, greedy_search
from ..models.transformer import Transformer, TransformerConfig, count_parameters
from ..nn.attention import MultiHeadAttention
from ..nn.masks import causal_mask, combine_masks, from_torch_masks, key_mask, padding_mask
from ..nn.positional import SinusoidalPositionalEncoding
from ._args import add_seed_flag
from .masks import grid


def cmd_demo(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    d_model, heads = 16, 4
    print(f"attnlab {__version__} on torch {torch.__version__}: a tour of the attention core\n")

    print("1. Masks (bool, True = may attend). Sentences of lengths 4 and 2, padded to 4 (T10):")
    padded = padding_mask([4, 2])
    print(f"   padding mask:\n   {padded.int().tolist()}")
    combined = combine_masks(key_mask(padded), causal_mask(4))  # (2, 1, 4, 4)
    print("   sentence 2, key padding AND look-ahead mask (T11):")
    print("   " + grid(combined[1, 0]).replace("\n", "\n   "))

    print(f"\n2. Multi-head attention: d_model={d_model}, {heads} heads of {d_model // heads}")
    mha = MultiHeadAttention(d_model, heads).eval()
    x = torch.randn(2, 4, d_model)
    with torch.no_grad():
        out, weights = mha(x, mask=combined, need_weights=True)
    print(f"   x {tuple(x.shape)} -> out {tuple(out.shape)}, weights {tuple(weights.shape)}")
    print("   sentence 2, head 0 weights (masked keys get exactly 0):")
    for row in weights[1, 0].tolist():
        print("     " + "  ".join(f"{w:.3f}" for w in row))

    print("\n3. Parity with torch.nn.MultiheadAttention (same weights via to_torch):")
    reference = mha.to_torch(batch_first=True).eval()
    torch_mask = from_torch_masks(~padded, batch_size=2, num_heads=heads)
    with torch.no_grad():
        ours, _ = mha(x, mask=torch_mask)
        theirs, _ = reference(x, x, x, key_padding_mask=~padded, need_weights=False)
    diff = (ours - theirs).abs().max().item()
    print(f"   max |attnlab - torch| = {diff:.2e}")

    print("\n4. Sinusoidal positional encoding (sec. 3.5), first 4 positions, first 6 channels:")
    table = SinusoidalPositionalEncoding(d_model).table(4)
    for pos, row in enumerate(table[:, :6].tolist()):
        print(f"   pos {pos}: " + "  ".join(f"{v:+.3f}" for v in row))
    print("\n5. The paper's model (sec. 3, Table 3) and a tiny one that runs here:")
    base = TransformerConfig.preset("paper-base")
    print(
        f"   paper-base: N={base.num_encoder_layers}, d_model={base.d_model}, d_ff={base.d_ff}, "
        f"h={base.num_heads}: {count_parameters(base):,} parameters (paper: 65M)"
    )
    model = Transformer(TransformerConfig.preset("tiny")).eval()
    src = torch.randint(3, 1000, (2, 6))
    tgt = torch.randint(3, 1000, (2, 5))
    src[1, 4:] = model.config.pad_id  # a shorter second sentence
    with torch.no_grad():
        logits = model(src, tgt)
        maps = model.attention(src, tgt)
    print(
        f"   tiny: src {tuple(src.shape)}, tgt {tuple(tgt.shape)} -> logits "
        f"{tuple(logits.shape)}; cross-attention weights {tuple(maps.cross[0].shape)} per layer"
    )
    padded_weight = maps.cross[0][1, :, :, 4:].abs().max().item()
    print(f"   weight on sentence 2's padded source tokens: {padded_weight:.1f}")
    cache_diff = _demo_decoding(model, src)
    print("\nNext: `attnlab masks --lengths 5,3 --causal`, `attnlab config`, and `make test`.")
    return 0 if diff < 1e-5 and padded_weight == 0.0 and cache_diff < 1e-5 else 1


def _demo_decoding(model: Transformer, src: torch.Tensor) -> float:
    """Section 6: cached decoding; returns max |cached - recomputed| over the steps' logits."""
    print("\n6. Decoding with a KV cache (the tiny model is untrained: its words are noise):")
    with torch.no_grad():
        memory, memory_mask = model.encode(src), model.source_mask(src)
        cache = model.new_cache(memory, memory_mask, capacity=8)
        ids = torch.full((src.shape[0], 1), model.config.bos_id)
        diff = 0.0
        for _ in range(6):
            step = model.decode(ids[:, -1:], cache=cache)[:, -1]
            full = model.decode(ids, memory, memory_mask)[:, -1]  # the whole prefix again
            diff = max(diff, (step - full).abs().max().item())
            ids = torch.cat([ids, step.argmax(dim=-1, keepdim=True)], dim=1)
    print(f"   6 steps, one token each: max |cached - recomputed logits| = {diff:.1e}")
    print(f"   {cache}")
    greedy = greedy_search(model, src, max_new_tokens=6)
    beam = beam_search(model, src, beam_size=4, max_new_tokens=6)
    for name, out in (("greedy", greedy), ("beam 4", beam)):
        log_p = ", ".join(f"{s:.2f}" for s in out.log_probs.tolist())
        print(f"   {name:>6}: {out.tolist()}  log P {log_p}")
    print("   (beam search ranks by log P / lp, the length penalty of Wu et al. 2016, alpha 0.6)")
    return diff


def add_parsers(sub) -> None:
    tour = sub.add_parser(
        "tour",
        help="a short tour of the attention core: masks, multi-head attention, parity, encodings",
        description=(
            "Print a short tour of attnlab's attention core and check parity with torch. "
            "(`make demo` trains a model instead.)"
        ),
    )
    add_seed_flag(tour)
    tour.set_defaults(func=cmd_demo)

"""``attnlab flops``: exact operation counts, a model's layers or the tutorial's single- vs
multi-head experiment (:mod:`attnlab.instruments.flops`)."""

from __future__ import annotations

import argparse
import json

import torch

from ..models.transformer import Transformer, TransformerConfig
from ._args import add_json_flag, positive_int


def cmd_flops(args: argparse.Namespace) -> int:
    if args.batch is None:
        args.batch = 32 if args.compare_heads else 1
    if args.compare_heads:
        return _flops_compare_heads(args)
    return _flops_config(args)


def _flops_compare_heads(args: argparse.Namespace) -> int:
    from ..instruments.flops import compare_heads

    result = compare_heads(
        args.batch, args.seq, args.d_model, args.num_heads, measured=not args.analytic
    )
    difference_is_w_o = result["difference"] == result["w_o"]
    agrees = all(result[k] == result["analytic"][k] for k in ("single_head", "multi_head", "w_o"))
    if args.json:
        print(
            json.dumps({k: result[k] for k in ("single_head", "multi_head", "difference", "w_o")})
        )
        return 0 if difference_is_w_o and agrees else 1
    how = (
        "counted by running both modules under torch's FlopCounterMode (with attnlab's formulas "
        "for the CPU flash-attention kernels)"
        if result["measured"]
        else "from the closed forms (--analytic)"
    )
    print(
        f"The tutorial's experiment (T5, T6): one input of shape {tuple(result['input_shape'])}, "
        f"{how}.\n"
    )
    rows = [
        ("single head, output projection = identity", result["single_head"]),
        (f"{args.num_heads} heads with W^O", result["multi_head"]),
        ("difference", result["difference"]),
        ("W^O alone", result["w_o"]),
    ]
    print(f"{'module':<44}{'MACs':>20}{'FLOPs':>22}")
    for name, count in rows:
        print(f"{name:<44}{count['macs']:>20,}{count['flops']:>22,}")
    print(
        f"\nThe whole difference is W^O: {'yes' if difference_is_w_o else 'NO'}. Splitting "
        f"d_model={args.d_model} into {args.num_heads} heads of "
        f"{args.d_model // args.num_heads} changes no product's total size; only the output "
        f"projection is extra."
    )
    print(f"Analytic closed forms agree with the count: {'yes' if agrees else 'NO'}.")
    print(
        "MACs are multiply-accumulates (fvcore's unit); FLOPs = 2 x MACs (torch.utils."
        "flop_counter's). Both are counts of operations, not rates (FLOP/s is a rate)."
    )
    return 0 if difference_is_w_o and agrees else 1


def _flops_config(args: argparse.Namespace) -> int:
    from ..instruments.flops import model_costs, table1

    config = TransformerConfig.preset(args.preset)
    src, tgt = args.src_len, args.tgt_len or args.src_len
    costs = model_costs(config, src_len=src, tgt_len=tgt, batch=args.batch)
    measured = None
    if args.measure:
        measured = _measure_model(config, src, tgt, args.batch)
    if args.json:
        report = {
            "config": args.preset,
            "src_len": src,
            "tgt_len": tgt,
            "batch": args.batch,
            "encoder_layer": {c.name: c.macs for c in costs.encoder[0]},
            "decoder_layer": {c.name: c.macs for c in costs.decoder[0]},
            "logits_macs": costs.logits.macs,
            "forward": {"macs": costs.macs, "flops": costs.flops},
            "training": {"macs": costs.training_macs, "flops": costs.training_flops},
            "softmax_flops": costs.other_flops,
            "flops_per_target_token": costs.flops_per_token,
            "table1": table1(src, config.d_model),
        }
        if measured is not None:
            report["measured_forward_flops"] = measured
        print(json.dumps(report, indent=2))
        return 0 if measured in (None, costs.flops) else 1
    c = config
    print(
        f"{args.preset}: d_model {c.d_model}, {c.num_heads} heads, d_ff {c.d_ff}, "
        f"{c.num_encoder_layers} + {c.num_decoder_layers} layers, vocabulary "
        f"{c.target_vocab_size:,}; source {src} and target {tgt} tokens, batch {args.batch}\n"
    )
    print("Forward multiply-accumulates (MACs) per layer (FLOPs = 2 x MACs):")
    encoder = {x.name: x for x in costs.encoder[0]}
    decoder = {x.name: x for x in costs.decoder[0]}
    names = list(dict.fromkeys([*encoder, *decoder]))
    print(f"  {'component':<22}{'encoder layer':>18}{'decoder layer':>18}")
    for name in names:
        cells = []
        for layer in (encoder, decoder):
            part = layer.get(name)
            if part is None:
                cells.append("-")
            elif part.macs:
                cells.append(f"{part.macs:,}")
            else:
                cells.append(f"({part.other_flops:,} FLOPs)")
        print(f"  {name:<22}{cells[0]:>18}{cells[1]:>18}")
    totals = [sum(x.macs for x in layer.values()) for layer in (encoder, decoder)]
    print(f"  {'total':<22}{totals[0]:>18,}{totals[1]:>18,}")
    print(f"  {'logits (once)':<22}{'':>18}{costs.logits.macs:>18,}")
    print(
        f"\nWhole model, forward: {costs.macs:,} MACs = {costs.flops:,} FLOPs "
        f"({costs.flops / 1e9:.2f} GFLOP); {costs.flops_per_token:,.0f} FLOPs per target token"
    )
    print(
        f"Training step (forward + backward): {costs.training_flops:,} FLOPs "
        f"({costs.training_flops / costs.flops:.3f} x the forward: 2 products per product "
        f"backward, and the fused attention backward recomputes Q K^T)"
    )
    print(f"Softmax (not matrix products, not in the counts above): {costs.other_flops:,} FLOPs")
    if measured is not None:
        same = "equal" if measured == costs.flops else "DIFFERENT"
        print(f"Measured forward FLOPs (FlopCounterMode): {measured:,}: {same} to the analytic")
    n, d = src, c.d_model
    print(f"\nThe paper's Table 1 for one layer, n = {n} positions, d = {d} (MACs):")
    print(f"  {'layer type':<36}{'MACs':>16}{'complexity':>14}{'sequential':>12}{'max path':>10}")
    for row in table1(n, d):
        print(
            f"  {row['layer']:<36}{row['macs']:>16,}{row['complexity']:>14}"
            f"{row['sequential']:>12,}{row['max_path']:>10,}"
        )
    side = "cheaper" if n < d else ("as costly" if n == d else "costlier")
    print(f"Self-attention is {side} than a recurrent layer here: 2 n^2 d vs 2 n d^2, n vs d.")
    return 0 if measured in (None, costs.flops) else 1


def _measure_model(config: TransformerConfig, src_len: int, tgt_len: int, batch: int) -> int:
    from ..instruments.flops import measure

    model = Transformer(config).eval()
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(3, config.vocab_size, (batch, src_len), generator=gen)
    tgt = torch.randint(3, config.target_vocab_size, (batch, tgt_len), generator=gen)
    with torch.no_grad():
        return measure(lambda: model(src, tgt)).flops


def add_parsers(sub) -> None:
    flops = sub.add_parser(
        "flops",
        help="count multiply-accumulates and FLOPs: a model's layers, or single vs multi-head",
        description=(
            "Exact operation counts (MACs = multiply-accumulates; FLOPs = 2 x MACs, a count, "
            "not a rate). Default: the per-layer table of a preset, the whole model's forward "
            "and training counts, and the paper's Table 1 rows. With --compare-heads: the "
            "tutorial's experiment (T5, T6), single-head attention without an output "
            "projection against multi-head attention with W^O."
        ),
    )
    flops.add_argument(
        "--preset",
        default="paper-base",
        choices=TransformerConfig.preset_names(),
        metavar="NAME",
        help="preset to count (default paper-base)",
    )
    flops.add_argument("--src-len", type=positive_int, default=64, help="source tokens (64)")
    flops.add_argument("--tgt-len", type=positive_int, default=None, help="target tokens")
    flops.add_argument("--measure", action="store_true", help="also run the model and count")
    flops.add_argument(
        "--compare-heads", action="store_true", help="the single- vs multi-head experiment"
    )
    flops.add_argument("--batch", type=positive_int, default=None, help="batch (32; model: 1)")
    flops.add_argument("--seq", type=positive_int, default=1024, help="sequence length (1024)")
    flops.add_argument(
        "--d-model", type=positive_int, default=512, help="--compare-heads: the width (512)"
    )
    flops.add_argument(
        "--num-heads",
        type=positive_int,
        default=8,
        help="--compare-heads: heads of the multi-head (8)",
    )
    flops.add_argument(
        "--analytic", action="store_true", help="closed forms only, without running the modules"
    )
    add_json_flag(flops)
    flops.set_defaults(func=cmd_flops)

"""The ``attnlab`` command line. Thin: it parses arguments, calls the library and prints."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from . import __version__
from .attention import MultiHeadAttention
from .generate import beam_search, greedy_search
from .masks import causal_mask, combine_masks, from_torch_masks, key_mask, padding_mask
from .model import Transformer, TransformerConfig, count_parameters
from .positional import SinusoidalPositionalEncoding
from .vision import VisionTransformer


def _grid(mask: torch.Tensor) -> str:
    """A 2-D bool mask as a 0/1 grid: rows are queries, columns keys."""
    rows, cols = mask.shape
    width = len(str(cols - 1))
    margin = len(f"query {rows - 1}") + 4
    lines = ["keys".rjust(margin) + " " + " ".join(f"{j:>{width}}" for j in range(cols))]
    for i in range(rows):
        cells = " ".join(f"{int(v):>{width}}" for v in mask[i].tolist())
        lines.append(f"query {i}".rjust(margin) + " " + cells)
    return "\n".join(lines)


def _parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 4,2, got {text!r}"
        ) from None
    if not lengths or min(lengths) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative lengths, got {text!r}")
    return lengths


def cmd_masks(args: argparse.Namespace) -> int:
    lengths = args.lengths
    padded = padding_mask(lengths, args.max_len)
    t = padded.shape[1]
    if t == 0:
        print("error: every length is 0, nothing to draw", file=sys.stderr)
        return 2
    masks = key_mask(padded).expand(-1, -1, t, t)  # (B, 1, T, T)
    title = "key padding"
    if args.causal:
        masks = combine_masks(masks, causal_mask(t))
        title = "key padding AND look-ahead (causal)"
    for b, length in enumerate(lengths):
        print(f"sequence {b}: length {length}, padded to {t}")
        print(f"  padding mask (1 = real token): {padded[b].int().tolist()}")
        print(f"  attention mask, {title} (1 = may attend):")
        print("    " + _grid(masks[b, 0]).replace("\n", "\n    "))
        print()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    d_model, heads = 16, 4
    print(f"attnlab {__version__} on torch {torch.__version__}: a tour of the attention core\n")

    print("1. Masks (bool, True = may attend). Sentences of lengths 4 and 2, padded to 4 (T10):")
    padded = padding_mask([4, 2])
    print(f"   padding mask:\n   {padded.int().tolist()}")
    combined = combine_masks(key_mask(padded), causal_mask(4))  # (2, 1, 4, 4)
    print("   sentence 2, key padding AND look-ahead mask (T11):")
    print("   " + _grid(combined[1, 0]).replace("\n", "\n   "))

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


MODEL_TYPES = ("transformer", "lm", "encoder")


def _parameter_count(config: TransformerConfig, model_type: str) -> int | None:
    layers = {
        "transformer": config.num_encoder_layers and config.num_decoder_layers,
        "lm": config.num_decoder_layers,
        "encoder": config.num_encoder_layers,
    }[model_type]
    return count_parameters(config, model_type) if layers else None


def cmd_config(args: argparse.Namespace) -> int:
    if args.preset is None:
        names = TransformerConfig.preset_names()
        head = f"{'preset':<12}{'d_model':>8}{'heads':>6}{'d_ff':>6}{'N enc/dec':>11}{'vocab':>7}"
        print(head + "".join(f"{t:>13}" for t in MODEL_TYPES))
        for name in names:
            c = TransformerConfig.preset(name)
            counts = [_parameter_count(c, t) for t in MODEL_TYPES]
            layers = f"{c.num_encoder_layers}/{c.num_decoder_layers}"
            print(
                f"{name:<12}{c.d_model:>8}{c.num_heads:>6}{c.d_ff:>6}{layers:>11}"
                f"{c.vocab_size:>7}"
                + "".join(f"{'-' if n is None else f'{n:,}':>13}" for n in counts)
            )
        print("\nParameters by model type; `attnlab config NAME` prints one preset in full.")
        return 0
    config = TransformerConfig.preset(args.preset)
    text = json.dumps(config.to_dict(), indent=2)
    if args.json:
        print(text)
        return 0
    print(f"preset {args.preset!r}:\n{text}")
    for model_type in MODEL_TYPES:
        count = _parameter_count(config, model_type)
        if count is not None:
            print(f"{model_type:>12}: {count:,} parameters")
    return 0


def cmd_flops(args: argparse.Namespace) -> int:
    if args.batch is None:
        args.batch = 32 if args.compare_heads else 1
    if args.compare_heads:
        return _flops_compare_heads(args)
    return _flops_config(args)


def _flops_compare_heads(args: argparse.Namespace) -> int:
    from .flops import compare_heads

    result = compare_heads(args.batch, args.seq, args.dim, args.heads, measured=not args.analytic)
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
        (f"{args.heads} heads with W^O", result["multi_head"]),
        ("difference", result["difference"]),
        ("W^O alone", result["w_o"]),
    ]
    print(f"{'module':<44}{'MACs':>20}{'FLOPs':>22}")
    for name, count in rows:
        print(f"{name:<44}{count['macs']:>20,}{count['flops']:>22,}")
    print(
        f"\nThe whole difference is W^O: {'yes' if difference_is_w_o else 'NO'}. Splitting "
        f"d_model={args.dim} into {args.heads} heads of {args.dim // args.heads} changes no "
        f"product's total size; only the output projection is extra."
    )
    print(f"Analytic closed forms agree with the count: {'yes' if agrees else 'NO'}.")
    print(
        "MACs are multiply-accumulates (fvcore's unit); FLOPs = 2 x MACs (torch.utils."
        "flop_counter's). Both are counts of operations, not rates (FLOP/s is a rate)."
    )
    return 0 if difference_is_w_o and agrees else 1


def _flops_config(args: argparse.Namespace) -> int:
    from .flops import model_costs, table1

    config = TransformerConfig.preset(args.config)
    src, tgt = args.src_len, args.tgt_len or args.src_len
    costs = model_costs(config, src_len=src, tgt_len=tgt, batch=args.batch)
    measured = None
    if args.measure:
        measured = _measure_model(config, src, tgt, args.batch)
    if args.json:
        report = {
            "config": args.config,
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
        f"{args.config}: d_model {c.d_model}, {c.num_heads} heads, d_ff {c.d_ff}, "
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
    from .flops import measure

    model = Transformer(config).eval()
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(3, config.vocab_size, (batch, src_len), generator=gen)
    tgt = torch.randint(3, config.target_vocab_size, (batch, tgt_len), generator=gen)
    with torch.no_grad():
        return measure(lambda: model(src, tgt)).flops


def cmd_explain(args: argparse.Namespace) -> int:
    from .explain import REPORT, explain

    print(
        f"Running the tutorial's claims{' (quick)' if args.quick else ''}; report and figures "
        f"go to {args.out}/",
        flush=True,
    )

    def show(section) -> None:
        print(f"  {'PASS' if section.passed else 'FAIL'}  {section.key}: {section.title}")
        for text, ok in section.checks:
            if not ok:
                print(f"        failed: {text}")

    sections = explain(args.out, quick=args.quick, seed=args.seed, progress=show)
    failed = [s.key for s in sections if not s.passed]
    held = len(sections) - len(failed)
    print(f"\n{held}/{len(sections)} claims held. Report: {Path(args.out) / REPORT}")
    return 1 if failed else 0


def _ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected token ids like '5 6 7', got {text!r}") from None
    if not ids:
        raise argparse.ArgumentTypeError("expected at least one token id")
    return ids


def _indices(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected indices like 0,2,5, got {text!r}") from None


def _viz_attention(args: argparse.Namespace) -> list[Path]:
    from . import viz
    from .generate import greedy_search
    from .model import TransformerEncoder, TransformerLM, load_pretrained

    model = load_pretrained(args.model).eval()
    config = model.config
    if isinstance(model, VisionTransformer):
        raise ValueError(
            f"--model: {args.model} holds a VisionTransformer; draw where its class token looks "
            f"with `attnlab viz rollout {args.model}`"
        )
    if isinstance(model, Transformer):
        if args.src_ids is None:
            raise ValueError("--src-ids: required for an encoder-decoder model")
        src = torch.tensor([args.src_ids])
        if args.tgt_ids is None:  # show what the model itself produces
            out = greedy_search(model, src, max_new_tokens=args.max_new_tokens)
            tgt_ids = [config.bos_id, *out.tolist()[0]]
        else:
            tgt_ids = args.tgt_ids
        tgt = torch.tensor([tgt_ids])
        maps = model.attention(src, tgt)
        src_tokens, tgt_tokens = args.src_ids, tgt_ids
    elif isinstance(model, TransformerLM):
        ids = args.tgt_ids or args.src_ids
        if ids is None:
            raise ValueError("--src-ids: required (the language model's input)")
        maps = model.attention(torch.tensor([ids]))
        src_tokens, tgt_tokens = None, ids
    else:
        assert isinstance(model, TransformerEncoder)
        if args.src_ids is None:
            raise ValueError("--src-ids: required for an encoder model")
        maps = model.attention(torch.tensor([args.src_ids]))
        src_tokens, tgt_tokens = args.src_ids, None
    out_dir = Path(args.out or "attention")
    viz.attention_maps(
        maps,
        src_tokens=src_tokens,
        tgt_tokens=tgt_tokens,
        layers=args.layers,
        heads=args.heads,
        out_dir=out_dir,
        dpi=args.dpi,
    )
    kinds = [k for k in ("encoder", "decoder", "cross") if getattr(maps, k)]
    return [out_dir / f"{k}.png" for k in kinds]


def _viz_learned_pe(args: argparse.Namespace) -> list[Path]:
    from . import viz
    from .model import load_pretrained
    from .positional import LearnedPositionalEmbedding

    model = load_pretrained(args.model)
    if isinstance(model, VisionTransformer):
        table = model.positional_table()
        if table is None:
            raise ValueError("--model: this VisionTransformer has no positional embeddings")
        path = Path(args.out or "learned_pe.png")
        viz.vit_positional_similarity(table, model.config.grid_size, path=path, dpi=args.dpi)
        return [path]
    if isinstance(model, Transformer):
        embed = model.tgt_embed if args.side == "tgt" else model.src_embed
    else:
        embed = model.embed
    if not isinstance(embed.position, LearnedPositionalEmbedding):
        raise ValueError(
            f"--model: its positional encoding is {model.config.positional!r}, not 'learned'"
        )
    path = Path(args.out or "learned_pe.png")
    viz.learned_positional_similarity(
        embed.position.weight, length=args.length, path=path, dpi=args.dpi
    )
    return [path]


def _viz_rollout(args: argparse.Namespace) -> list[Path]:
    from . import viz
    from .jobs import Job
    from .model import load_pretrained
    from .vision import class_token_rollout

    model = load_pretrained(args.model).eval()
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"--model: {args.model} holds a {type(model).__name__}, not a VisionTransformer; "
            f"`attnlab viz attention` draws a text model's attention"
        )
    job_file = Path(args.model) / "job.json"
    if not job_file.is_file():
        raise FileNotFoundError(f"{job_file}: missing; the images come from the model's task")
    data = Job.from_dict(json.loads(job_file.read_text(encoding="utf-8"))).task.load()[args.split]
    bad = [i for i in args.index if not 0 <= i < len(data)]
    if bad or not args.index:
        raise ValueError(
            f"--index: expected image indices in [0, {len(data)}) of {args.split}, got {args.index}"
        )
    images, labels = data.batch(args.index)
    with torch.no_grad():
        probs = model(images).softmax(dim=-1)
    maps = class_token_rollout(model, images)
    out_dir = Path(args.out or "rollout")
    paths = []
    for row, index in enumerate(args.index):
        p, predicted = probs[row].max(dim=-1)
        title = (
            f"{args.split} image {index}: a {data.classes[int(labels[row])]}, predicted "
            f"{data.classes[int(predicted)]} (p = {float(p):.2f})"
        )
        path = out_dir / f"rollout-{args.split}-{index}.png"
        viz.attention_rollout_map(images[row], maps[row], title=title, path=path, dpi=args.dpi)
        paths.append(path)
    return paths


def _viz_other(args: argparse.Namespace) -> list[Path]:
    from . import viz

    path = Path(args.out or f"{args.picture}.png")
    if args.picture == "pe":
        viz.positional_encoding(args.d_model, args.length, path=path, dpi=args.dpi)
    elif args.picture == "masks":
        viz.masks(
            args.lengths, causal=not args.no_causal, max_len=args.max_len, path=path, dpi=args.dpi
        )
    elif args.picture == "lr":
        extra = () if args.no_extra else tuple(args.extra or ((256, 4000), (512, 8000)))
        viz.lr_schedule(args.d_model, args.warmup, args.steps, extra=extra, path=path, dpi=args.dpi)
    else:
        viz.training_curves(args.csv, path=path, dpi=args.dpi)
    return [path]


def cmd_viz(args: argparse.Namespace) -> int:
    draw = {
        "attention": _viz_attention,
        "learned-pe": _viz_learned_pe,
        "rollout": _viz_rollout,
    }.get(args.picture, _viz_other)
    for path in draw(args):
        print(f"wrote {path}")
    return 0


def _pair(text: str) -> tuple[int, int]:
    try:
        d_model, warmup = (int(t) for t in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected D_MODEL:WARMUP, got {text!r}") from None
    return d_model, warmup


def _add_viz_parser(sub) -> None:
    viz = sub.add_parser(
        "viz",
        help="draw pictures (PNG): attention of a saved model, encodings, masks, schedule, curves",
        description="Draw one picture as a PNG file and print where it went.",
    )
    pictures = viz.add_subparsers(dest="picture", metavar="PICTURE", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", default=None, help="output PNG (a directory for 'attention')")
    common.add_argument("--dpi", type=_positive_int, default=100, help="resolution (100)")

    attention = pictures.add_parser(
        "attention",
        parents=[common],
        help="attention weights of a saved model: a layers x heads grid per kind",
        description=(
            "Encoder self-attention, decoder self-attention and cross-attention of a model "
            "saved with save_pretrained, on one input, as layers x heads grids with token "
            "labels (encoder.png, decoder.png, cross.png in --out, default ./attention). An "
            "encoder-decoder model without --tgt-ids decodes greedily and shows its own output."
        ),
    )
    attention.add_argument("model", help="model directory (config.json + model.safetensors)")
    attention.add_argument("--src-ids", type=_ids, default=None, help="source ids, e.g. '5 6 7'")
    attention.add_argument("--tgt-ids", type=_ids, default=None, help="target ids (with BOS)")
    attention.add_argument(
        "--max-new-tokens", type=_positive_int, default=50, help="greedy target length (50)"
    )
    attention.add_argument("--layers", type=_indices, default=None, help="layers, e.g. 0,5")
    attention.add_argument("--heads", type=_indices, default=None, help="heads, e.g. 0,1")

    learned = pictures.add_parser(
        "learned-pe",
        parents=[common],
        help="cosine similarity of a saved model's learned position embeddings (a ViT's: the "
        "patch grid of figure 7)",
    )
    learned.add_argument("model", help="model directory")
    learned.add_argument("--length", type=_positive_int, default=None, help="first N positions")
    learned.add_argument("--side", choices=("src", "tgt"), default="src", help="which embedding")

    rollout = pictures.add_parser(
        "rollout",
        parents=[common],
        help="attention rollout of a Vision Transformer's class token over images of its task",
        description=(
            "For each --index image of --split of the model's task (from its job.json): the "
            "image, the class token's attention rollout over the patches (Abnar and Zuidema "
            "2020) and the overlay, titled with the label and the prediction; one PNG each in "
            "--out (default ./rollout)."
        ),
    )
    rollout.add_argument("model", help="a VisionTransformer trained by attnlab train")
    rollout.add_argument(
        "--split", choices=("test", "valid", "train"), default="test", help="images of (test)"
    )
    rollout.add_argument(
        "--index", type=_indices, default=[0, 1, 2, 3], help="which images, e.g. 0,7 (0,1,2,3)"
    )

    pe = pictures.add_parser(
        "pe",
        parents=[common],
        help="the sinusoidal encoding matrix and its dot-product similarity (sec. 3.5)",
    )
    pe.add_argument("--d-model", type=_positive_int, default=128, help="width (128)")
    pe.add_argument("--length", type=_positive_int, default=100, help="positions (100)")

    masks = pictures.add_parser(
        "masks",
        parents=[common],
        help="padding, look-ahead and combined masks of a padded batch (T9-T11)",
    )
    masks.add_argument("--lengths", type=_parse_lengths, default=[4, 2], help="e.g. 4,2,3")
    masks.add_argument("--max-len", type=_positive_int, default=None, help="pad to this length")
    masks.add_argument("--no-causal", action="store_true", help="padding masks only")

    lr = pictures.add_parser(
        "lr", parents=[common], help="the learning-rate schedule of eq. 3 (warmup, then 1/sqrt)"
    )
    lr.add_argument("--d-model", type=_positive_int, default=512, help="d_model (512)")
    lr.add_argument("--warmup", type=_positive_int, default=4000, help="warmup steps (4000)")
    lr.add_argument("--steps", type=_positive_int, default=100_000, help="steps drawn (100000)")
    lr.add_argument(
        "--extra", type=_pair, action="append", help="more curves, D_MODEL:WARMUP (repeatable)"
    )
    lr.add_argument("--no-extra", action="store_true", help="only the main curve")

    curves = pictures.add_parser(
        "curves", parents=[common], help="training curves from a metrics CSV (a 'step' column)"
    )
    curves.add_argument("csv", help="metrics CSV written by training")
    viz.set_defaults(func=cmd_viz)


def _setting(text: str) -> tuple[str, str, object]:
    """``TABLE.KEY=VALUE`` (VALUE read as JSON when it parses, else as a string)."""
    key, sep, raw = text.partition("=")
    table, dot, name = key.partition(".")
    if not (sep and dot and table and name):
        raise argparse.ArgumentTypeError(
            f"expected TABLE.KEY=VALUE, e.g. model.d_model=128, got {text!r}"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return table, name, value


def _build_job(args: argparse.Namespace):
    from .jobs import Job

    if args.config:
        data = Job.from_toml(args.config).to_dict()
    else:  # the task's own defaults (the digits recipe, say), then the flags
        data = Job.from_dict({"task": {"name": args.task}} if args.task else {}).to_dict()
    flags = {
        ("task", "name"): args.task,
        ("task", "data_dir"): args.data_dir,
        ("task", "src_lang"): args.src_lang,
        ("task", "tgt_lang"): args.tgt_lang,
        ("task", "text_file"): args.text_file,
        ("tokenizer", "vocab_size"): args.vocab_size,
        ("model", "preset"): args.preset,
        ("train", "max_steps"): args.max_steps,
        ("train", "max_epochs"): args.max_epochs,
        ("train", "max_minutes"): args.max_minutes,
        ("train", "max_tokens"): args.max_tokens,
        ("train", "warmup"): args.warmup,
        ("train", "eval_every"): args.eval_every,
        ("train", "checkpoint_every"): args.checkpoint_every,
        ("train", "device"): args.device,
        ("train", "seed"): args.seed,
        ("eval", "beam_size"): args.beam_size,
    }
    if args.bf16:
        flags[("train", "bf16")] = True
    for (table, name), value in flags.items():
        if value is not None:
            data[table][name] = value
    for table, name, value in args.set or []:
        if table not in data:
            raise ValueError(f"--set {table}.{name}: unknown table {table!r}; use {sorted(data)}")
        data[table][name] = value
    return Job.from_dict(data)


def cmd_train(args: argparse.Namespace) -> int:
    from .jobs import train_job
    from .train import destroy_distributed, init_distributed

    job = _build_job(args)
    out = Path(args.out or f"runs/{job.task.name}")
    rank, world = init_distributed()  # under torchrun: join the group; else (0, 1)
    try:
        if rank == 0:
            languages = "" if job.task.is_image else f" {job.task.src_lang}->{job.task.tgt_lang}"
            where = f"{job.task.name}{languages} into {out}/"
            ranks = f" on {world} processes" if world > 1 else ""
            print(f"attnlab train: {where}{ranks}", flush=True)
        result = train_job(
            job,
            out,
            resume=args.resume,
            progress=not args.no_progress and rank == 0,
            log=lambda line: print(f"  {line}", flush=True),
        )
    finally:
        destroy_distributed()
    if rank != 0:
        return 0
    _print_scores(result)
    use = "evaluate" if job.task.is_lm or job.task.is_image else "translate"
    print(f"model: {result['model_dir']}  (attnlab {use} --model {result['model_dir']} ...)")
    print(f"results: {out / 'results.json'}; metrics: {out / 'metrics.csv'}")
    return 0


def _print_scores(result: dict, show: int = 3) -> None:
    if "accuracy" in result:  # an image classifier
        print(
            f"{result['split']} ({result['images']:,} images): accuracy "
            f"{result['accuracy']:.2%} ({result['correct']:,} correct)"
        )
        worst = sorted(result["per_class"].items(), key=lambda kv: (kv[1] is None, kv[1]))[:3]
        print("  hardest classes: " + ", ".join(f"{k} {v:.1%}" for k, v in worst if v is not None))
        for error in result.get("examples", [])[:show]:
            print(
                f"  image {error['index']}: a {error['label']} taken for a {error['predicted']} "
                f"(p = {error['confidence']:.2f})"
            )
        return
    if "perplexity" in result:  # a language model
        print(
            f"{result['split']} ({result['sentences']:,} lines, {result['tokens']:,} tokens): "
            f"perplexity {result['perplexity']:.2f} (cross-entropy {result['loss']:.4f} nats)"
        )
        return
    print(
        f"{result['split']} ({result['sentences']:,} sentences, beam search): "
        f"BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}, "
        f"exact match {result['exact_match']:.1%}"
    )
    print(f"  BLEU signature: {result['bleu_signature']}")
    print(f"  chrF signature: {result['chrf_signature']}")
    for example in result.get("examples", [])[:show]:
        source, hypothesis = example["source"], example["hypothesis"]
        print(f"  {source!r} -> {hypothesis!r} (reference {example['reference']!r})")


def cmd_translate(args: argparse.Namespace) -> int:
    from .evaluate import Translator

    translator = Translator.load(
        args.model, beam_size=args.beam_size, max_tokens=args.max_tokens, device=args.device
    )
    if args.text and args.text != ["-"]:
        for line in translator.translate(args.text):
            print(line)
        return 0
    batch: list[str] = []
    for line in sys.stdin:  # translate in batches as lines arrive, keeping their order
        batch.append(line.rstrip("\n"))
        if len(batch) == args.batch_lines:
            print("\n".join(translator.translate(batch)), flush=True)
            batch = []
    if batch:
        print("\n".join(translator.translate(batch)), flush=True)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .jobs import evaluate_model

    result = evaluate_model(
        args.model, split=args.split, beam_size=args.beam_size, limit=args.limit
    )  # split None: the task's own (test, or valid for a language model)
    if args.json and "perplexity" in result:
        print(json.dumps(result))
        return 0
    if args.json and "accuracy" in result:
        keys = ("accuracy", "correct", "images", "per_class", "split", "task")
        print(json.dumps({k: result[k] for k in keys}))
        return 0
    if args.json:
        keys = ("bleu", "chrf", "exact_match", "sentences", "split", "task")
        report = {k: result[k] for k in keys}
        report["bleu_signature"], report["chrf_signature"] = (
            result["bleu_signature"],
            result["chrf_signature"],
        )
        print(json.dumps(report))
        return 0
    _print_scores(result, show=args.show)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve import run

    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"--model: {args.model}: no such model directory (OUT/model)")
    run(args.model, host=args.host, port=args.port, beam_size=args.beam_size)
    return 0


def _add_train_parsers(sub) -> None:
    train = sub.add_parser(
        "train",
        help="train a translation model end to end: corpus, tokenizers, model, checkpoints",
        description=(
            "Train an encoder-decoder Transformer from scratch: load the task's corpus, train "
            "byte-level BPE tokenizers on its training split, train with the paper's recipe "
            "(Adam, eq. 3 warmup schedule, label smoothing, token-budget batches), checkpoint "
            "atomically, average the last checkpoints into OUT/model, and score the test split "
            "with beam search (sacreBLEU, chrF, exact match) into OUT/results.json. Settings "
            "come from --config (TOML: [task] [tokenizer] [model] [train] [eval]), then the "
            "flags, then --set. Under torchrun it trains with DistributedDataParallel. The "
            "text task trains a decoder-only language model instead, scored by perplexity."
        ),
    )
    train.add_argument("--config", default=None, help="TOML job file, e.g. configs/numbers.toml")
    train.add_argument(
        "--task",
        choices=("numbers", "multi30k", "files", "text", "digits"),
        default=None,
        help="numbers (offline default), multi30k, files ([task] paths), text (a language "
        "model on --text-file), or digits (a Vision Transformer on scikit-learn's 8x8 digits)",
    )
    train.add_argument("--text-file", default=None, help="plain text for the 'text' task")
    train.add_argument("--out", default=None, help="run directory (default runs/TASK)")
    train.add_argument("--data-dir", default=None, help="Multi30K directory ($ATTNLAB_MULTI30K)")
    train.add_argument("--src-lang", default=None, help="source language (en)")
    train.add_argument("--tgt-lang", default=None, help="target language (de)")
    train.add_argument(
        "--preset",
        default=None,
        choices=TransformerConfig.preset_names(),
        help="model preset (small)",
    )
    train.add_argument("--vocab-size", type=_positive_int, default=None, help="BPE size (8000)")
    train.add_argument("--max-steps", type=_positive_int, default=None, help="optimizer steps")
    train.add_argument("--max-epochs", type=_positive_int, default=None, help="epochs")
    train.add_argument("--max-minutes", type=float, default=None, help="wall-clock budget")
    train.add_argument(
        "--max-tokens", type=_positive_int, default=None, help="tokens per batch and side (4096)"
    )
    train.add_argument("--warmup", type=_positive_int, default=None, help="warmup steps (4000)")
    train.add_argument(
        "--eval-every", type=_positive_int, default=None, help="validation every N steps"
    )
    train.add_argument(
        "--checkpoint-every", type=_positive_int, default=None, help="checkpoint every N steps"
    )
    train.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default=None,
        help="auto (default): CUDA when available",
    )
    train.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    train.add_argument("--seed", type=int, default=None, help="random seed (0)")
    train.add_argument(
        "--beam-size", type=_positive_int, default=None, help="beam for the final test (4)"
    )
    train.add_argument(
        "--set",
        type=_setting,
        action="append",
        metavar="TABLE.KEY=VALUE",
        help="any other setting, e.g. model.d_model=128 (repeatable)",
    )
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=cmd_train)

    translate = sub.add_parser(
        "translate",
        help="translate text with a trained model (beam search)",
        description=(
            "Translate TEXT arguments, or standard input line by line (no TEXT, or '-'), in "
            "batches, with beam search; one translation per line, in order."
        ),
    )
    translate.add_argument("--model", required=True, help="model directory (OUT/model)")
    translate.add_argument("text", nargs="*", help="sentences; none or '-' reads stdin")
    translate.add_argument("--beam-size", type=_positive_int, default=4, help="beam (4)")
    translate.add_argument(
        "--max-tokens", type=_positive_int, default=4096, help="source tokens per batch (4096)"
    )
    translate.add_argument(
        "--batch-lines", type=_positive_int, default=64, help="stdin lines per batch (64)"
    )
    translate.add_argument("--device", default=None, help="cpu or cuda (default: auto)")
    translate.set_defaults(func=cmd_translate)

    evaluate = sub.add_parser(
        "evaluate",
        help="score a trained model on its task: sacreBLEU, chrF, exact match",
        description=(
            "Translate a split of the model's task (from its job.json) with beam search and "
            "score it: sacreBLEU BLEU and chrF (cased, detokenised; signatures printed) and "
            "exact match. --json prints one object with bleu, chrf, exact_match (a fraction)."
        ),
    )
    evaluate.add_argument("--model", required=True, help="model directory (OUT/model)")
    evaluate.add_argument(
        "--split",
        choices=("test", "valid", "train"),
        default=None,
        help="split (test; valid for a language model)",
    )
    evaluate.add_argument("--beam-size", type=_positive_int, default=None, help="beam")
    evaluate.add_argument("--limit", type=_positive_int, default=None, help="first N pairs")
    evaluate.add_argument(
        "--show", type=_positive_int, default=3, help="held-out examples to print (3)"
    )
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.set_defaults(func=cmd_evaluate)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="The Transformer of 'Attention Is All You Need': exact, fast, explained.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="a short tour of the attention core: masks, multi-head attention, parity, encodings",
        description="Print a short tour of attnlab's attention core and check parity with torch.",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(func=cmd_demo)

    masks = sub.add_parser(
        "masks",
        help="print padding and look-ahead masks as 0/1 grids",
        description="Print the attention masks of a padded batch (1 = may attend).",
    )
    masks.add_argument(
        "--lengths",
        type=_parse_lengths,
        default=[4, 2],
        help="comma-separated sequence lengths, e.g. 4,2 (default)",
    )
    masks.add_argument("--max-len", type=int, default=None, help="pad to this length")
    masks.add_argument("--causal", action="store_true", help="also apply the look-ahead mask")
    masks.set_defaults(func=cmd_masks)

    config = sub.add_parser(
        "config",
        help="list the model presets with their parameter counts, or print one",
        description=(
            "Without NAME, list the presets of attnlab.TransformerConfig with their exact "
            "parameter counts for each model type (encoder-decoder, decoder-only LM, "
            "encoder-only). With NAME, print that preset's fields."
        ),
    )
    config.add_argument(
        "preset",
        nargs="?",
        choices=TransformerConfig.preset_names(),
        metavar="NAME",
        help=f"a preset: {', '.join(TransformerConfig.preset_names())}",
    )
    config.add_argument("--json", action="store_true", help="print only the config as JSON")
    config.set_defaults(func=cmd_config)

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
        "--config",
        default="paper-base",
        choices=TransformerConfig.preset_names(),
        metavar="NAME",
        help="preset to count (default paper-base)",
    )
    flops.add_argument("--src-len", type=_positive_int, default=64, help="source tokens (64)")
    flops.add_argument("--tgt-len", type=_positive_int, default=None, help="target tokens")
    flops.add_argument("--measure", action="store_true", help="also run the model and count")
    flops.add_argument(
        "--compare-heads", action="store_true", help="the single- vs multi-head experiment"
    )
    flops.add_argument("--batch", type=_positive_int, default=None, help="batch (32; model: 1)")
    flops.add_argument("--seq", type=_positive_int, default=1024, help="sequence length (1024)")
    flops.add_argument("--dim", type=_positive_int, default=512, help="d_model (512)")
    flops.add_argument("--heads", type=_positive_int, default=8, help="heads of the multi-head (8)")
    flops.add_argument(
        "--analytic", action="store_true", help="closed forms only, without running the modules"
    )
    flops.add_argument("--json", action="store_true", help="print one JSON object")
    flops.set_defaults(func=cmd_flops)

    explain = sub.add_parser(
        "explain",
        help="run the tutorial's claims as experiments; write a Markdown report with figures",
        description=(
            "Run each claim of the tutorial (T3 scaling, T5/T6 heads and FLOPs, T7 order, "
            "T10/T11 masks, T12 masking styles) and the paper's Table 1 on attnlab's modules, "
            "check it, and write report.md with its figures into --out. Exits 1 if a claim "
            "fails."
        ),
    )
    explain.add_argument("--out", required=True, help="directory for report.md and the figures")
    explain.add_argument(
        "--quick", action="store_true", help="smaller experiments (Table 1 up to n = 1024)"
    )
    explain.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    explain.set_defaults(func=cmd_explain)

    serve = sub.add_parser(
        "serve",
        help="the attention explorer: a web page and JSON API over a trained model",
        description=(
            "Serve the attention explorer of an encoder-decoder model trained by `attnlab "
            "train`: a page at / and a JSON API under /api (docs/serve.md). It binds the "
            "loopback interface by default; the API has no authentication. --port 0 picks a "
            "free port; the URL printed has the real one."
        ),
    )
    serve.add_argument("--model", required=True, help="model directory (OUT/model)")
    serve.add_argument("--host", default="127.0.0.1", help="interface (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port, 0 picks a free one (8000)")
    serve.add_argument("--beam-size", type=_positive_int, default=4, help="default beam, 1-16 (4)")
    serve.set_defaults(func=cmd_serve)
    _add_viz_parser(sub)
    _add_train_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except (ValueError, TypeError, OSError) as error:  # bad input or a missing / unreadable file
        print(f"attnlab {args.command}: error: {error}", file=sys.stderr)
        return 2

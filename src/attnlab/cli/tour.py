"""The commands that show and count: ``tour`` (``demo``, its old name), ``masks``,
``config``, ``flops``, ``explain``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .. import __version__
from ..decode.search import beam_search, greedy_search
from ..models.transformer import Transformer, TransformerConfig, count_parameters
from ..models.vision import VisionConfig, count_vit_parameters
from ..nn.attention import MultiHeadAttention
from ..nn.masks import causal_mask, combine_masks, from_torch_masks, key_mask, padding_mask
from ..nn.positional import SinusoidalPositionalEncoding
from ._args import (
    add_deprecated,
    add_json_flag,
    add_mask_flags,
    add_out_flag,
    add_seed_flag,
    check_pad_to,
    positive_int,
    warn_deprecated,
)


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


def cmd_masks(args: argparse.Namespace) -> int:
    lengths = args.lengths
    check_pad_to(lengths, args.pad_to)
    padded = padding_mask(lengths, args.pad_to)
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


def _cmd_demo_deprecated(args: argparse.Namespace) -> int:
    warn_deprecated("attnlab demo", "attnlab tour")
    return cmd_demo(args)


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


#: Every preset `attnlab config` knows: the Transformers', then the Vision Transformers'.
PRESETS = TransformerConfig.preset_names() + VisionConfig.preset_names()


def _print_vision_presets() -> None:
    """The Vision Transformer presets (attnlab.VisionConfig), one line each."""
    print(
        f"{'ViT preset':<12}{'image':>6}{'patch':>6}{'d_model':>8}{'heads':>6}{'d_ff':>6}"
        f"{'layers':>7}{'classes':>8}{'vit':>13}"
    )
    for name in VisionConfig.preset_names():
        c = VisionConfig.preset(name)
        print(
            f"{name:<12}{c.image_size:>6}{c.patch_size:>6}{c.d_model:>8}{c.num_heads:>6}"
            f"{c.d_ff:>6}{c.num_layers:>7}{c.num_classes:>8}{count_vit_parameters(c):>13,}"
        )


def _recipe_files() -> dict[str, str]:
    """Recipe name -> its packaged file (``attnlab/recipes/*.toml``): each task with a recipe
    by the task's name, and every file by its own name (``multi30k-en-de``)."""
    from importlib import resources

    from ..jobs import TASKS

    files = {
        entry.name[: -len(".toml")]: entry.name
        for entry in resources.files("attnlab").joinpath("recipes").iterdir()
        if entry.name.endswith(".toml")
    }
    tasks = {name: task.recipe for name, task in TASKS.items() if task.recipe is not None}
    return {**tasks, **{k: v for k, v in sorted(files.items()) if k not in tasks}}


def recipe_names() -> list[str]:
    """What ``config --recipe`` and ``train --config`` take as a recipe's name."""
    return list(_recipe_files())


def recipe_text(name: str) -> str:
    """The packaged recipe ``name`` (see `recipe_names`), as the file has it (comments and
    all). ValueError naming --recipe for another name."""
    from importlib import resources

    files = _recipe_files()
    if name not in files:
        raise ValueError(f"--recipe: expected one of {', '.join(files)}, got {name!r}")
    return resources.files("attnlab").joinpath("recipes", files[name]).read_text(encoding="utf-8")


def cmd_config(args: argparse.Namespace) -> int:
    if args.recipe is not None:
        if args.preset is not None:
            raise ValueError(f"--recipe: prints a task's recipe; drop NAME ({args.preset})")
        if args.json:
            from ..jobs.job import toml_loads

            print(json.dumps(toml_loads(recipe_text(args.recipe)), indent=2))
            return 0
        sys.stdout.write(recipe_text(args.recipe))
        return 0
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
        print()
        _print_vision_presets()
        print(
            "\nParameters by model type; `attnlab config NAME` prints one preset in full, "
            f"`attnlab config --recipe TASK` a task's recipe ({', '.join(recipe_names())})."
        )
        return 0
    if args.preset in VisionConfig.preset_names():
        vision = VisionConfig.preset(args.preset)
        text = json.dumps(vision.to_dict(), indent=2)
        print(text if args.json else f"Vision Transformer preset {args.preset!r}:\n{text}")
        if not args.json:
            print(f"{'vit':>12}: {count_vit_parameters(vision):,} parameters")
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


def cmd_explain(args: argparse.Namespace) -> int:
    from ..instruments.explain import REPORT, REPORTS, explain, in_lang

    print(
        f"Running the tutorial's claims{' (quick)' if args.quick else ''}; report and figures "
        f"go to {args.out}/",
        flush=True,
    )

    def show(section) -> None:
        title = in_lang(section.title, args.lang)
        print(f"  {'PASS' if section.passed else 'FAIL'}  {section.key}: {title}")
        for text, ok in section.checks:
            if not ok:
                print(f"        failed: {in_lang(text, args.lang)}")

    sections = explain(args.out, quick=args.quick, seed=args.seed, progress=show, lang=args.lang)
    failed = [s.key for s in sections if not s.passed]
    held = len(sections) - len(failed)
    report = Path(args.out) / REPORTS[args.lang]
    english = f" (English: {Path(args.out) / REPORT})" if args.lang != "en" else ""
    print(f"\n{held}/{len(sections)} claims held. Report: {report}{english}")
    return 1 if failed else 0


def add_parsers(sub) -> None:
    tour = sub.add_parser(
        "tour",
        help="a short tour of the attention core: masks, multi-head attention, parity, encodings",
        description=(
            "Print a short tour of attnlab's attention core and check parity with torch. "
            "(`make demo` trains a model instead; this command was called `demo` before.)"
        ),
    )
    add_seed_flag(tour)
    tour.set_defaults(func=cmd_demo)
    # The old name, for one release: not listed (no help), prints one line, then the tour.
    demo = sub.add_parser("demo", description="Deprecated: use `attnlab tour`.")
    add_seed_flag(demo)
    demo.set_defaults(func=_cmd_demo_deprecated, deprecated_command="tour")

    masks = sub.add_parser(
        "masks",
        help="print padding and look-ahead masks as 0/1 grids",
        description=(
            "Print the attention masks of a padded batch (1 = may attend): key padding, and "
            "with --causal (the default) key padding AND look-ahead; `attnlab viz masks` draws "
            "the same masks."
        ),
    )
    add_mask_flags(masks)
    masks.set_defaults(func=cmd_masks)

    config = sub.add_parser(
        "config",
        help="list the model presets with their parameter counts, or print one",
        description=(
            "Without NAME, list the presets of attnlab.TransformerConfig with their exact "
            "parameter counts for each model type (encoder-decoder, decoder-only LM, "
            "encoder-only), then those of attnlab.VisionConfig (Vision Transformers, as "
            "`attnlab train --preset digits`). With NAME, print that preset's fields. With "
            "--recipe TASK, print the job file of what `attnlab train --task TASK` runs (the "
            "packaged recipe): save it, edit it, and train with `attnlab train --config FILE`."
        ),
    )
    config.add_argument(
        "preset",
        nargs="?",
        choices=PRESETS,
        metavar="NAME",
        help=f"a preset: {', '.join(PRESETS)}",
    )
    config.add_argument(
        "--recipe",
        choices=tuple(recipe_names()),
        default=None,
        metavar="NAME",
        help=f"print a packaged recipe, a job file (TOML) to start your own from; a task's "
        f"name gives what `attnlab train --task TASK` runs: {', '.join(recipe_names())}",
    )
    add_json_flag(config)
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
        "--preset",
        default="paper-base",
        choices=TransformerConfig.preset_names(),
        metavar="NAME",
        help="preset to count (default paper-base)",
    )
    add_deprecated(flops, "--config", use="--preset", dest="preset")
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
    add_deprecated(flops, "--dim", use="--d-model", dest="d_model", type=positive_int)
    flops.add_argument(
        "--num-heads",
        type=positive_int,
        default=8,
        help="--compare-heads: heads of the multi-head (8)",
    )
    # viz attention's --heads picks heads to draw: a count is --num-heads (as in [model]).
    add_deprecated(flops, "--heads", use="--num-heads", dest="num_heads", type=positive_int)
    flops.add_argument(
        "--analytic", action="store_true", help="closed forms only, without running the modules"
    )
    add_json_flag(flops)
    flops.set_defaults(func=cmd_flops)

    explain = sub.add_parser(
        "explain",
        help="run the tutorial's claims as experiments; write a Markdown report with figures",
        description=(
            "Run each claim of the tutorial (T3 scaling, T5/T6 heads and FLOPs, T7 order, "
            "T10/T11 masks, T12 masking styles) and the paper's Table 1 on attnlab's modules, "
            "check it, and write report.md with its figures into --out (with --lang zh, also "
            "report.zh.md: the same run in Chinese, the tutorial's language). Exits 1 if a claim "
            "fails."
        ),
    )
    add_out_flag(explain, "the directory for report.md and its figures; required", required=True)
    explain.add_argument(
        "--quick", action="store_true", help="smaller experiments (Table 1 up to n = 1024)"
    )
    add_seed_flag(explain)
    explain.add_argument(
        "--lang",
        choices=("en", "zh"),
        default="en",
        help="language of the report: en writes report.md; zh writes report.zh.md (Chinese, "
        "the tutorial's language) beside report.md, both from the same run (default en)",
    )
    explain.set_defaults(func=cmd_explain)

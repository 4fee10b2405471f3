"""``attnlab viz``: one picture as a PNG (attention, learned-pe, rollout, pe, masks, lr, curves)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import (
    add_device_flag,
    add_mask_flags,
    add_max_new_tokens_flag,
    add_model_flag,
    add_out_flag,
    check_pad_to,
    device_of,
    positive_int,
)
from ._model import resolving


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


def _texts_as_ids(args: argparse.Namespace, model) -> tuple[list | None, list | None, tuple]:
    """``(source ids, target ids, (src, tgt) tokenizers)``: ``--src`` / ``--tgt`` TEXT as ids
    of the model's tokenizers, or ``--src-ids`` / ``--tgt-ids`` as given (then no tokenizers:
    ``()``). A target text, and a language model's input, start with BOS, as the model saw them
    in training. Refused, naming the flag: both spellings of one side, an empty text, or one
    over the model's max_len tokens (checked on characters first: tokenizing is bounded too)."""
    from ..inference.bounds import CHARS_PER_TOKEN

    for side in ("src", "tgt"):
        if getattr(args, side) is not None and getattr(args, f"{side}_ids") is not None:
            raise ValueError(f"--{side}: give --{side} TEXT or --{side}-ids IDS, not both")
    if args.src is None and args.tgt is None:
        return args.src_ids, args.tgt_ids, ()
    from ..data import load_tokenizers
    from ..models.transformer import Transformer

    config = model.config
    loaded = load_tokenizers(args.model)
    tokenizers = dict(zip(("src", "tgt"), loaded, strict=True))
    ids = {"src": args.src_ids, "tgt": args.tgt_ids}
    for side, framed in (("src", not isinstance(model, Transformer)), ("tgt", True)):
        text = getattr(args, side)
        if text is None:
            continue
        room = config.max_len - int(framed)
        if not text.strip():
            raise ValueError(f"--{side}: empty text; give a sentence")
        if len(text) > CHARS_PER_TOKEN * room:
            raise ValueError(
                f"--{side}: {len(text):,} characters, more than the model takes "
                f"({CHARS_PER_TOKEN} per token of {room} tokens); shorten it"
            )
        encoded = tokenizers[side].encode(text)
        if len(encoded) > room:
            raise ValueError(
                f"--{side}: {len(encoded):,} tokens, more than the model takes ({room}: its "
                f"max_len {config.max_len}{' less <bos>' if framed else ''}); shorten it"
            )
        ids[side] = [config.bos_id, *encoded] if framed else encoded
    return ids["src"], ids["tgt"], loaded


def _labels(tokenizers: tuple, ids: list[int] | None, side: int) -> list | None:
    """A side's tick labels: its tokens (``Tokenizer.labels``; side 0 source, 1 target) where
    text was given (a translation model's own output too), else the ids as they are."""
    if ids is None or not tokenizers:
        return ids
    return tokenizers[side].labels(ids)


def _viz_attention(args: argparse.Namespace) -> list[Path]:
    import torch

    from ..decode.search import greedy_search
    from ..decode.session import output_limit
    from ..instruments import viz
    from ..models.transformer import Transformer, TransformerEncoder, TransformerLM, load_pretrained
    from ..models.vision import VisionTransformer

    device = device_of(args.device)
    model = load_pretrained(args.model, device=device).eval()
    config = model.config
    if isinstance(model, VisionTransformer):
        raise ValueError(
            f"--model: {args.model} holds a VisionTransformer; draw where its class token looks "
            f"with `attnlab viz rollout --model {args.model}`"
        )
    src_ids, tgt_ids, tokenizers = _texts_as_ids(args, model)
    if isinstance(model, Transformer):
        if src_ids is None:
            raise ValueError("--src: required for an encoder-decoder model (or --src-ids)")
        src = torch.tensor([src_ids], device=device)
        if tgt_ids is None:  # show what the model itself produces
            # BOS and the output fit the model's max_len positions, whatever is asked.
            budget = max(1, output_limit(len(src_ids), args.max_new_tokens, config.max_len - 1))
            out = greedy_search(model, src, max_new_tokens=budget)
            tgt_ids = [config.bos_id, *out.tolist()[0]]
        tgt = torch.tensor([tgt_ids], device=device)
        maps = model.attention(src, tgt)
        src_tokens, tgt_tokens = _labels(tokenizers, src_ids, 0), _labels(tokenizers, tgt_ids, 1)
    elif isinstance(model, TransformerLM):
        ids = tgt_ids or src_ids
        if ids is None:
            raise ValueError("--src: required (the language model's input; or --src-ids)")
        maps = model.attention(torch.tensor([ids], device=device))
        src_tokens, tgt_tokens = None, _labels(tokenizers, ids, 1)
    else:
        assert isinstance(model, TransformerEncoder)
        if src_ids is None:
            raise ValueError("--src: required for an encoder model (or --src-ids)")
        maps = model.attention(torch.tensor([src_ids], device=device))
        src_tokens, tgt_tokens = _labels(tokenizers, src_ids, 0), None
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
    from ..instruments import viz
    from ..models.transformer import Transformer, load_pretrained
    from ..models.vision import VisionTransformer
    from ..nn.positional import LearnedPositionalEmbedding

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
    import torch

    from .._rundir import read_job_file
    from ..instruments import viz
    from ..jobs import Job
    from ..models.transformer import load_pretrained
    from ..models.vision import VisionTransformer, class_token_rollout

    device = device_of(args.device)
    model = load_pretrained(args.model, device=device).eval()
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"--model: {args.model} holds a {type(model).__name__}, not a VisionTransformer; "
            f"`attnlab viz attention` draws a text model's attention"
        )
    job = read_job_file(args.model, why="the images come from the model's task")
    data = Job.from_dict(job).task.load()[args.split]
    bad = [i for i in args.index if not 0 <= i < len(data)]
    if bad or not args.index:
        raise ValueError(
            f"--index: expected image indices in [0, {len(data)}) of {args.split}, got {args.index}"
        )
    images, labels = data.batch(args.index)
    with torch.no_grad():
        probs = model(images.to(device)).softmax(dim=-1).cpu()
    maps = class_token_rollout(model, images.to(device)).cpu()
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
    from ..instruments import viz

    path = Path(args.out or f"{args.picture}.png")
    if args.picture == "pe":
        viz.positional_encoding(args.d_model, args.length, path=path, dpi=args.dpi)
    elif args.picture == "masks":
        check_pad_to(args.lengths, args.pad_to)
        viz.masks(args.lengths, causal=args.causal, max_len=args.pad_to, path=path, dpi=args.dpi)
    elif args.picture == "lr":
        extra = () if args.no_extra else tuple(args.extra or ((256, 4000), (512, 8000)))
        viz.lr_schedule(args.d_model, args.warmup, args.steps, extra=extra, path=path, dpi=args.dpi)
    else:
        if args.label is not None and len(args.label) != len(args.csv):
            raise ValueError(
                f"--label: expected one per CSV ({len(args.csv)}), got {len(args.label)}"
            )
        viz.training_curves(args.csv, labels=args.label, path=path, dpi=args.dpi)
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


def add_parsers(sub) -> None:
    viz = sub.add_parser(
        "viz",
        help="draw pictures (PNG): attention of a saved model, encodings, masks, schedule, curves",
        description="Draw one picture as a PNG file and print where it went.",
    )
    pictures = viz.add_subparsers(dest="picture", metavar="PICTURE", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_out_flag(
        common, "the PNG to write (attention, rollout: a directory); default: in the current one"
    )
    common.add_argument("--dpi", type=positive_int, default=100, help="resolution (100)")

    attention = pictures.add_parser(
        "attention",
        parents=[common],
        help="attention weights of a saved model: a layers x heads grid per kind",
        description=(
            "Encoder self-attention, decoder self-attention and cross-attention of a trained "
            "model (--model), on one input, as layers x heads grids with token "
            "labels (encoder.png, decoder.png, cross.png in --out, default ./attention). "
            "--src and --tgt are text, tokenised with the model's tokenizers and labelled with "
            "its tokens; --src-ids and --tgt-ids take token ids. An encoder-decoder model "
            "without --tgt (or --tgt-ids) decodes greedily (at most --max-new-tokens tokens, "
            "and at most its max_len) and shows its own output."
        ),
    )
    add_model_flag(attention)
    attention.add_argument(
        "--src", default=None, metavar="TEXT", help="the source sentence (the input of an LM)"
    )
    attention.add_argument(
        "--tgt", default=None, metavar="TEXT", help="a target sentence to teacher-force"
    )
    attention.add_argument("--src-ids", type=_ids, default=None, help="source ids, e.g. '5 6 7'")
    attention.add_argument("--tgt-ids", type=_ids, default=None, help="target ids (with BOS)")
    add_max_new_tokens_flag(attention)
    attention.add_argument("--layers", type=_indices, default=None, help="layers, e.g. 0,5")
    attention.add_argument("--heads", type=_indices, default=None, help="heads, e.g. 0,1")
    add_device_flag(attention)

    learned = pictures.add_parser(
        "learned-pe",
        parents=[common],
        help="cosine similarity of a saved model's learned position embeddings (a ViT's: the "
        "patch grid of figure 7)",
        description=(
            "The cosine similarity between every pair of a trained model's learned position "
            "embeddings (--side src or tgt, the first --length positions), as a heat map in "
            "--out (default ./learned_pe.png); for a Vision Transformer, each patch's "
            "similarity to the others laid out on the patch grid (the ViT paper's figure 7). "
            "A model with sinusoidal positions has none to draw."
        ),
    )
    add_model_flag(learned)
    learned.add_argument("--length", type=positive_int, default=None, help="first N positions")
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
    add_model_flag(rollout)
    rollout.add_argument(
        "--split", choices=("test", "valid", "train"), default="test", help="images of (test)"
    )
    rollout.add_argument(
        "--index", type=_indices, default=[0, 1, 2, 3], help="which images, e.g. 0,7 (0,1,2,3)"
    )
    add_device_flag(rollout)

    pe = pictures.add_parser(
        "pe",
        parents=[common],
        help="the sinusoidal encoding matrix and its dot-product similarity (sec. 3.5)",
        description=(
            "The sinusoidal positional encoding of section 3.5 for --length positions of "
            "width --d-model, and the dot products between positions, as one PNG in --out "
            "(default ./pe.png)."
        ),
    )
    pe.add_argument("--d-model", type=positive_int, default=128, help="width (128)")
    pe.add_argument("--length", type=positive_int, default=100, help="positions (100)")

    masks = pictures.add_parser(
        "masks",
        parents=[common],
        help="padding, look-ahead and combined masks of a padded batch (T9-T11)",
        description=(
            "The padding mask of a batch of sequences of --lengths (padded to the longest, or "
            "to --pad-to), with --causal (the default) also the look-ahead mask and the two "
            "combined, as one PNG in --out (default ./masks.png); `attnlab masks` prints the "
            "same masks as text."
        ),
    )
    add_mask_flags(masks)

    lr = pictures.add_parser(
        "lr",
        parents=[common],
        help="the learning-rate schedule of eq. 3 (warmup, then 1/sqrt)",
        description=(
            "The learning rate of the paper's eq. 3 over --steps steps for --d-model and "
            "--warmup, with further curves from --extra (default: 256:4000 and 512:8000; "
            "--no-extra draws one), as one PNG in --out (default ./lr.png). The task recipes "
            "use a cosine schedule instead (`attnlab config --recipe NAME`)."
        ),
    )
    lr.add_argument("--d-model", type=positive_int, default=512, help="d_model (512)")
    lr.add_argument("--warmup", type=positive_int, default=4000, help="warmup steps (4000)")
    lr.add_argument("--steps", type=positive_int, default=100_000, help="steps drawn (100000)")
    lr.add_argument(
        "--extra", type=_pair, action="append", help="more curves, D_MODEL:WARMUP (repeatable)"
    )
    lr.add_argument("--no-extra", action="store_true", help="only the main curve")

    curves = pictures.add_parser(
        "curves",
        parents=[common],
        help="training curves from a metrics CSV (a 'step' column); several CSVs compare runs",
        description=(
            "The columns of OUT/metrics.csv that `attnlab train` writes (loss, learning rate, "
            "validation scores) against the step, one panel each, as one PNG in --out "
            "(default ./curves.png); several CSVs draw one colour per run."
        ),
    )
    curves.add_argument(
        "csv",
        nargs="+",
        help="metrics CSV written by training (OUT/metrics.csv); several: one colour each",
    )
    curves.add_argument(
        "--label",
        action="append",
        default=None,
        metavar="NAME",
        help="a run's name in the legend, once per CSV in order (default: its OUT directory)",
    )
    viz.set_defaults(func=resolving(cmd_viz))

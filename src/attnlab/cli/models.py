"""``attnlab generate`` (text from a language model, streamed) and ``attnlab predict`` (classes
of images from a Vision Transformer): the other kinds of model that ``attnlab train`` makes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._args import (
    add_deprecated,
    add_device_flag,
    add_max_new_tokens_flag,
    add_model_flag,
    add_sampling_flags,
    add_seed_flag,
    device_of,
    positive_int,
)
from .inference import check_kind, positive_number, probability, resolving


def cmd_generate(args: argparse.Namespace) -> int:
    """Continue the prompt with one :func:`attnlab.decode.search.sample` or
    :func:`~attnlab.decode.search.greedy_search` call on the model's KV cache, writing the text as
    each token comes (its ``on_token`` hook): the prompt is encoded once, not once a token."""
    import torch

    from ..decode.search import greedy_search, sample
    from ..inference.scores import load_with_tokenizers

    if not args.sample and (args.temperature != 1.0 or args.top_k or args.top_p):
        raise ValueError("--temperature, --top-k, --top-p: only with --sample")
    device = device_of(args.device)
    check_kind(args.model, {"lm"}, "generate", "--model")
    model, tokenizer, _ = load_with_tokenizers(args.model, device=device)
    config = model.config
    prompt = [config.bos_id, *tokenizer.encode(args.prompt)]
    new: list[int] = []
    shown = ""

    def show(_rows: torch.Tensor, tokens: torch.Tensor) -> None:
        nonlocal shown
        token = int(tokens[0])
        if token == config.eos_id:
            return
        new.append(token)
        text = tokenizer.decode(new)
        if text.startswith(shown):  # a partial character shows once it is whole
            sys.stdout.write(text[len(shown) :])
            sys.stdout.flush()
            shown = text

    if args.sample:
        generator = torch.Generator(device=next(model.parameters()).device)
        generator.manual_seed(args.seed)
        sample(
            model,
            [prompt],
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            generator=generator,
            on_token=show,
        )
    else:
        greedy_search(model, [prompt], max_new_tokens=args.max_new_tokens, on_token=show)
    text = tokenizer.decode(new)
    sys.stdout.write(text[len(shown) :] if text.startswith(shown) else "\n" + text)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def _load_image(path: str, channels: int, size: int, invert: bool):
    import numpy as np
    import torch
    from PIL import Image, UnidentifiedImageError  # missing: `main` names attnlab[vision]

    if not Path(path).is_file():
        raise FileNotFoundError(f"IMAGE: {path}: no such file")
    try:
        with Image.open(path) as image:
            image = image.convert("L" if channels == 1 else "RGB")
            image = image.resize((size, size), Image.Resampling.BILINEAR)
            pixels = np.asarray(image, dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"IMAGE: {path}: not an image Pillow reads ({e})") from None
    if invert:
        pixels = 1.0 - pixels
    tensor = torch.from_numpy(pixels.copy())
    return tensor.unsqueeze(0) if channels == 1 else tensor.permute(2, 0, 1)


def cmd_predict(args: argparse.Namespace) -> int:
    import torch

    from ..models.transformer import load_pretrained

    device = device_of(args.device)
    check_kind(args.model, {"vit"}, "predict", "--model")
    model = load_pretrained(args.model, device=device)
    config = model.config
    images = torch.stack(
        [
            _load_image(path, config.in_channels, config.image_size, args.invert)
            for path in args.images
        ]
    )
    model.eval()
    with torch.no_grad():
        probs = model(images.to(device)).float().softmax(dim=-1).cpu()
    k = min(args.top_classes, config.num_classes)
    values, classes = probs.topk(k, dim=-1)
    for path, row_p, row_c in zip(args.images, values, classes, strict=True):
        ranked = ", ".join(f"{int(c)} {float(p):.3f}" for p, c in zip(row_p, row_c, strict=True))
        print(f"{path}\t{ranked}")
    return 0


def add_parsers(sub) -> None:
    generate = sub.add_parser(
        "generate",
        help="continue a prompt with a language model (attnlab train --task text)",
        description=(
            "Continue PROMPT with a TransformerLM trained by `attnlab train --task text`, "
            "greedily or by sampling (--sample), writing the text to standard output as each "
            "token comes. MODEL may be OUT/model, a checkpoint or a run OUT."
        ),
    )
    add_model_flag(generate)
    generate.add_argument("prompt", nargs="?", default="", help="the text to continue ('')")
    add_max_new_tokens_flag(generate)
    add_deprecated(
        generate, "--max-len", use="--max-new-tokens", dest="max_new_tokens", type=positive_int
    )
    add_sampling_flags(generate, probability, positive_number)  # without --sample: greedy
    add_seed_flag(generate)
    add_device_flag(generate)
    generate.set_defaults(func=resolving(cmd_generate))

    predict = sub.add_parser(
        "predict",
        help="classify images with a Vision Transformer (attnlab train --task digits)",
        description=(
            "Print, for each IMAGE, its --top-classes most probable classes with their "
            "probabilities (tab after the path). Images are converted to the model's channels "
            "and size and scaled to [0, 1]; the digits task's images are light strokes on "
            "black: --invert for dark ink on white paper. Needs Pillow (attnlab[vision])."
        ),
    )
    add_model_flag(predict)
    predict.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG)")
    predict.add_argument(
        "--top-classes",
        type=positive_int,
        default=3,
        metavar="N",
        help="the N most probable classes to show (3)",
    )
    add_deprecated(predict, "--top-k", use="--top-classes", dest="top_classes", type=positive_int)
    predict.add_argument("--invert", action="store_true", help="dark ink on light paper")
    add_device_flag(predict)
    predict.set_defaults(func=resolving(cmd_predict))

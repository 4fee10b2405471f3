"""``attnlab predict``: the classes of images from a Vision Transformer (``attnlab train
--task digits``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import add_device_flag, add_model_flag, device_of, positive_int
from ._model import check_kind, resolving


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
    predict.add_argument("--invert", action="store_true", help="dark ink on light paper")
    add_device_flag(predict)
    predict.set_defaults(func=resolving(cmd_predict))

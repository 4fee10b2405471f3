"""``attnlab export``: a trained model directory, out to CTranslate2 or Hugging Face."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import (
    QUANTIZE_METAVAR,
    add_model_flag,
    add_out_flag,
    add_overwrite_flag,
)
from ._model import resolving


def cmd_export(args: argparse.Namespace) -> int:
    from ..formats import QUANTIZATIONS, TARGETS, export_model

    # Checked here rather than by argparse's choices: a bad value is one line on stderr.
    if args.to not in TARGETS:
        given = "nothing" if args.to is None else repr(args.to)
        raise ValueError(f"--to: expected one of {', '.join(TARGETS)}, got {given}")
    if args.quantize is not None and args.quantize not in QUANTIZATIONS:
        raise ValueError(
            f"--quantize: expected one of {', '.join(QUANTIZATIONS)}, got {args.quantize!r}"
        )
    if args.quantize is not None and args.to != "ctranslate2":
        raise ValueError(f"--quantize: only --to ctranslate2 quantizes, not --to {args.to}")
    out_dir = Path(args.out)
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise FileExistsError(f"--out: {out_dir} exists and is not a directory")
    if out_dir.exists() and not args.overwrite:
        raise FileExistsError(f"--out: {out_dir} already exists; pass --overwrite to replace it")
    try:
        out = export_model(
            args.model,
            args.out,
            to=args.to,
            quantization=args.quantize,
            force=args.overwrite,
        )
    except ImportError as error:  # the target's package is missing: not a bug, one line
        raise RuntimeError(str(error)) from error
    print(f"attnlab export: wrote the {args.to} model to {out}/")
    return 0


def add_parsers(sub) -> None:
    export = sub.add_parser(
        "export",
        help="export a trained model to CTranslate2 or Hugging Face transformers",
        description=(
            "Write the encoder-decoder model of --model (config.json, model.safetensors and "
            "the tokenizer files, as `attnlab train` writes them into OUT/model) as the directory "
            "--out, which "
            "another engine runs with the same outputs: a CTranslate2 model "
            "(ctranslate2.Translator, with a README), or a Hugging Face MarianMTModel with its "
            "fast tokenizer (AutoModelForSeq2SeqLM and AutoTokenizer). Options the target "
            "cannot express are refused before anything is written; --out appears complete "
            "or not at all."
        ),
    )
    add_model_flag(export)
    add_out_flag(export, "the directory to create; required", required=True)
    export.add_argument("--to", required=True, metavar="TARGET", help="ctranslate2 or huggingface")
    export.add_argument(
        "--quantize",
        default=None,
        metavar=QUANTIZE_METAVAR,
        help="CTranslate2 weight type: int8, int8_float32, int8_float16, int8_bfloat16, int16, "
        "float16, bfloat16 or float32 (default: float32)",
    )
    add_overwrite_flag(export, "replace an existing --out, once the new one is complete")
    export.set_defaults(func=resolving(cmd_export))

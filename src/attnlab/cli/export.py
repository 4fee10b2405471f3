"""``attnlab export``: a trained model directory, out to CTranslate2 or Hugging Face."""

from __future__ import annotations

import argparse


def cmd_export(args: argparse.Namespace) -> int:
    from ..export import QUANTIZATIONS, TARGETS, export_model

    # Checked here rather than by argparse's choices: a bad value is one line on stderr.
    if args.to not in TARGETS:
        given = "nothing" if args.to is None else repr(args.to)
        raise ValueError(f"--to: expected one of {', '.join(TARGETS)}, got {given}")
    if args.quantization is not None and args.quantization not in QUANTIZATIONS:
        raise ValueError(
            f"--quantization: expected one of {', '.join(QUANTIZATIONS)}, got {args.quantization!r}"
        )
    if args.quantization is not None and args.to != "ctranslate2":
        raise ValueError(f"--quantization: only --to ctranslate2 quantizes, not --to {args.to}")
    try:
        out = export_model(
            args.model_dir,
            args.out_dir,
            to=args.to,
            quantization=args.quantization,
            force=args.force,
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
            "Write the encoder-decoder model of MODEL_DIR (config.json, model.safetensors and "
            "the tokenizer files, as `attnlab train` writes them into OUT/model) as a directory "
            "another engine runs with the same outputs: a CTranslate2 model "
            "(ctranslate2.Translator, with a README), or a Hugging Face MarianMTModel with its "
            "fast tokenizer (AutoModelForSeq2SeqLM and AutoTokenizer). Options the target "
            "cannot express are refused before anything is written; OUT_DIR appears complete "
            "or not at all."
        ),
    )
    export.add_argument("model_dir", metavar="MODEL_DIR", help="a trained model directory")
    export.add_argument("out_dir", metavar="OUT_DIR", help="the directory to create")
    export.add_argument(
        "--to", default=None, metavar="TARGET", help="ctranslate2 or huggingface (required)"
    )
    export.add_argument(
        "--quantization",
        default=None,
        metavar="TYPE",
        help="CTranslate2 weight type: int8, int8_float32, int8_float16, int8_bfloat16, int16, "
        "float16, bfloat16 or float32 (default: float32)",
    )
    export.add_argument("--force", action="store_true", help="replace an existing OUT_DIR")
    export.set_defaults(func=cmd_export)

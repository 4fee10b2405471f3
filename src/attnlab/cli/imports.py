"""``attnlab import``: a pretrained model from another library, in as an attnlab model directory.

Today one format: a Hugging Face transformers Marian directory (the opus-mt family), read by
:func:`attnlab.formats.marian.import_marian`.
"""

from __future__ import annotations

import argparse

from ._args import add_out_flag, add_overwrite_flag


def cmd_import(args: argparse.Namespace) -> int:
    from ..formats.marian import import_marian

    if args.out is None:
        raise ValueError("--out: required (the attnlab model directory to create)")
    out = import_marian(args.source, args.out, overwrite=args.overwrite)
    from ..models.saved import read_config

    _, config = read_config(out)  # the summary needs the config, not the weights again
    vocab = (
        f"{config.vocab_size:,} shared tokens"
        if config.share_embeddings
        else f"{config.vocab_size:,} source + {config.target_vocab_size:,} target tokens"
    )
    print(
        f"attnlab import: wrote {out}/ (Marian: d_model {config.d_model}, "
        f"{config.num_encoder_layers} + {config.num_decoder_layers} layers, {config.num_heads} "
        f'heads, {config.activation}, {vocab}); try: attnlab translate --model {out} "..."'
    )
    return 0


def add_parsers(sub) -> None:
    imports = sub.add_parser(
        "import",
        help="import a pretrained Marian / opus-mt translation model as an attnlab model",
        description=(
            "Read a Hugging Face transformers Marian directory (the opus-mt models: "
            "config.json, model.safetensors or pytorch_model.bin, source.spm, target.spm, "
            "vocab.json, tokenizer_config.json) and write an ordinary attnlab model directory "
            "--out, which translate, evaluate, serve, viz, explain, export and train "
            "--init-from take. Everything is checked before anything is written; what attnlab "
            "cannot represent is named in one line."
        ),
    )
    imports.add_argument(
        "source", metavar="MARIAN_DIR", help="the transformers Marian directory to read"
    )
    add_out_flag(imports, "the attnlab model directory to create; required")
    add_overwrite_flag(imports, "replace an existing --out, once the new one is complete")
    imports.set_defaults(func=cmd_import)

"""``attnlab config``: the model presets with their parameter counts, one preset in full, or a
packaged recipe (:mod:`attnlab.jobs.recipes`), the job file to start one's own from."""

from __future__ import annotations

import argparse
import json
import sys

from ..jobs.recipes import recipe_names, recipe_text, toml_loads
from ..models.transformer import TransformerConfig, count_parameters
from ..models.vision import VisionConfig, count_vit_parameters
from ._args import add_json_flag

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


def cmd_config(args: argparse.Namespace) -> int:
    if args.recipe is not None:
        if args.preset is not None:
            raise ValueError(f"--recipe: prints a task's recipe; drop NAME ({args.preset})")
        if args.json:
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


def add_parsers(sub) -> None:
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

"""``attnlab average``: the element-wise mean of checkpoints' weights (the paper's final
models, sec. 6.1), written as one model directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import add_out_flag, add_overwrite_flag


def cmd_average(args: argparse.Namespace) -> int:
    import shutil

    from .._io import atomic_write, atomic_write_dir
    from ..inference.modeldir import resolve_model_dir
    from ..models.saved import read_config_file
    from ..train.checkpoint import average_checkpoints

    dirs = [resolve_model_dir(path, name="CKPT") for path in args.checkpoints]
    configs = []
    for path, directory in zip(args.checkpoints, dirs, strict=True):
        if not (directory / "model.safetensors").is_file():
            raise FileNotFoundError(f"CKPT: {path} holds no model.safetensors")
        configs.append(read_config_file(directory))
    for path, config in zip(args.checkpoints[1:], configs[1:], strict=True):
        if config != configs[0]:
            raise ValueError(
                f"CKPT: {path} has another config.json than {args.checkpoints[0]}; only "
                f"checkpoints of one model average"
            )
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"--out: {out} exists; choose another, or pass --overwrite")
    weights, metadata = average_checkpoints(dirs)

    def write(temp: Path) -> None:
        from .._tensorfile import save_safetensors

        newest = dirs[-1]
        atomic_write(temp / "model.safetensors", lambda p: save_safetensors(weights, p, metadata))
        for file in newest.iterdir():  # config, tokenizers, job.json (links in a view)
            skip = {"model.safetensors", "optimizer.safetensors", "state.json"}
            if file.name not in skip and file.is_file():
                shutil.copyfile(file, temp / file.name)

    atomic_write_dir(out, write)
    print(f"averaged {len(dirs)} checkpoints into {out}/")
    return 0


def add_parsers(sub) -> None:
    average = sub.add_parser(
        "average",
        help="average checkpoints into one model directory",
        description=(
            "Average the weights of checkpoints (OUT/checkpoints/step-N, or model directories "
            "of the same model) element-wise, as the paper's final models (sec. 6.1), into "
            "--out, a model directory with the newest one's config and its run's tokenizers; "
            "translate, evaluate and serve read it."
        ),
    )
    average.add_argument("checkpoints", nargs="+", metavar="CKPT", help="checkpoint directories")
    add_out_flag(average, "the model directory to write; required", required=True)
    add_overwrite_flag(average)
    average.set_defaults(func=cmd_average)

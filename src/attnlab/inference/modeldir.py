"""Where a model is: :func:`resolve_model_dir` turns what a user names (a model directory, a
checkpoint of a run, or the run directory itself) into one directory that every loader reads
(:func:`attnlab.load_pretrained`, the tokenizers, ``job.json``). The layout of a run, its
files' names and the reader of ``job.json`` (``read_job_file``) live in :mod:`attnlab._rundir`.

A checkpoint holds no tokenizer: its run's are found two levels up, and a view of the
checkpoint's weights with them (links in a temporary directory, removed at exit) is returned.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .._rundir import CONFIG_FILE, JOB_FILE, TOKENIZER_NAMES, find_checkpoints

if TYPE_CHECKING:
    import torch

__all__ = ["find_run_files", "kind_of", "load_with_tokenizers", "resolve_model_dir"]

_VIEWS: list[str] = []


def _remove_views() -> None:
    for path in _VIEWS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_views)


def find_run_files(checkpoint: Path) -> list[Path]:
    """The files of the run a checkpoint ``OUT/checkpoints/step-N`` belongs to that the
    checkpoint lacks: its tokenizers (``OUT/tokenizers`` or ``OUT/model``) and ``job.json``."""
    run = checkpoint.parent.parent
    found: list[Path] = []
    for folder in (run / "tokenizers", run / "model"):
        names = [folder / n for n in TOKENIZER_NAMES if (folder / n).is_file()]
        if names:
            found += names
            break
    for job in (run / JOB_FILE, run / "model" / JOB_FILE):
        if job.is_file():
            found.append(job)
            break
    return found


def resolve_model_dir(path: str | os.PathLike, *, name: str = "model") -> Path:
    """The directory to load for ``path``: a model directory (``config.json`` and
    ``model.safetensors``, as ``OUT/model``) is itself; a run directory ``OUT`` is its
    ``OUT/model`` (or its newest checkpoint while training has not finished); a checkpoint
    ``OUT/checkpoints/step-N`` becomes a view of its weights with the run's tokenizers and
    ``job.json``. ``name`` is the argument the errors name (``--model``, say).

    Any other directory is returned as it is, for the loader to name what it lacks.
    Raises FileNotFoundError, one line naming ``name`` and the path, when it does not exist.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"{name}: {directory}: no such directory (a model directory OUT/model, a "
            f"checkpoint OUT/checkpoints/step-N, or a run OUT)"
        )
    if not (directory / CONFIG_FILE).is_file():
        if (directory / "model" / CONFIG_FILE).is_file():
            return directory / "model"
        checkpoints = find_checkpoints(directory)
        if checkpoints:
            return resolve_model_dir(checkpoints[-1], name=name)
        return directory  # the loader names what is missing (config.json, job.json)
    has_tokenizer = any((directory / n).is_file() for n in TOKENIZER_NAMES)
    if has_tokenizer or directory.parent.name != "checkpoints":
        return directory
    extra = [p for p in find_run_files(directory) if not (directory / p.name).exists()]
    if not extra:
        return directory  # an image model's checkpoint: nothing else to find
    view = Path(tempfile.mkdtemp(prefix="attnlab-checkpoint-"))
    _VIEWS.append(str(view))
    for source in [p for p in directory.iterdir() if p.is_file()] + extra:
        try:
            os.symlink(source.resolve(), view / source.name)
        except OSError:  # a filesystem without links
            shutil.copyfile(source, view / source.name)
    return view


def kind_of(directory: str | os.PathLike) -> str:
    """The model class a model directory holds (``"Transformer"``, ``"TransformerLM"``,
    ``"TransformerEncoder"``, ``"VisionTransformer"``), read from its ``config.json``
    without loading weights (:func:`attnlab.models.saved.read_config_file`); ``"unknown"`` when
    it does not say."""
    from ..models.saved import read_config_file

    try:
        config = read_config_file(directory)
    except (OSError, ValueError):
        return "unknown"
    kind = config.get("model_type") or config.get("architectures") or "unknown"
    return kind if isinstance(kind, str) else str(kind)


def load_with_tokenizers(
    model_dir: str | os.PathLike, *, device: str | torch.device | None = None
) -> tuple:
    """``(model, src_tokenizer, tgt_tokenizer)`` of a model directory written by training (the
    same tokenizer twice for a joint vocabulary), checked to belong together: a tokenizer with
    more tokens than the model's vocabulary on its side, or other special ids, is refused here
    (ValueError naming both files) rather than failing at the first sentence."""
    from ..data.tokenizer import (
        SRC_TOKENIZER_FILE,
        TGT_TOKENIZER_FILE,
        TOKENIZER_FILE,
        load_tokenizers,
    )
    from ..models.transformer import Transformer, load_pretrained

    model = load_pretrained(model_dir, device=device)
    directory, config = Path(model_dir), model.config
    if not hasattr(config, "vocab_size"):
        raise ValueError(f"model_dir: {directory} holds a {model.model_type!r} model, not text")
    src, tgt = load_tokenizers(model_dir)
    joint = directory / TOKENIZER_FILE
    if joint.is_file():
        files = (joint, joint)
    else:
        files = (directory / SRC_TOKENIZER_FILE, directory / TGT_TOKENIZER_FILE)
    two = isinstance(model, Transformer)  # a source and a target side; else one, unnamed
    sides = [("source " if two else "", src, files[0], "vocab_size", config.vocab_size)]
    if two:
        field = "vocab_size" if config.tgt_vocab_size is None else "tgt_vocab_size"
        sides.append(("target ", tgt, files[1], field, config.target_vocab_size))
    for side, tokenizer, path, field, size in sides:
        if tokenizer.vocab_size > size:
            raise ValueError(
                f"{path}: the tokenizer has {tokenizer.vocab_size:,} tokens, more than the "
                f"model's {side}vocabulary ({directory / CONFIG_FILE}: {field}={size:,}); the "
                f"tokenizer and the model do not belong together"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(tokenizer, name) != getattr(config, name):
                raise ValueError(
                    f"{directory / CONFIG_FILE}: {name}={getattr(config, name)}, but {path} "
                    f"uses {getattr(tokenizer, name)}; the tokenizer and the model do not "
                    f"belong together"
                )
    return model, src, tgt

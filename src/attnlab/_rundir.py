"""The names of the files of a run directory and a model directory, and their readers: the
ground floor that training writes by, and that decoding, inference and the job layer read by.

``attnlab train --out OUT`` lays a run out as::

    OUT/job.json                     the job (written when training starts)
    OUT/tokenizers/                  tokenizer.json, or src_tokenizer.json + tgt_tokenizer.json
    OUT/checkpoints/step-NNNNNNNN/   config.json, model.safetensors, optimizer, state.json
    OUT/model/                       the averaged model, its tokenizers and job.json

Each name is defined here once; the modules that write or load the files
(:mod:`attnlab.models.saved`, :mod:`attnlab.data.tokenizer`, :mod:`attnlab.train.checkpoint`,
:mod:`attnlab.inference.modeldir`) import it from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._io import read_json

__all__ = [
    "CHECKPOINTS_DIR",
    "CHECKPOINT_FILES",
    "CONFIG_FILE",
    "JOB_FILE",
    "OPTIMIZER_FILE",
    "SRC_TOKENIZER_FILE",
    "STATE_FILE",
    "TGT_TOKENIZER_FILE",
    "TOKENIZER_FILE",
    "TOKENIZER_NAMES",
    "WEIGHTS_FILE",
    "find_checkpoints",
    "read_job_file",
]

#: A model's configuration and weights (:mod:`attnlab.models.saved`).
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
#: The tokenizer files a model directory may hold: a joint one, or one per side.
TOKENIZER_FILE = "tokenizer.json"
SRC_TOKENIZER_FILE = "src_tokenizer.json"
TGT_TOKENIZER_FILE = "tgt_tokenizer.json"
TOKENIZER_NAMES = (TOKENIZER_FILE, SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE)
#: The job a model was trained by, beside it (and at the top of its run): :func:`read_job_file`.
JOB_FILE = "job.json"
#: A run's checkpoints, ``OUT/checkpoints/step-NNNNNNNN/``, each holding every one of
#: :data:`CHECKPOINT_FILES` (:mod:`attnlab.train.checkpoint`).
CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
CHECKPOINT_FILES = (WEIGHTS_FILE, CONFIG_FILE, OPTIMIZER_FILE, STATE_FILE)


def find_checkpoints(out: str | os.PathLike[str]) -> list[Path]:
    """The complete checkpoint directories of run ``out``, oldest first (by step).

    Complete: named ``step-NNNNNNNN`` with every file a checkpoint holds (a checkpoint is
    renamed into place only once written, and renamed away before it is deleted, so an
    interrupted write or deletion leaves another name, which is ignored).
    """
    root = Path(out) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        name = path.name
        if not (name.startswith("step-") and name[5:].isdigit() and path.is_dir()):
            continue
        if all((path / f).is_file() for f in CHECKPOINT_FILES):
            found.append((int(name[5:]), path))
    return [path for _, path in sorted(found)]


def read_job_file(
    directory: str | os.PathLike[str],
    *,
    why: str = "the model was not saved by `attnlab train`, so its task is unknown",
) -> dict[str, Any]:
    """The JSON object of ``job.json`` in ``directory`` (a model directory or a run), as it is:
    the one place that file is opened and parsed (``Job.from_dict`` of :mod:`attnlab.jobs`
    makes a job of it; :meth:`attnlab.decode.options.DecodingOptions.carried_by` reads its
    ``[eval]``). FileNotFoundError ``PATH: missing; {why}``; else as :func:`read_json`."""
    path = Path(directory) / JOB_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; {why}")
    return read_json(path)

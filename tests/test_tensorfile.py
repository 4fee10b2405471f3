"""attnlab._tensorfile's writer: safetensors' format, byte for byte, and canonical: equal tensors
and metadata give equal files in every process (safetensors' own writer orders the metadata as
a hash map seeded afresh in each process); and two trainings of one seed give byte-identical
model directories (issue 48)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from _helpers import TINY_CLI
from attnlab._tensorfile import read_safetensors, save_safetensors

ROOT = Path(__file__).resolve().parents[1]


def _tensors() -> dict[str, torch.Tensor]:
    """Every dtype the format holds here, a scalar, an empty tensor, a transposed one."""
    generator = torch.Generator().manual_seed(0)
    return {
        "weight": torch.randn(3, 4, generator=generator),
        "transposed": torch.randn(4, 3, generator=generator).t(),
        "half": torch.randn(5, generator=generator).half(),
        "brain": torch.randn(2, 3, generator=generator).bfloat16(),
        "double": torch.tensor(3.25, dtype=torch.float64),
        "mask": torch.tensor([True, False, True]),
        "ids": torch.arange(-3, 4, dtype=torch.int8),
        "count": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "empty": torch.zeros(0, 2),
        "größe": torch.ones(1),
    }


@pytest.mark.parametrize("metadata", [{"format": "pt"}, {}], ids=["one-key", "none"])
def test_the_file_is_safetensors_own_where_its_order_is_fixed(tmp_path, metadata):
    """With at most one metadata key (no order to vary), the file is exactly safetensors' (no
    metadata: no ``__metadata__``, as safetensors writes for None)."""
    tensors = _tensors()
    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    save_file(contiguous, tmp_path / "theirs", metadata or None)
    save_safetensors(tensors, tmp_path / "ours", metadata)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()
    loaded = load_file(tmp_path / "ours")
    assert loaded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor), name


_SAVE = """
import sys, torch
from attnlab._tensorfile import save_safetensors
tensors = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(2, dtype=torch.float16)}
metadata = {"format": "pt", "model_type": "transformer", "a": "1", "z": "2", "m": "3"}
save_safetensors(tensors, sys.argv[1], metadata)
"""


@pytest.mark.slow  # three subprocesses
def test_equal_tensors_and_metadata_give_equal_bytes_in_every_process(tmp_path):
    """Saved by three processes of different hash seeds: one file, byte for byte, whose
    metadata reads back as given (safetensors' writer gives one of 120 orders of these five
    keys, drawn in each process)."""
    files = []
    for seed in range(3):
        path = tmp_path / f"saved-{seed}.safetensors"
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        subprocess.run([sys.executable, "-c", _SAVE, str(path)], check=True, env=env, cwd=ROOT)
        files.append(path.read_bytes())
    assert all(data == files[0] for data in files[1:])
    tensors, metadata = read_safetensors(tmp_path / "saved-0.safetensors")
    assert metadata == {"format": "pt", "model_type": "transformer", "a": "1", "z": "2", "m": "3"}
    assert torch.equal(tensors["b"], torch.arange(6.0).reshape(2, 3))


def test_bad_tensors_and_metadata_are_named(tmp_path):
    with pytest.raises(TypeError, match=r"tensors: w: expected a torch.Tensor, got list"):
        save_safetensors({"w": [1.0]}, tmp_path / "x", {})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"tensors: c: dtype torch.complex64 is not one of"):
        save_safetensors({"c": torch.zeros(2, dtype=torch.complex64)}, tmp_path / "x", {})
    with pytest.raises(TypeError, match=r"metadata: expected str keys and values"):
        save_safetensors({}, tmp_path / "x", {"step": 3})  # type: ignore[dict-item]
    with pytest.raises(FileNotFoundError) as error:
        save_safetensors({}, tmp_path / "missing" / "x", {})
    assert "missing" in str(error.value)


#: Files of a run directory that hold the run's own wall-clock times or its directory's path,
#: not the model: compared apart (below).
TIMED = {"metrics.csv", "train.log", "summary.json", "results.json", "state.json"}


@pytest.mark.slow  # two trainings in subprocesses
def test_two_trainings_of_one_seed_give_byte_identical_model_directories(tmp_path):
    """`attnlab train` twice, same seed, two processes of different hash seeds: the model
    directory (weights, config, job, tokenizer), the tokenizers and every checkpoint's
    safetensors files are equal byte for byte."""
    runs = [tmp_path / "a", tmp_path / "b"]
    for seed, out in enumerate(runs):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        command = [sys.executable, "-m", "attnlab", *TINY_CLI, "--out", str(out), "--no-progress"]
        subprocess.run(command, check=True, env=env, cwd=ROOT, capture_output=True)
    files = sorted(p.relative_to(runs[0]) for p in runs[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(runs[1]) for p in runs[1].rglob("*") if p.is_file())
    model = [f for f in files if f.parts[0] == "model"]
    assert {f.name for f in model} >= {"model.safetensors", "config.json", "tokenizer.json"}
    assert any(f.name == "optimizer.safetensors" for f in files)  # a checkpoint was compared
    differ = [
        str(f)
        for f in files
        if f.name not in TIMED and (runs[0] / f).read_bytes() != (runs[1] / f).read_bytes()
    ]
    assert differ == []
    assert not any(f.name in TIMED for f in model)  # no clock in the model directory

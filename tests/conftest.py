"""Shared test configuration.

Under CI (the ``CI`` environment variable set), hypothesis runs derandomized: the same examples
every run, so a red CI is reproducible. Locally it explores new examples each run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from _helpers import one_torch_thread

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one thread for the test (``pytestmark = pytest.mark.usefixtures("one_thread")``):
    tiny models train and decode fastest so, a busy machine slows them least, and runs that
    compare bits with a one-thread worker process compute the same sums."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def numbers_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small English->German numbers Transformer trained for the session (~10 s): 2 encoder
    and 2 decoder layers of 4 heads, so that pages and pictures have layers and heads to tell
    apart. Returns its model directory (config, weights, tokenizer)."""
    from attnlab.cli import main

    out = tmp_path_factory.mktemp("numbers-model")
    argv = ["train", "--config", "configs/numbers.toml", "--out", str(out), "--no-progress"]
    argv += ["--max-steps", "150", "--eval-every", "150", "--checkpoint-every", "150"]
    argv += [
        "--set", "task.high=999", "--set", "task.valid_size=30", "--set", "task.test_size=30",
        "--set", "tokenizer.vocab_size=300", "--set", "model.d_model=64",
        "--set", "model.d_ff=128", "--set", "train.schedule=transformer",  # eq. 3, not cosine
        "--set", "train.lr_factor=1.0", "--set", "train.warmup=60",
        "--set", "train.max_tokens=1024", "--set", "train.average_last=1",
        "--set", "eval.bleu_sentences=10",
    ]  # fmt: skip
    assert main(argv) == 0
    return out / "model"

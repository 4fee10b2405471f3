"""Builders that several test files share (imported, never copied): the tests' tiny config,
random token ids and padded prompt batches. A helper that one file alone uses stays in it."""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from attnlab import TransformerConfig

#: The tiny preset's special ids: pad, bos, eos.
PAD, BOS, EOS = 0, 1, 2
#: The first id that is no special token.
FIRST_ID = 3


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread inside the block, the previous count restored after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def tiny(**overrides: object) -> TransformerConfig:
    """The tests' preset, without dropout unless asked (so that outputs are deterministic)."""
    return TransformerConfig.preset("tiny", **{"dropout": 0.0, **overrides})


def token_ids(batch: int, length: int, seed: int, vocab: int = 1000) -> Tensor:
    """``(batch, length)`` random ids that are never pad / bos / eos."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_ID, vocab, (batch, length), generator=g)


def right_padded(rows: list[list[int]], pad: int = PAD) -> Tensor:
    """``rows`` as one ``(B, T)`` batch, each padded at its end."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])


def left_padded(rows: list[list[int]], pad: int = PAD) -> Tensor:
    """``rows`` as one ``(B, T)`` batch, each padded at its start (prompts that end together)."""
    width = max(len(r) for r in rows)
    return torch.tensor([[pad] * (width - len(r)) + r for r in rows])


def subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (sub)command of ``parser`` as ``("viz attention", its parser)``, at any depth:
    walked from argparse's own structures, not from what the CLI's reference generator says."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from subcommands(sub, f"{prefix}{name} ")


#: `attnlab train` of the numbers recipe shrunk to 4 steps of a 1 + 1 layer model (seconds):
#: the CLI's training path end to end. Add ``--out DIR``.
TINY_CLI = [
    "train", "--config", "configs/numbers.toml", "--max-steps", "4", "--warmup", "1",
    "--eval-every", "4", "--checkpoint-every", "4", "--set", "train.log_every=2",
    "--set", "task.high=99", "--set", "task.valid_size=10", "--set", "task.test_size=10",
    "--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.num_encoder_layers=1",
    "--set", "model.num_decoder_layers=1", "--set", "train.average_last=1",
    "--set", "eval.bleu_sentences=5", "--set", "eval.beam_size=1",
    "--set", "tokenizer.vocab_size=300",
]  # fmt: skip


def default_sigint(then: Callable[[], object] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` for a child process that a test interrupts: SIGINT back to its default
    disposition, then ``then`` (another preexec_fn) if given. An ignored signal stays ignored
    across exec, and a suite started with SIGINT ignored (a script's background job,
    ``trap "" INT``) would hand that on: the child's Python would raise no KeyboardInterrupt."""

    def prepare() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if then is not None:
            then()

    return prepare


def start_serve(model: object, *flags: str) -> subprocess.Popen:
    """``attnlab serve --model MODEL --port 0 FLAGS...`` as a child process with text pipes
    (stdout, stderr), SIGINT at its default (:func:`default_sigint`)."""
    command = [sys.executable, "-m", "attnlab", "serve", "--model", str(model), "--port", "0"]
    return subprocess.Popen(
        [*command, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint(),
    )

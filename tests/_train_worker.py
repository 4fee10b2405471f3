"""Training runs for tests/train/test_train.py that need their own processes.

* ``python tests/_train_worker.py OUT [--resume] [--kill-after STEP]``: a small run of the
  "tiny" Transformer on a synthetic reversal task, with dropout, on one CPU thread (so that
  runs are deterministic). With ``--kill-after``, a watcher thread SIGKILLs the process as
  soon as ``OUT/checkpoints/step-{STEP:08d}`` exists (a crash right after a checkpoint).
* :func:`ddp_worker`: one rank of a 2-process gloo run (``torch.multiprocessing.spawn``).

The data, model and config builders are shared with the tests, so every run of a test trains
on the same examples.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import torch

from attnlab.data.examples import Examples, make_examples
from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.train import TrainConfig, Trainer, destroy_distributed, init_distributed
from attnlab.train.objectives import TranslationObjective

VOCAB = 24  # ids 4..23 are "words"; 0..3 are pad, bos, eos, unk


def reversal_examples(count: int, *, seed: int, long_every: int = 0) -> Examples:
    """``count`` random id sequences (2..9 tokens) paired with their reversal; with
    ``long_every`` > 0, every ``long_every``-th pair is 20 tokens long."""
    rng = random.Random(seed)
    pairs = []
    for i in range(count):
        length = 20 if long_every and i % long_every == 0 else rng.randint(2, 9)
        ids = [rng.randint(4, VOCAB - 1) for _ in range(length)]
        pairs.append((ids, ids[::-1]))
    return make_examples(pairs, max_len=64)


def small_model(dropout: float = 0.0, **overrides: object) -> Transformer:
    """The in-process training tests' model: the tiny preset narrowed to 1 + 1 layers of width
    32, seeded (0), over this worker's vocabulary."""
    torch.manual_seed(0)
    options = {
        "vocab_size": VOCAB,
        "d_model": 32,
        "num_heads": 2,
        "d_ff": 64,
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "dropout": dropout,
        **overrides,
    }
    return Transformer(TransformerConfig.preset("tiny", **options))


def tiny_model(dropout: float) -> Transformer:
    torch.manual_seed(1234)
    config = TransformerConfig.preset("tiny", vocab_size=VOCAB, dropout=dropout)
    return Transformer(config)


def resume_config(out: str) -> TrainConfig:
    """The SIGKILL test's run: 9 batches per epoch, 2 per step (steps of 2, 2, 2, 2, 1
    batches), a checkpoint every 3 steps (mid-epoch), an evaluation every 4."""
    return TrainConfig(
        out=out,
        max_tokens=96,
        accumulate=2,
        warmup=20,
        max_steps=14,
        eval_every=4,
        checkpoint_every=3,
        keep_checkpoints=2,
        average_last=2,
        log_every=1,
        seed=3,
    )


def rng_hook(step: int, model: torch.nn.Module) -> dict[str, float]:
    """An on_evaluate hook that draws from every global RNG (training must not notice)."""
    return {
        "hook_torch": float(torch.rand(())),
        "hook_python": random.random(),
        "hook_step": float(step),
    }


def _kill_when(path: Path) -> None:
    while not path.exists():
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--kill-after", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    random.seed(0)  # what the hook draws from Python's RNG is then the same in every run
    train = reversal_examples(120, seed=0)
    valid = reversal_examples(20, seed=1)
    if args.kill_after is not None:
        target = Path(args.out) / "checkpoints" / f"step-{args.kill_after:08d}"
        threading.Thread(target=_kill_when, args=(target,), daemon=True).start()
    trainer = Trainer(
        tiny_model(dropout=0.1),
        train,
        valid,
        resume_config(args.out),
        on_evaluate=rng_hook,
        progress=False,
        objective=TranslationObjective,
    )
    trainer.train(resume=args.resume)
    return 0


# -- distributed ---------------------------------------------------------------------------------


def ddp_config(out: str, compile: bool = False) -> TrainConfig:
    # Adam's first updates are +-lr for every gradient entry, however small: an entry that is
    # zero up to rounding (the attention key biases get none: softmax ignores a shift of all
    # scores) would move by +-lr in one run and -+lr in the other. eps = 1e-3 keeps entries
    # far below it from moving, and leaves the real ones (1e-3 .. 1) nearly sign-like.
    return TrainConfig(
        out=out,
        max_tokens=40,
        accumulate=2,
        warmup=4,
        eps=1e-3,
        max_steps=3,
        eval_every=3,
        checkpoint_every=3,
        keep_checkpoints=1,
        average_last=1,
        log_every=1,
        device="cpu",
        compile=compile,
    )


def ddp_examples() -> tuple[Examples, Examples]:
    # Every 4th pair is 20 tokens long: with max_tokens=40 such a pair is alone in its batch,
    # so one replica's share is empty (the replica must still join the gradient exchange).
    return reversal_examples(48, seed=5, long_every=4), reversal_examples(10, seed=6)


def ddp_trainer(out: str, compile: bool = False) -> Trainer:
    """The distributed tests' run of :func:`ddp_examples` into ``out``: alone, or one rank's."""
    train, valid = ddp_examples()
    return Trainer(
        tiny_model(dropout=0.0),
        train,
        valid,
        ddp_config(out, compile),
        progress=False,
        objective=TranslationObjective,
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ddp_worker(rank: int, world_size: int, port: int, out: str, compile: bool = False) -> None:
    """One rank of the distributed test (``torch.multiprocessing.spawn`` passes ``rank``)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    assert init_distributed() == (rank, world_size)
    try:
        ddp_trainer(out, compile).train()
    finally:
        destroy_distributed()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Training runs on memory-mapped shards for tests/data/test_shards.py, in their own processes.

* ``python tests/_shard_worker.py train OUT SHARDS... [--resume] [--kill-after STEP]``: the
  SIGKILL test's run of tests/_train_worker.py (the "tiny" Transformer, dropout 0.1, one
  thread, evaluations whose hook draws from every RNG) on :class:`ShardExamples` mixing the
  shard directories by weights 1, 2, ... With ``--kill-after``, SIGKILLed as soon as
  ``OUT/checkpoints/step-{STEP:08d}`` exists.
* ``python -m torch.distributed.run --standalone --nproc_per_node 2 tests/_shard_worker.py ddp
  OUT SHARDS...``: each rank builds its batcher over the shards (``num_replicas=2``) and
  writes its shares of two epochs to ``OUT/rank-R.json``; then the ranks train 3 steps
  together (gloo) into ``OUT/run``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
from pathlib import Path

import torch

import _train_worker as base
from attnlab.data.batching import TokenBatcher
from attnlab.data.shards import ShardExamples
from attnlab.train import Trainer, destroy_distributed, init_distributed
from attnlab.train.objectives import TranslationObjective


def reversal_pairs(count: int, *, seed: int) -> list[tuple[list[int], list[int]]]:
    """The pairs of ``_train_worker.reversal_examples`` (random ids and their reversal)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        ids = [rng.randint(4, base.VOCAB - 1) for _ in range(rng.randint(2, 9))]
        pairs.append((ids, ids[::-1]))
    return pairs


def examples(directories: list[str]) -> ShardExamples:
    """The shards as one index space, mixed by weights 1, 2, ... over 120 examples an epoch."""
    weights = [float(k + 1) for k in range(len(directories))]
    return ShardExamples(directories, max_len=64, weights=weights, epoch_size=120)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    random.seed(0)
    if args.kill_after is not None:
        target = Path(args.out) / "checkpoints" / f"step-{args.kill_after:08d}"
        threading.Thread(target=base._kill_when, args=(target,), daemon=True).start()
    trainer = Trainer(
        base.tiny_model(dropout=0.1),
        examples(args.shards),
        base.reversal_examples(20, seed=1),
        base.resume_config(args.out),
        on_evaluate=base.rng_hook,
        progress=False,
        objective=TranslationObjective,
    )
    trainer.train(resume=args.resume)


def ddp(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    rank, world_size = init_distributed()
    assert world_size == 2, world_size
    try:
        data = ShardExamples(args.shards, max_len=64)
        batcher = TokenBatcher.for_examples(data, 40, seed=0, num_replicas=2, rank=rank)
        shares = {epoch: [list(b) for b in batcher.batches(epoch)] for epoch in (0, 1)}
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank-{rank}.json").write_text(json.dumps(shares))
        config = base.ddp_config(str(out / "run"))
        Trainer(
            base.tiny_model(dropout=0.0),
            data,
            None,
            config,
            progress=False,
            objective=TranslationObjective,
        ).train()
    finally:
        destroy_distributed()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["train", "ddp"])
    parser.add_argument("out")
    parser.add_argument("shards", nargs="+")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--kill-after", type=int, default=None)
    args = parser.parse_args(argv)
    train(args) if args.mode == "train" else ddp(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

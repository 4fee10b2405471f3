"""``attnlab prepare``: what ``attnlab train`` would prepare on its first start, done ahead of
it (the tokenizers trained on the sample, the corpora encoded into token shards), into the
same cache under the same keys, so that a training run, or every process of a ``torchrun``
run, only opens them."""

from __future__ import annotations

import argparse

from ._args import add_config_flag, add_set_flag, add_verify_data_flag


def cmd_prepare(args: argparse.Namespace) -> int:
    from ..jobs import compose_job

    try:
        job = compose_job(args.config, sets=args.set or ())
    except FileNotFoundError as e:  # --config names neither a file nor a recipe
        raise FileNotFoundError(f"--config {e}") from None
    context = job.check()  # every file the job names, before any work
    task = job.task
    print(f"attnlab prepare: {task.heading()}", flush=True)
    ready = task.prepare(
        context, note=lambda line: print(f"  {line}", flush=True), verify=args.verify_data
    )
    if not ready:
        print(
            f"attnlab prepare: nothing to prepare for the {task.name} task: its data is small "
            f"and held in memory (attnlab train reads it at the start)",
            flush=True,
        )
        return 0
    print(
        f"attnlab prepare: ready; attnlab train --config {args.config} (and torchrun) opens "
        f"what was prepared",
        flush=True,
    )
    return 0


def add_parsers(sub) -> None:
    prepare = sub.add_parser(
        "prepare",
        help="prepare a large corpus ahead of training: tokenizers and token shards, cached",
        description=(
            "Do ahead of training what `attnlab train` does on its first start for a job whose "
            "training files are on disk (the files task): train the tokenizers on the seeded "
            "sample of [tokenizer] sample_size pairs, then clean and encode every training "
            "corpus on every core into token-id shards, with progress. Both go to the shard "
            "cache ([task] cache_dir, else $ATTNLAB_CACHE/shards, else "
            "~/.cache/attnlab/shards) under the keys `attnlab train` uses, so that a training "
            "run with the same --config and --set, or every process of a torchrun run, only "
            "opens them. The files' digests are remembered there too: a later start does not "
            "read an unchanged file again (--verify-data reads it anyway). A task whose data "
            "is held in memory (numbers, multi30k) has nothing to prepare, and says so."
        ),
    )
    add_config_flag(prepare, required=True)
    add_set_flag(prepare)
    add_verify_data_flag(prepare)
    prepare.set_defaults(func=cmd_prepare)

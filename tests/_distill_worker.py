"""A student's ``attnlab train`` in its own process, for tests/tasks/test_distill.py.

``python tests/_distill_worker.py CONFIG OUT [--hang-after-chunks N]``: runs ``attnlab train
--config CONFIG --out OUT --no-progress`` on one torch thread (as every run of the test, so that
they compute the same sums). With ``--hang-after-chunks N`` the teachers' translation of chunk
N + 1 never returns: the process decodes and writes N chunks, then waits to be killed (the
test SIGKILLs it once a chunk file is on disk).
"""

from __future__ import annotations

import argparse
import sys
import threading

import torch

import attnlab.tasks.distill as distill
from attnlab.cli import main


def hang_after(chunks: int) -> None:
    """Make the teachers' translation of every chunk after the first ``chunks`` block."""
    real = distill.chunk_targets
    calls = [0]

    def chunk_targets(*args, **kwargs):
        calls[0] += 1
        if calls[0] > chunks:
            threading.Event().wait()  # killed here, in the middle of a chunk
        return real(*args, **kwargs)

    distill.chunk_targets = chunk_targets


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--hang-after-chunks", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.hang_after_chunks is not None:
        hang_after(args.hang_after_chunks)
    sys.exit(main(["train", "--config", args.config, "--out", args.out, "--no-progress"]))

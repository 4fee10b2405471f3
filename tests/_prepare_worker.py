"""``attnlab ARGS`` as ``python -m attnlab ARGS`` runs it, with two test hooks, for
tests/cli/test_prepare.py (under ``torchrun``, or alone)::

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/_prepare_worker.py train --config JOB --out OUT

* ``ATTNLAB_TEST_PG_TIMEOUT_S``: the process group's timeout in seconds
  (``init_process_group(timeout=...)``), instead of torch's default (10 min for NCCL, 30 for
  gloo): a collective that waits longer fails, as a barrier would on a long preparation.
* ``ATTNLAB_TEST_PREPARE_DELAY_S``: each shard preparation sleeps that long first, so that it
  outlasts that timeout.

Only this script reads them: attnlab itself has no such hook.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch.distributed as dist

from attnlab.cli import main
from attnlab.data import prepare


def _hooks() -> None:
    timeout = os.environ.get("ATTNLAB_TEST_PG_TIMEOUT_S")
    if timeout:
        init = dist.init_process_group
        limit = datetime.timedelta(seconds=float(timeout))

        def init_with_timeout(*args, **kwargs):
            return init(*args, **{**kwargs, "timeout": limit})

        dist.init_process_group = init_with_timeout
    delay = os.environ.get("ATTNLAB_TEST_PREPARE_DELAY_S")
    if delay:
        write = prepare._write

        def slow_write(*args, **kwargs):
            time.sleep(float(delay))
            return write(*args, **kwargs)

        prepare._write = slow_write


if __name__ == "__main__":
    _hooks()
    sys.exit(main(sys.argv[1:]))

"""Faults injected into real training runs, for tests/train/test_checkpoint.py.

``python tests/_fault_worker.py ROOT --kills 24 --interrupts 8 --full-disks 6 --sigints 2``

One process imports torch once; every run is a forked child of it (no start-up cost), training
a very small Transformer (:func:`config`, :func:`model`) on one thread, so that runs are
deterministic. Inside the children the file-system calls that checkpointing makes (creating,
writing, flushing, renaming and deleting files and directories; :data:`EVENTS`) are counted
while a checkpoint or the final model is being written. First one uninterrupted run
(``ROOT/full``) counts them; then, at seeded event numbers, a child in its own directory:

* ``kill``: SIGKILLs itself just before that call (after it, for a write: with the file cut to
  half, a write interrupted half-way);
* ``interrupt``: gets SIGINT there (Ctrl-C): Python's KeyboardInterrupt;
* ``full-disk``: that call fails as on a full disk (ENOSPC);
* ``sigint``: (not at an event) the parent sends SIGINT once the first checkpoint exists,
  while each step sleeps 30 ms so that it lands mid-run.

Each faulted run is then resumed by another child, without faults. ``ROOT/report.json`` says,
per run: the fault, the event it hit, the digests of every file of every complete checkpoint
at that instant, how the child ended (its signal or exit status, an error's message), what
was left after it, and the warnings of the resumed run. The test compares
the directories with ``ROOT/full``.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import pathlib
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

import attnlab._io
import attnlab.models.saved
import attnlab.train.checkpoint
import attnlab.train.loop as loop
from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.train import TrainConfig, Trainer
from attnlab.train.checkpoint import find_checkpoints
from attnlab.train.objectives import TranslationObjective

sys.path.insert(0, str(Path(__file__).parent))
import _train_worker as base

EVENTS = (
    "os.replace",
    "os.fsync",
    "os.chmod",
    "os.unlink",
    "tempfile.mkstemp",
    "tempfile.mkdtemp",
    "shutil.rmtree",
    "shutil.copyfile",
    "attnlab._io._exchange",
    # attnlab's safetensors writer, where checkpoints (the optimizer) and models call it.
    "attnlab.train.checkpoint.save_safetensors",
    "attnlab.models.saved.save_safetensors",
    "pathlib.Path.write_text",
)
WRITES = (
    "attnlab.train.checkpoint.save_safetensors",
    "attnlab.models.saved.save_safetensors",
    "pathlib.Path.write_text",
)


def config(out: str) -> TrainConfig:
    """8 steps of 2 micro-batches, a checkpoint every 2 steps (2 kept, averaged at the end),
    an evaluation every 4 (its hook draws from every RNG)."""
    return TrainConfig(
        out=out,
        max_tokens=64,
        accumulate=2,
        warmup=4,
        max_steps=8,
        eval_every=4,
        checkpoint_every=2,
        keep_checkpoints=2,
        average_last=2,
        log_every=1,
        seed=5,
    )


def model() -> Transformer:
    torch.manual_seed(99)
    return Transformer(
        TransformerConfig(
            vocab_size=base.VOCAB,
            d_model=16,
            num_heads=2,
            d_ff=32,
            num_encoder_layers=1,
            num_decoder_layers=1,
            max_len=64,
            dropout=0.1,
        )
    )


def train(out: Path, *, resume: bool) -> None:
    random.seed(0)  # what the hook draws from Python's RNG is then the same in every run
    np.random.seed(0)
    train_set = base.reversal_examples(40, seed=0)
    valid_set = base.reversal_examples(8, seed=1)
    trainer = Trainer(
        model(),
        train_set,
        valid_set,
        config(str(out)),
        on_evaluate=base.rng_hook,
        progress=False,
        objective=TranslationObjective,
    )
    trainer.train(resume=resume)


# -- counting (and faulting) the file-system calls of checkpointing ---------------------------


class Counter:
    active = False
    count = 0
    names: ClassVar[list[str]] = []
    fault: ClassVar[dict[str, Any] | None] = None  # {"kind", "at", "out"}
    noted: ClassVar[dict[str, str]] = {}


def _hook(name: str, original: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        if not Counter.active:
            return original(*args, **kwargs)
        Counter.count += 1
        Counter.names.append(name)
        fault = Counter.fault
        if fault is None or Counter.count != fault["at"]:
            return original(*args, **kwargs)
        Counter.active = False  # the fault's own clean-up is not counted
        # The checkpoints complete at this instant, and their files' digests (written down
        # before any fault: a killed process reports nothing).
        Counter.noted = _digests(Path(fault["out"]))
        Path(fault["out"] + ".noted.json").write_text(json.dumps(Counter.noted))
        if fault["kind"] == "kill":
            if name in WRITES:
                result = original(*args, **kwargs)
                target = Path(args[1] if name.endswith("save_safetensors") else args[0])
                with open(target, "r+b") as handle:
                    handle.truncate(target.stat().st_size // 2)
                os.kill(os.getpid(), signal.SIGKILL)
                return result
            os.kill(os.getpid(), signal.SIGKILL)
        if fault["kind"] == "interrupt":
            os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt, here
            time.sleep(1)  # (the signal is handled before this ends)
        if fault["kind"] == "full-disk":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(*args, **kwargs)

    return call


def _install() -> None:
    owners = {
        "os": os,
        "tempfile": tempfile,
        "shutil": shutil,
        "attnlab._io": attnlab._io,
        "attnlab.train.checkpoint": attnlab.train.checkpoint,
        "attnlab.models.saved": attnlab.models.saved,
        "pathlib.Path": pathlib.Path,
    }
    for event in EVENTS:
        owner_name, _, attribute = event.rpartition(".")
        owner = owners[owner_name]
        setattr(owner, attribute, _hook(event, getattr(owner, attribute)))
    for name in ("save_checkpoint", "write_final_model"):
        original = getattr(loop, name)

        def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            Counter.active = True
            try:
                return _original(*args, **kwargs)
            finally:
                Counter.active = False

        setattr(loop, name, counted)


def own_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """The messages of the UserWarnings (attnlab's kind; not a ResourceWarning that the
    garbage collector happens to emit meanwhile, nor a DeprecationWarning)."""
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _digests(out: Path) -> dict[str, str]:
    found = {}
    for checkpoint in find_checkpoints(out):
        for path in sorted(checkpoint.iterdir()):
            key = str(path.relative_to(out))
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


# -- runs in forked children -------------------------------------------------------------------


def child(out: Path, result: Path, *, resume: bool, fault: dict | None, slow: bool) -> None:
    """The body of a forked child: :func:`run`, then end with its status."""
    status, report = run(out, resume=resume, fault=fault, slow=slow)
    result.write_text(json.dumps(report))
    os._exit(status)


def run(
    out: Path, *, resume: bool = False, fault: dict | None = None, slow: bool = False
) -> tuple[int, dict[str, Any]]:
    """Train into ``out``; the exit status (0, 130 for Ctrl-C, 1 for an OSError, 3 for any
    other error) and what happened."""
    Counter.fault, Counter.count, Counter.names = fault, 0, []
    report: dict[str, Any] = {"warnings": []}
    if slow:
        advance = loop.Position.advance

        def slowly(self: Any, *args: Any, **kwargs: Any) -> None:
            time.sleep(0.03)
            advance(self, *args, **kwargs)

        loop.Position.advance = slowly  # type: ignore[method-assign]
    status = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            train(out, resume=resume)
        except KeyboardInterrupt:
            status = 130
        except OSError as e:
            report.update(error=str(e), error_type=type(e).__name__, errno=e.errno)
            status = 1
        except BaseException:
            report["traceback"] = traceback.format_exc()
            status = 3
    report["warnings"] = own_warnings(caught)
    report["events"] = Counter.names
    report["noted"] = Counter.noted
    return status, report


def fork_run(
    out: Path,
    *,
    resume: bool = False,
    fault: dict | None = None,
    slow: bool = False,
    sigint_after: Path | None = None,
) -> dict[str, Any]:
    """Run :func:`child` in a forked process; its report, with how it ended."""
    result = out.with_name(out.name + (".resume" if resume else "") + ".json")
    pid = os.fork()
    if pid == 0:
        try:
            child(out, result, resume=resume, fault=fault, slow=slow)
        finally:
            os._exit(4)
    if sigint_after is not None:
        deadline = time.monotonic() + 120
        while not sigint_after.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(pid, signal.SIGINT)
    _, status = os.waitpid(pid, 0)
    report = json.loads(result.read_text()) if result.exists() else {}
    if os.WIFSIGNALED(status):
        report["ended"] = f"signal {os.WTERMSIG(status)}"
    else:
        report["ended"] = f"exit {os.WEXITSTATUS(status)}"
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--interrupts", type=int, default=8)
    parser.add_argument("--full-disks", type=int, default=6)
    parser.add_argument("--sigints", type=int, default=2)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args(argv)
    # The "interrupt" and "sigint" faults are SIGINTs that must raise KeyboardInterrupt in the
    # forked runs, even where this worker was started with SIGINT ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    torch.set_num_threads(1)
    _install()
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    # The uninterrupted run, here: it also warms this process up (torch's first steps are
    # slow), so that the forked children start warm.
    status, full = run(root / "full")
    full["ended"] = f"exit {status}"
    events = full.pop("events")
    report: dict[str, Any] = {"full": full, "events": events, "runs": []}
    rng = random.Random(args.seed)
    writes = [i + 1 for i, name in enumerate(events) if name in WRITES or "replace" in name]
    every = range(1, len(events) + 1)
    plan = [("kill", at) for at in sorted(rng.sample(every, args.kills))]
    plan += [("interrupt", at) for at in sorted(rng.sample(every, args.interrupts))]
    plan += [("full-disk", at) for at in sorted(rng.sample(writes, args.full_disks))]
    plan += [("sigint", None)] * args.sigints
    for number, (kind, at) in enumerate(plan):
        out = root / f"{kind}-{number:02d}"
        fault = {"kind": kind, "at": at, "out": str(out)} if at is not None else None
        first = (out / "checkpoints" / "step-00000002") if kind == "sigint" else None
        faulted = fork_run(out, fault=fault, slow=kind == "sigint", sigint_after=first)
        faulted.pop("events", None)
        noted = out.with_name(out.name + ".noted.json")
        faulted["noted"] = json.loads(noted.read_text()) if noted.exists() else {}
        state = {
            "checkpoints": [p.name for p in find_checkpoints(out)],
            "left": sorted(p.name for p in (out / "checkpoints").glob(".*")),
            "digests": _digests(out),
        }
        resumed = fork_run(out, resume=True)
        resumed.pop("events", None)
        report["runs"].append(
            {
                "kind": kind,
                "at": at,
                "event": events[at - 1] if at is not None else None,
                "dir": out.name,
                "faulted": faulted,
                "after_fault": state,
                "resumed": resumed,
            }
        )
    (root / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

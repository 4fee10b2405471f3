"""Resume under faults (issue 16): a damaged checkpoint is found before it is used and the
previous one resumed from; a kill, Ctrl-C or a full disk at any point of writing a checkpoint
loses nothing, and the resumed run is the uninterrupted one, bit for bit.

* Every checkpoint file truncated, emptied, or with one bit flipped (seeded), one at a time:
  a warning naming the file and the fault, the previous checkpoint resumed, the same losses
  and weights as the uninterrupted run; with no usable checkpoint, one error naming each.
* Damage that the digests cannot see (a file rewritten consistently, as by a faulty tool): an
  optimizer tensor of the wrong shape, tampered RNG states, a schedule or a position out of
  step; a checkpoint of the first format (no digests) with a truncated optimizer file.
* tests/_fault_worker.py (slow): SIGKILL at 22 seeded file-system calls of checkpointing,
  Ctrl-C at 6 more and from outside, ENOSPC at 5 writes; every run resumed and compared.

The runs are tests/_fault_worker.py's: a very small Transformer, 8 steps, a checkpoint every 2
(2 kept), on one thread.
"""

from __future__ import annotations

import base64
import csv
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from safetensors.torch import load_file

import _fault_worker as faults
from _helpers import one_torch_thread
from attnlab.train.checkpoint import CHECKPOINT_FILES, find_checkpoints
from attnlab.train.integrity import file_digest, state_checksum

WORKER = Path(__file__).parents[1] / "_fault_worker.py"


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Runs in this process train on one thread, as the worker's: the same bits."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run: checkpoints at steps 6 and 8, the averaged model."""
    out = tmp_path_factory.mktemp("reference") / "run"
    faults.train(out, resume=False)
    assert [p.name for p in find_checkpoints(out)] == ["step-00000006", "step-00000008"]
    return out


def rows(out: Path) -> list[list[str]]:
    """The metrics rows without the speed column (time-dependent)."""
    with open(out / "metrics.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    return [[v for k, v in row.items() if k != "tokens_per_s"] for row in table]


def same_weights(a: Path, b: Path) -> bool:
    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def assert_same_run(out: Path, reference: Path) -> None:
    """``out`` ended as the uninterrupted run: every logged loss, rate and validation loss
    the same string, the averaged model and the last checkpoint the same bits."""
    assert rows(out) == rows(reference)
    assert [p.name for p in find_checkpoints(out)] == [p.name for p in find_checkpoints(reference)]
    assert same_weights(out / "model", reference / "model")
    assert same_weights(find_checkpoints(out)[-1], find_checkpoints(reference)[-1])
    summary = json.loads((out / "summary.json").read_text())
    expected = json.loads((reference / "summary.json").read_text())
    for key in ("steps", "train_tokens", "best_val_loss", "last_val_loss", "stop_reason"):
        assert summary[key] == expected[key], key


def resume(out: Path) -> tuple[list[str], dict[str, Any]]:
    """Resume ``out``; the UserWarnings (:func:`faults.own_warnings`), and the summary."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        faults.train(out, resume=True)
    return faults.own_warnings(caught), json.loads((out / "summary.json").read_text())


def copy_run(reference: Path, tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "run"
    shutil.copytree(reference, out, symlinks=True)
    return out, find_checkpoints(out)[-1]


# -- damaged bytes: each file, one at a time ---------------------------------------------------


def _truncate_half(path: Path, rng: random.Random) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _empty(path: Path, rng: random.Random) -> None:
    path.write_bytes(b"")


def _flip_start(path: Path, rng: random.Random) -> None:
    """One bit of the first 64 bytes: a safetensors header, or JSON's first keys."""
    raw = bytearray(path.read_bytes())
    raw[rng.randrange(min(64, len(raw)))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


def _flip_anywhere(path: Path, rng: random.Random) -> None:
    raw = bytearray(path.read_bytes())
    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


DAMAGE: dict[str, Callable[[Path, random.Random], None]] = {
    "half": _truncate_half,
    "empty": _empty,
    "flip-start": _flip_start,
    "flip-1": _flip_anywhere,
    "flip-2": _flip_anywhere,
}


@pytest.mark.slow  # not in make test-fast: waits on a deadline, or one of several alike
@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_damaged_file_falls_back_to_the_previous_checkpoint(
    reference: Path, tmp_path: Path, name: str, damage: str
) -> None:
    out, newest = copy_run(reference, tmp_path)
    rng = random.Random(f"{name}-{damage}")
    before = (newest / name).read_bytes()
    DAMAGE[damage](newest / name, rng)
    if name == "state.json" and _same_values(before, (newest / name).read_bytes()):
        # state.json holds timings, so where a seeded flip lands varies: in a float's last
        # digit it may leave the value (what the checksum covers) as it was. Then nothing
        # is damaged, and the newest checkpoint is used.
        caught, summary = resume(out)
        assert caught == [] and summary["resumed_from_step"] == 8
        return
    caught, summary = resume(out)
    assert len(caught) == 1, caught
    assert caught[0].startswith(f"{newest}: damaged checkpoint skipped: {newest}/")
    assert name in caught[0] or "state.json" in caught[0], caught[0]
    assert "\n" not in caught[0]
    assert summary["resumed_from_step"] == 6
    assert (newest.parent / "damaged-step-00000008" / name).exists()  # set aside, as it was
    assert_same_run(out, reference)


def _same_values(a: bytes, b: bytes) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except (UnicodeDecodeError, ValueError):
        return False


def test_with_no_usable_checkpoint_resume_is_one_error_naming_each(
    reference: Path, tmp_path: Path
) -> None:
    out, newest = copy_run(reference, tmp_path)
    older = find_checkpoints(out)[0]
    _truncate_half(newest / "optimizer.safetensors", random.Random(0))
    _flip_start(older / "state.json", random.Random(3))
    with warnings.catch_warnings(record=True), pytest.raises(ValueError) as caught:
        warnings.simplefilter("always")
        faults.train(out, resume=True)
    message = str(caught.value)
    assert message.startswith(
        f"resume: no usable checkpoint in {out / 'checkpoints'} (2 tried, newest first): "
        f"step-00000008: {newest / 'optimizer.safetensors'}: "
    )
    assert "; step-00000006: " in message and "\n" not in message
    assert [p.name for p in find_checkpoints(out)] == ["step-00000006", "step-00000008"]


# -- damage the digests cannot see: every part checked for what it must be ---------------------


def redigest(checkpoint: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Apply ``edit`` to state.json, then recompute the digests and checksum: a checkpoint
    rewritten consistently, whose content is wrong all the same."""
    path = checkpoint / "state.json"
    state = json.loads(path.read_text())
    if edit is not None:
        edit(state)
    state["files"] = {n: file_digest(checkpoint / n) for n in state["files"]}
    state["checksum"] = state_checksum(state)
    path.write_text(json.dumps(state, indent=2))


def _wrong_shape_moment(checkpoint: Path) -> None:
    path = checkpoint / "optimizer.safetensors"
    tensors = safetensors.torch.load_file(path)
    tensors["0.exp_avg"] = torch.zeros(tensors["0.exp_avg"].shape[0] + 1, 16)
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
    redigest(checkpoint)


def _negative_second_moment(checkpoint: Path) -> None:
    path = checkpoint / "optimizer.safetensors"
    tensors = safetensors.torch.load_file(path)
    tensors["3.exp_avg_sq"][0] = -1.0
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
    redigest(checkpoint)


def _nan_weight(checkpoint: Path) -> None:
    path = checkpoint / "model.safetensors"
    tensors = safetensors.torch.load_file(path)
    tensors["encoder.layers.0.norm1.weight"][2] = float("nan")
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
    redigest(checkpoint)


def _first_format(checkpoint: Path) -> None:
    """Make ``checkpoint`` one of the first format: no digests, no checksum."""
    state = json.loads((checkpoint / "state.json").read_text())
    del state["files"], state["checksum"]
    state["format"] = "attnlab-checkpoint-1"
    (checkpoint / "state.json").write_text(json.dumps(state))


def _first_format_nan_weight(checkpoint: Path) -> None:
    _nan_weight(checkpoint)
    _first_format(checkpoint)


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda checkpoint: redigest(checkpoint, change)


def _short_torch_rng(state: dict[str, Any]) -> None:
    raw = base64.b64decode(state["rng"][0]["torch"])
    state["rng"][0]["torch"] = base64.b64encode(raw[:-1]).decode()


def _first_format_truncated_optimizer(checkpoint: Path) -> None:
    _first_format(checkpoint)
    _truncate_half(checkpoint / "optimizer.safetensors", random.Random(0))


TAMPERED: dict[str, tuple[Callable[[Path], None], str]] = {
    "optimizer tensor of the wrong shape": (
        _wrong_shape_moment,
        r"optimizer state: 0\.exp_avg: shape \(\d+, 16\), but parameter 0 is \(\d+, 16\)",
    ),
    "negative second moment": (_negative_second_moment, r"3\.exp_avg_sq: a second moment below 0"),
    "first format, a NaN weight": (
        _first_format_nan_weight,
        r"norm1\.weight: holds NaN or infinite values",
    ),
    "torch RNG state cut": (
        _edit(_short_torch_rng),
        r"state\.json: rng\[0\]\.torch: 5055 bytes, expected 5056",
    ),
    "numpy RNG position": (
        _edit(lambda s: s["rng"][0]["numpy"].update(pos=700)),
        r"rng\[0\]\.numpy\.pos: expected an int in \[0, 624\], got 700",
    ),
    "python RNG state a number": (
        _edit(lambda s: s["rng"][0].update(python=3)),
        r"rng\[0\]\.python: expected version, state and gauss_next, got 3",
    ),
    "RNG states of another world size": (
        _edit(lambda s: s.update(world_size=2)),
        r"rng: expected a list of 2 states",
    ),
    "schedule out of step": (
        _edit(lambda s: s["scheduler"].update(last_epoch=3)),
        r"state\.json: last_epoch: 3, but the checkpoint is at 8",
    ),
    "schedule rates a string": (
        _edit(lambda s: s["scheduler"].update(base_lrs="1.0")),
        r"state\.json: base_lrs: '1\.0' is not",
    ),
    "position beyond its epoch": (
        _edit(lambda s: s.update(batch_in_epoch=10_000)),
        r"state\.json: batch_in_epoch: 10000, but epoch \d+ has \d+ batches",
    ),
    "epoch beyond the step": (
        _edit(lambda s: s.update(epoch=9)),
        r"state\.json: epoch: 9 is beyond the step, 8",
    ),
    "step of another directory": (
        _edit(lambda s: s.update(step=6, best_step=None, best_val_loss=None)),
        r"state\.json: step: 6, but the directory is step-00000008",
    ),
    "a count that is negative": (
        _edit(lambda s: s.update(train_tokens=-5)),
        r"state\.json: train_tokens: expected a non-negative int, got -5",
    ),
    "a key missing": (_edit(lambda s: s.pop("scheduler")), r"state\.json: scheduler: missing"),
    "optimizer groups of another optimizer": (
        _edit(lambda s: s["optimizer"]["param_groups"][0].update(params=[0, 1])),
        r"param_groups\[0\]: not a group over the run's parameters",
    ),
    "first format, optimizer file truncated": (
        _first_format_truncated_optimizer,
        r"optimizer\.safetensors: not a readable safetensors file: ",
    ),
}


@pytest.mark.slow  # not in make test-fast: waits on a deadline, or one of several alike
@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_content_falls_back_with_the_fault_named(
    reference: Path, tmp_path: Path, case: str
) -> None:
    out, newest = copy_run(reference, tmp_path)
    tamper, pattern = TAMPERED[case]
    tamper(newest)
    caught, summary = resume(out)
    assert len(caught) == 1, caught
    assert caught[0].startswith(f"{newest}: damaged checkpoint skipped: "), caught[0]
    assert re.search(pattern, caught[0]), caught[0]
    assert summary["resumed_from_step"] == 6
    assert_same_run(out, reference)


def test_a_run_that_diverged_resumes_as_it_was(reference: Path, tmp_path: Path) -> None:
    """A NaN in a checkpoint whose digests hold is the run's own (it diverged), not damage:
    the run resumes from it, and ends as such a run would, its averaged model NaN too."""
    out, newest = copy_run(reference, tmp_path)
    _nan_weight(newest)
    caught, summary = resume(out)
    assert caught == [] and summary["resumed_from_step"] == 8
    averaged = load_file(out / "model" / "model.safetensors")
    assert torch.isnan(averaged["encoder.layers.0.norm1.weight"][2])


def test_the_digests_catch_what_the_checks_would_not(reference: Path, tmp_path: Path) -> None:
    """A plausible change (the training time's first decimal) that no schema sees: the
    checksum does."""
    out, newest = copy_run(reference, tmp_path)
    path = newest / "state.json"
    text = path.read_text()
    # The first decimal (a 17th digit may not change the float: the checksum is of values).
    changed = re.sub(r'("elapsed_s": \d+\.)(\d)', lambda m: m[1] + str(9 - int(m[2])), text)
    assert changed != text
    path.write_text(changed)
    caught, _ = resume(out)
    assert caught == [
        f"{newest}: damaged checkpoint skipped: {path}: its content does not match its "
        f"checksum (damaged)"
    ]
    assert_same_run(out, reference)


# -- kills, Ctrl-C and a full disk while checkpoints are written (the worker) ------------------


@pytest.fixture(scope="module")
def injected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("faults")
    command = [sys.executable, str(WORKER), str(root)]
    command += ["--kills", "22", "--interrupts", "6", "--full-disks", "5", "--sigints", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, json.loads((root / "report.json").read_text())


def _runs(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [run for run in report["runs"] if run["kind"] == kind]


def _nothing_lost(run: dict[str, Any]) -> None:
    """Every file of every checkpoint complete at the fault is there after it, unchanged; but
    the oldest of three, which was being deleted (2 are kept)."""
    noted, after = run["faulted"]["noted"], run["after_fault"]["digests"]
    steps = sorted({name.split("/")[1] for name in noted})
    pruned = steps[0] if len(steps) > 2 else None
    kept = {k: v for k, v in noted.items() if pruned is None or f"/{pruned}/" not in k}
    assert {name: after.get(name) for name in kept} == kept, run["dir"]


def _resumed_as_uninterrupted(root: Path, run: dict[str, Any]) -> None:
    where = f"{run['kind']} at call {run['at']} ({run['event']})"
    resumed = run["resumed"]
    assert resumed["ended"] == "exit 0", (where, resumed.get("traceback"))
    assert resumed["warnings"] == [], where  # no complete checkpoint was damaged
    out = root / run["dir"]
    assert_same_run(out, root / "full")
    # What the fault left (a temporary directory, a half-deleted checkpoint) is cleared.
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        p.name for p in find_checkpoints(root / "full")
    ]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], where


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_then_resume_is_bit_exact(injected) -> None:
    root, report = injected
    assert report["full"]["ended"] == "exit 0" and len(report["events"]) >= 100
    kills = _runs(report, "kill")
    assert len({run["at"] for run in kills}) >= 20
    assert len({run["event"] for run in kills}) >= 5  # renames, flushes, writes, ...
    for run in kills:
        assert run["faulted"]["ended"] == f"signal {signal.SIGKILL.value}", run
        _nothing_lost(run)
        _resumed_as_uninterrupted(root, run)


@pytest.mark.slow
def test_ctrl_c_during_checkpoint_writes_cleans_up_and_resumes(injected) -> None:
    root, report = injected
    runs = _runs(report, "interrupt") + _runs(report, "sigint")
    assert len(runs) == 8
    for run in runs:
        assert run["faulted"]["ended"] == "exit 130", run["faulted"]
        # No temporary left behind; at most an old checkpoint being deleted, renamed away.
        assert all(name.startswith(".old-step-") for name in run["after_fault"]["left"]), run
        if run["kind"] == "sigint":  # sent once the first checkpoint existed
            assert run["after_fault"]["checkpoints"], run
        else:
            _nothing_lost(run)
        _resumed_as_uninterrupted(root, run)


@pytest.mark.slow
def test_a_full_disk_while_checkpointing_is_a_clear_error_and_loses_nothing(injected) -> None:
    root, report = injected
    runs = _runs(report, "full-disk")
    assert len(runs) == 5
    for run in runs:
        out, faulted = root / run["dir"], run["faulted"]
        if faulted["ended"] == "exit 0":  # an old checkpoint's deletion refused: a warning
            assert any("could not be deleted" in w for w in faulted["warnings"]), run
        else:
            assert faulted["ended"] == "exit 1" and faulted["errno"] == 28, faulted
            pattern = (
                rf"^{re.escape(str(out))}/(checkpoints/step-\d{{8}}|model)(/[\w.]+)?: not "
                rf"written \(No space left on device\); the (previous )?checkpoints are intact$"
            )
            assert re.match(pattern, faulted["error"]), faulted["error"]
        # Every file of every complete checkpoint there when the disk refused is still
        # there after the error, unchanged; no temporary is left.
        _nothing_lost(run)
        assert run["after_fault"]["left"] == []
        _resumed_as_uninterrupted(root, run)

"""Ctrl-C (SIGINT) through the real ``attnlab`` command (attnlab._interrupt): exit status 130
and one line, never a traceback, never "Exception ignored", never status 0, and no ``-o`` file
left behind as if finished. At any moment: waiting on a pipe that stays open, as the pipe
closes (the race of ``cat big.txt | attnlab translate > out.txt`` stopped by one Ctrl-C), on a
busy machine and an idle one, and during start-up (imports, model load).

Each loop is bounded by its count; every wait has a generous deadline that says what it
waited for."""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _helpers import default_sigint

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SCRIPT = Path(sys.executable).parent / "attnlab"
INTERRUPTED = "attnlab translate: interrupted\n"
READY = b"attnlab translate: beam"  # the line translate prints before it reads stdin


def _translate(model: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(SCRIPT), "translate", "--model", str(model), "--device", "cpu", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint(),  # SIGINT reaches it even if the suite ignores it
    )


def _wait_ready(child: subprocess.Popen, deadline: float) -> bytes:
    """stderr up to the line that translate prints once its model has loaded."""
    seen = b""
    while READY not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"translate did not load its model in time: {seen!r}"
        if child.poll() is not None:
            seen += child.stderr.read()  # type: ignore[union-attr]
            pytest.fail(f"translate ended ({child.returncode}) before reading stdin: {seen!r}")
        if select.select([child.stderr], [], [], min(left, 1.0))[0]:
            seen += child.stderr.readline()  # type: ignore[union-attr]
    return seen


def _problems(status: int | None, err: str) -> list[str]:
    """What is wrong with an interrupted command's end (empty: nothing)."""
    found = [] if status == 130 else [f"exit status {status}"]
    if "Traceback" in err or "Exception ignored" in err:
        found.append("a traceback")
    if not err.endswith(INTERRUPTED) or err.count("interrupted") != 1:
        found.append("not one 'interrupted' line at the end")
    return found


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
        child.wait()


@contextlib.contextmanager
def _busy(processes: int) -> Iterator[list[subprocess.Popen]]:
    """``processes`` busy loops (load on every core of a 2-core machine), stopped (SIGSTOP) until
    a test resumes them (SIGCONT) around the moment under test, so that start-ups stay fast."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        for hog in hogs:
            hog.send_signal(signal.SIGSTOP)
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _signal_all(processes: list[subprocess.Popen], signum: int) -> None:
    for process in processes:
        process.send_signal(signum)


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_ctrl_c_while_translate_waits_on_stdin_exits_130_without_a_traceback(numbers_model_dir):
    """`attnlab translate --model M` reading a pipe that stays open, interrupted (SIGINT) once
    it waits for lines: exit status 130 and one line, no traceback and no "Exception ignored"
    (an interrupt caught at interpreter shutdown, after an exit status 0)."""
    child = _translate(numbers_model_dir)
    try:
        # Ready: the model has loaded and its decoding is named (the line before stdin is read).
        deadline = time.monotonic() + 180
        seen = _wait_ready(child, deadline)
        _wait_in_pipe_read(child.pid, deadline)
        child.send_signal(signal.SIGINT)
        status = child.wait(timeout=60)  # stdin still open: the interrupt alone ends it
        err = (seen + child.stderr.read()).decode(errors="replace")  # type: ignore[union-attr]
    finally:
        _stop(child)
        child.stdin.close()  # type: ignore[union-attr]
    assert _problems(status, err) == [], err
    assert child.stdout.read() == b""  # type: ignore[union-attr]


def _wait_in_pipe_read(pid: int, deadline: float) -> None:
    """Until the main thread of process ``pid`` sleeps in a pipe's read (Linux's
    /proc/PID/wchan, ``pipe_read``): at once where /proc does not say, at most 30 s (or until
    ``deadline``) where it never says so (a kernel that hides wchan shows ``0``)."""
    wchan = Path(f"/proc/{pid}/wchan")
    until = min(deadline, time.monotonic() + 30)
    while time.monotonic() < until:
        try:
            if "pipe_read" in wchan.read_text():
                return
        except OSError:
            return
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("busy", [0, 2], ids=["idle", "busy"])
def test_ctrl_c_as_stdin_closes_exits_130_every_time(numbers_model_dir, tmp_path, busy):
    """The race of issue 48: translate has loaded its model and reads a pipe; SIGINT, and at
    once the pipe closes (``communicate()``), as when Ctrl-C stops ``cat big.txt | attnlab
    translate`` whole. The main thread may read end of file before the signal's handler runs:
    the command must still end with 130 and one line, 20 times in 20, on an idle machine and
    with 2 busy loops running at that moment (and the next run starting: two start-ups at a
    time keep the test short). Every other run writes ``-o``: no file is left."""
    failures = []
    outs = [tmp_path / f"out-{run}.txt" for run in range(20)]
    commands = [["-o", str(out)] if run % 2 else [] for run, out in enumerate(outs)]
    with _busy(busy) as hogs, _started(numbers_model_dir, commands, ahead=min(busy, 1)) as runs:
        for run, child in runs:
            try:
                seen = _wait_ready(child, time.monotonic() + 180)
                _signal_all(hogs, signal.SIGCONT)
                child.send_signal(signal.SIGINT)
                stdout, stderr = child.communicate(timeout=120)  # closes stdin at once
            finally:
                _signal_all(hogs, signal.SIGSTOP)
                _stop(child)
            err = (seen + stderr).decode(errors="replace")
            problems = _problems(child.returncode, err)
            if outs[run].exists():
                problems.append(f"{outs[run].name} left behind")
            if problems:
                failures.append(f"run {run}: {', '.join(problems)}; stderr: {err[-400:]!r}")
            assert stdout == b""  # no line was given, none translated
    assert failures == []
    assert os.listdir(tmp_path) == []  # nor any temporary file


@contextlib.contextmanager
def _started(
    model: Path, commands: list[list[str]], ahead: int
) -> Iterator[Iterator[tuple[int, subprocess.Popen]]]:
    """``(run, child)`` for each of ``commands`` (translate's extra arguments), in order, with
    ``ahead`` more children already starting; every child still running at the end is
    killed."""
    waiting: collections.deque[tuple[int, subprocess.Popen]] = collections.deque()

    def runs() -> Iterator[tuple[int, subprocess.Popen]]:
        for run in range(len(commands)):
            while len(waiting) <= ahead and run + len(waiting) < len(commands):
                started = run + len(waiting)
                waiting.append((started, _translate(model, *commands[started])))
            yield waiting.popleft()

    try:
        yield runs()
    finally:
        for _, child in waiting:
            _stop(child)
            child.communicate()  # closes its pipes


@pytest.mark.slow
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(numbers_model_dir):
    """SIGINT while the command starts: during imports (torch), the model's load, or once it
    reads stdin, each a fixed time after torch began to load (Linux's /proc/PID/maps; after
    0.3 s where /proc does not say): 130 and one line, never a traceback from an import."""
    failures = []
    for delay in (0.0, 0.2, 0.5, 1.0, 2.0):
        child = _translate(numbers_model_dir)
        try:
            _wait_for_torch(child.pid, time.monotonic() + 60)
            time.sleep(delay)  # a point in the start-up, not a bound on anything
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=120)
        finally:
            _stop(child)
        err = stderr.decode(errors="replace")
        problems = _problems(child.returncode, err)
        if problems:
            failures.append(f"SIGINT {delay} s after torch: {', '.join(problems)}; {err!r}")
    assert failures == []


def _wait_for_torch(pid: int, deadline: float) -> None:
    """Until process ``pid`` has mapped torch's library (it imports torch, after attnlab's
    first line took Ctrl-C over); 0.3 s where /proc/PID/maps cannot be read."""
    maps = Path(f"/proc/{pid}/maps")
    while time.monotonic() < deadline:
        try:
            if "torch" in maps.read_text():
                return
        except OSError:
            time.sleep(0.3)
            return
        time.sleep(0.01)
    pytest.fail(f"process {pid} did not load torch within 60 s")


_DEFERRED = """
import os, signal, sys, time
sys.argv = ["attnlab", "translate"]  # this process is the command: attnlab arms on import
from attnlab import _interrupt
assert _interrupt.take_over()
done = []
try:
    with _interrupt.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        done.append("the block")
except KeyboardInterrupt:
    print("raised after", *done)
"""


@pytest.mark.slow  # a subprocess
def test_a_sigint_inside_a_deferred_block_is_raised_when_it_ends():
    """What keeps an atomic write's temporary file named (so removed) whenever Ctrl-C lands."""
    found = subprocess.run(
        [sys.executable, "-c", _DEFERRED],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=default_sigint(),
    )
    assert (found.returncode, found.stdout, found.stderr) == (0, "raised after the block\n", "")

"""Ctrl-C (SIGINT) for the ``attnlab`` command: at any moment, from the first import to the
last write, it ends the command with one line (``attnlab COMMAND: interrupted``) and exit status
130, never a traceback and never status 0.

Only the command itself is concerned (the ``attnlab`` script, ``python -m attnlab``): a program
that imports attnlab keeps Python's own handling. The phases:

* :func:`arm`, the first thing ``attnlab/__init__.py`` does, before torch is imported: a SIGINT
  during start-up ends the process at once (nothing has been written yet).
* :func:`take_over`, when ``cli.main`` starts: a SIGINT raises KeyboardInterrupt in the main
  thread, as Python's own handler does, so that the command unwinds (temporary files removed,
  nothing half-written published), and it is recorded.
* :func:`check`, before an atomic write publishes its file and when the command returns:
  KeyboardInterrupt for a SIGINT that has arrived but whose handler has not run yet. Python runs
  a handler between two bytecodes of the main thread; a signal caught just before the main
  thread blocks in a read, which then ends at end of file (the upstream process of a pipe
  stopped by the same Ctrl-C), may otherwise be handled only at interpreter shutdown, after
  an exit status 0 has been chosen (and print "Exception ignored in: <module 'threading'>").
* :func:`deferred`: a block a SIGINT does not cut in two (a temporary file created and its
  name kept), the KeyboardInterrupt raised when it ends.
* :func:`hand_back`, when ``cli.main`` returns: a SIGINT during interpreter shutdown ends the
  process at once with status 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["EXIT_STATUS", "arm", "check", "deferred", "hand_back", "received", "take_over"]

#: 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C.
EXIT_STATUS = 130

_SCRIPT_NAMES = ("attnlab", "attnlab.exe", "attnlab-script.py")


class _State:
    armed = False  # this process is the attnlab command and SIGINT is ours
    received = False  # a SIGINT has been raised as KeyboardInterrupt
    held = False  # a SIGINT arrived inside deferred(): raised when the block ends
    said = False  # the "interrupted" line is out
    line = "attnlab: interrupted"


def _is_command() -> bool:
    """Whether this process runs the attnlab command: the console script, or ``python -m
    attnlab`` (while the package is imported for ``-m``, ``sys.argv[0]`` is ``"-m"``)."""
    if not sys.argv:
        return False
    if os.path.basename(sys.argv[0]).lower() in _SCRIPT_NAMES:
        return True
    given = list(getattr(sys, "orig_argv", ()))
    return sys.argv[0] == "-m" and any(
        given[i] == "-m" and given[i + 1] == "attnlab" for i in range(len(given) - 1)
    )


def _line_from_argv() -> str:
    """``attnlab COMMAND: interrupted``, the command being the first word of the arguments."""
    words = [word for word in sys.argv[1:] if not word.startswith("-")]
    command = words[0] if words and words[0].isidentifier() else None
    return f"attnlab {command}: interrupted" if command else "attnlab: interrupted"


def arm() -> None:
    """In the attnlab command, before anything heavy is imported: a SIGINT ends the process at
    once, status 130 and one line. Nothing is changed in a program that imports attnlab, in a
    thread other than the main one, or where SIGINT is not Python's default (ignored, as in a
    background job of a script, or handled by whoever started Python)."""
    if _State.armed or not _is_command():
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    _State.line = _line_from_argv()
    signal.signal(signal.SIGINT, _end_now)
    _State.armed = True


def take_over(line: str | None = None) -> bool:
    """From now on (the command runs) a SIGINT raises KeyboardInterrupt in the main thread and
    is recorded (:func:`received`); ``line`` is what :func:`hand_back`'s handler prints. True
    when this process is the armed attnlab command (else nothing changes)."""
    if not _State.armed:
        return False
    if line:
        _State.line = line
    if signal.getsignal(signal.SIGINT) is _end_now:
        signal.signal(signal.SIGINT, _raise)
    return True


def check() -> None:
    """In the armed command's main thread: raise KeyboardInterrupt if a SIGINT has arrived
    that was not raised yet (caught by another thread, or by the main thread while it ran C
    code, its Python handler still pending; or still pending in the kernel). Elsewhere:
    nothing."""
    if not _State.armed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not _raise:
        return
    if hasattr(signal, "pthread_kill"):
        # Signal 0 sends nothing; CPython then runs the Python handlers of the signals caught
        # so far, here: ours raises KeyboardInterrupt.
        signal.pthread_kill(threading.get_ident(), 0)
    if hasattr(signal, "sigpending") and signal.SIGINT in signal.sigpending():
        _take_pending()  # sent, not yet taken by any thread: taken here, raised once
        _State.received = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block that a SIGINT does not cut in two, in the armed command's main thread: one that
    arrives inside it is raised when it ends (a temporary file created and its name kept, so
    that the clean-up finds it). Elsewhere: the block as it is."""
    if (
        not _State.armed
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not _raise
    ):
        yield
        return
    signal.signal(signal.SIGINT, _hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _raise)
    if _State.held:
        _State.held = False
        _State.received = True
        raise KeyboardInterrupt


def _hold(signum: int, frame: FrameType | None) -> None:
    _State.held = True


def _take_pending() -> None:
    """Take the pending SIGINT off the process, so that it is not delivered again later (into
    the clean-up its KeyboardInterrupt starts); where another thread took it first, run its
    handler now."""
    if not hasattr(signal, "sigtimedwait"):  # macOS: it will be delivered, and raise again
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        taken = signal.sigtimedwait({signal.SIGINT}, 0)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if taken is None:
        signal.pthread_kill(threading.get_ident(), 0)


def received() -> bool:
    """Whether a SIGINT has reached the armed command (checked first, see :func:`check`,
    without raising): True even if the KeyboardInterrupt it raised was swallowed."""
    try:
        check()
    except KeyboardInterrupt:
        _State.received = True
    return _State.received


def hand_back(*, said: bool) -> None:
    """When the command is done (``said``: its "interrupted" line is out, if it was
    interrupted): a SIGINT from now on, during interpreter shutdown, ends the process at once
    with status 130 (and the line, if not said yet)."""
    if not _State.armed:
        return
    _State.said = _State.said or said
    signal.signal(signal.SIGINT, _end_now)


def _raise(signum: int, frame: FrameType | None) -> None:
    _State.received = True
    raise KeyboardInterrupt


def _end_now(signum: int, frame: FrameType | None) -> None:
    """Flush what was written, say the line once, and leave with status 130 without running
    interpreter shutdown (whose threads would otherwise print the interrupt they were given)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a closed stream, a broken pipe, a flush the signal interrupted
            pass
    if not _State.said:
        _State.said = True
        with contextlib.suppress(OSError):
            os.write(2, f"{_State.line}\n".encode())
    os._exit(EXIT_STATUS)


arm()  # on import, which attnlab/__init__.py does first: before torch is imported

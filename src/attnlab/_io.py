"""File writing shared by the modules that save things (models, checkpoints, pictures, reports).

Writes here are atomic and durable: after a crash of the process, or a power loss once the call
has returned, a reader finds either the old content or the new, never a partial or empty file.

* :func:`atomic_write`: one file. The content goes to a temporary sibling, which is flushed to
  disk (``fsync``), renamed over the real name, and then the directory entry is flushed too.
* :func:`atomic_write_dir`: a directory of files as one unit (a saved model: its config and
  weights together). It is built in a temporary sibling directory, every file and the directory
  are flushed, and it takes the real name in one rename; an existing directory of that name is
  swapped out in one step (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames with a
  window in which neither is in place), then deleted.

In the ``attnlab`` command, a Ctrl-C that has arrived by the time the file is complete stops
it from being published (:mod:`attnlab._interrupt`): an interrupted command leaves no output
that looks finished, even where the interrupt ended its input early.

When the disk refuses a write (full, read-only, an I/O error) the error is an :class:`OSError`
of the same class and ``errno``, whose message names the file and says that the previous
version is intact; no temporary is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as errnos
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import _interrupt

__all__ = [
    "atomic_write",
    "atomic_write_dir",
    "current_umask",
    "fsync_dir",
    "fsync_file",
    "fsync_tree",
    "not_written",
    "replace_dir",
    "write_json",
]


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Call ``write(temp_path)`` for a temporary file beside ``path``, flush it to disk, rename
    it over ``path``, and flush the directory.

    Raises:
        OSError: the disk refused (the same class and errno as the cause, the message naming
            ``path``); ``path`` keeps its previous content, and no temporary file is left.
        Exception: whatever ``write`` raises, with the same clean-up.
    """
    path = Path(path)
    temp: str | None = None
    try:
        with _interrupt.deferred():  # not between the file's creation and its name's return
            handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(handle)
        write(temp)
        os.chmod(temp, 0o666 & ~current_umask())  # mkstemp makes 0600 files; give what open() would
        fsync_file(temp)
        _interrupt.check()  # the command was interrupted: publish nothing (its input may be cut)
        os.replace(temp, path)
    except BaseException as error:
        if temp is not None:
            with _interrupt.deferred(), contextlib.suppress(OSError):  # cleaned up whole
                os.unlink(temp)
        named = _not_written(error, path) if isinstance(error, OSError) else error
        if named is error:
            raise
        raise named from error
    fsync_dir(path.parent)


def atomic_write_dir(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Build the directory ``path`` as one unit: call ``write(temp_dir)`` to fill a temporary
    sibling directory, flush every file in it and the directory itself, then give it the name
    ``path``, replacing an existing directory of that name (:func:`replace_dir`). Returns
    ``path``.

    Raises:
        OSError: the disk refused (naming ``path``, errno kept); an existing ``path`` is left
            as it was and the temporary directory is removed.
        Exception: whatever ``write`` raises, with the same clean-up.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp: Path | None = None
    try:
        with _interrupt.deferred():
            temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        write(temp)
        os.chmod(temp, 0o777 & ~current_umask())  # mkdtemp makes 0700 directories
        fsync_tree(temp)
        _interrupt.check()
        replace_dir(temp, path)
    except BaseException as error:
        if temp is not None:
            with _interrupt.deferred():
                shutil.rmtree(temp, ignore_errors=True)
        named = _not_written(error, path) if isinstance(error, OSError) else error
        if named is error:
            raise
        raise named from error
    return path


def replace_dir(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename the directory ``source`` to ``target``, replacing a directory already there as
    one unit, then flush the parent directory. ``source`` and ``target`` must be on one file
    system (siblings, in practice).

    On Linux the two are exchanged in one atomic ``renameat2(RENAME_EXCHANGE)`` and the old
    one deleted: at every instant ``target`` is the complete old or the complete new directory.
    Where that call is missing, the old directory is first renamed aside, then ``source`` into
    place: a crash between the two leaves no ``target`` (the old one survives under a
    ``.old-`` name beside it).
    """
    source, target = Path(source), Path(target)
    if not target.exists():
        os.replace(source, target)
    elif _exchange(source, target):
        shutil.rmtree(source, ignore_errors=True)  # it now holds the old directory
    else:
        trash = Path(tempfile.mkdtemp(prefix=f".old-{target.name}.", dir=target.parent))
        try:
            os.replace(target, trash / target.name)
            try:
                os.replace(source, target)
            except BaseException:
                os.replace(trash / target.name, target)  # put the old one back
                raise
        finally:
            shutil.rmtree(trash, ignore_errors=True)
    fsync_dir(target.parent)


def fsync_file(path: str | os.PathLike) -> None:
    """Flush the content of the file ``path`` to disk."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush the directory ``path`` (its entries: new names, renames) to disk. A file system
    or platform that cannot flush directories (EINVAL; Windows cannot open one) is skipped:
    there is nothing more to do on it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (PermissionError, IsADirectoryError):  # Windows
        return
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errnos.EINVAL, errnos.ENOTSUP, errnos.EBADF):
            raise
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """Flush every file and directory under ``path``, and ``path`` itself, to disk (files
    first, each directory after its entries)."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            fsync_file(os.path.join(root, name))
        for name in dirs:
            fsync_dir(os.path.join(root, name))
    fsync_dir(path)


def current_umask() -> int:
    """The process umask. Linux reports it in /proc/self/status; elsewhere it can only be read
    by setting it, which briefly changes it for every thread."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``: ValueError naming the file for bytes that are not UTF-8,
    invalid JSON (with its line and column) or another value than an object; OSError (a
    missing file included) as the read raised it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def write_json(path: str | os.PathLike, data: object) -> None:
    """``data`` as indented JSON (UTF-8, a final newline), written atomically."""
    text = json.dumps(data, indent=2) + "\n"
    atomic_write(Path(path), lambda temp: Path(temp).write_text(text, encoding="utf-8"))


# -- helpers -----------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directory entries ``a`` and ``b`` atomically; False where the system cannot
    (no ``renameat2``, or a file system without RENAME_EXCHANGE)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a C library older than glibc 2.28, or none found
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    renameat2.argtypes += [ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errnos.EINVAL, errnos.ENOSYS, errnos.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def not_written(error: OSError, path: str | os.PathLike, *, what: str | None = None) -> OSError:
    """``error`` (the same class and errno) restated as ``PATH: not written (REASON); WHAT``,
    naming ``path`` even where ``error`` named another file (a temporary one, inside a
    directory that :func:`atomic_write_dir` was building). ``what`` says what is left
    (default: that the previous version, if any, is intact)."""
    cause: BaseException = error
    while getattr(cause, "attnlab_not_written", False) and isinstance(cause.__cause__, OSError):
        cause = cause.__cause__  # the refusal itself, not an earlier restatement
    reason = getattr(cause, "strerror", None)
    if not reason and getattr(cause, "errno", None):
        reason = os.strerror(cause.errno)  # type: ignore[attr-defined]
    reason = reason or str(cause) or type(cause).__name__
    left = what or "its previous version, if any, is intact"
    try:
        named = type(error)(f"{path}: not written ({reason}); {left}")
    except TypeError:  # a subclass with another constructor
        named = OSError(f"{path}: not written ({reason}); {left}")
    named.errno = error.errno
    named.attnlab_not_written = True  # type: ignore[attr-defined]
    return named


def _not_written(error: OSError, path: Path) -> OSError:
    """``error`` restated as ``PATH: not written (REASON); ...``: the same class and errno
    (an error that already names what was not written is kept as it is)."""
    if getattr(error, "attnlab_not_written", False):
        return error
    reason = error.strerror or str(error) or type(error).__name__
    message = f"{path}: not written ({reason}); its previous version, if any, is intact"
    try:
        named = type(error)(message)
    except TypeError:  # a subclass with another constructor
        named = OSError(message)
    named.errno = error.errno
    named.attnlab_not_written = True
    return named

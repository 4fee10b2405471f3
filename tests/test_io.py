"""Atomic, durable writes (attnlab._io): the file and its directory are flushed; a directory is
replaced as a unit; and when the disk refuses (a simulated full disk: ENOSPC from a write, a
flush or a rename) the error names the file, nothing is lost, and nothing is left behind."""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from attnlab import _io
from attnlab._io import atomic_write, atomic_write_dir, replace_dir, write_json

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative name -> content)."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _write_model(files: dict[str, bytes]):
    def write(temp: Path) -> None:
        for name, data in files.items():
            (temp / name).parent.mkdir(parents=True, exist_ok=True)
            (temp / name).write_bytes(data)

    return write


def _half_then_full(data: bytes):
    """A writer that writes half of ``data`` and then finds the disk full."""

    def write(temp: str) -> None:
        with open(temp, "wb") as handle:
            handle.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return write


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths passed to os.fsync, in order (Linux: read back from /proc/self/fd)."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to name the flushed descriptors")
    paths: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return paths


# -- one file ----------------------------------------------------------------------------------


def test_atomic_write_flushes_the_file_then_its_directory(tmp_path, synced):
    target = tmp_path / "config.json"
    write_json(target, {"d_model": 64})
    assert target.read_text() == '{\n  "d_model": 64\n}\n'
    assert len(synced) == 2
    assert Path(synced[0]).parent == tmp_path and Path(synced[0]).name.startswith(".config.json.")
    assert Path(synced[1]) == tmp_path  # after the rename: the new directory entry
    assert _names(tmp_path) == ["config.json"]
    mode = stat.S_IMODE(target.stat().st_mode)
    assert mode == 0o666 & ~_io.current_umask()  # what open() would give, not mkstemp's 0600


@pytest.mark.parametrize("where", ["write", "fsync", "replace", "mkstemp"])
def test_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch, where):
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"old weights")
    new = b"new weights " * 1000
    write = lambda temp: Path(temp).write_bytes(new)  # noqa: E731
    if where == "write":
        write = _half_then_full(new)
    elif where == "fsync":
        monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(ENOSPC))
    elif where == "replace":
        monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(ENOSPC))
    else:
        monkeypatch.setattr(_io.tempfile, "mkstemp", lambda **kw: (_ for _ in ()).throw(ENOSPC))
    with pytest.raises(OSError) as raised:
        atomic_write(target, write)
    assert raised.value.errno == errno.ENOSPC
    assert str(raised.value) == (
        f"{target}: not written (No space left on device); its previous version, if any, is intact"
    )
    assert target.read_bytes() == b"old weights"
    assert _names(tmp_path) == ["model.safetensors"]  # no temporary left


def test_a_failing_writer_leaves_nothing(tmp_path):
    def write(temp: str) -> None:
        Path(temp).write_text("half")
        raise ValueError("the figure cannot be drawn")

    with pytest.raises(ValueError, match="cannot be drawn"):  # not restated: not a disk error
        atomic_write(tmp_path / "picture.png", write)
    assert _names(tmp_path) == []


def test_the_error_keeps_its_class(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing[/\\]x\.json: not written"):
        write_json(tmp_path / "missing" / "x.json", {})


# -- a directory as a unit ---------------------------------------------------------------------

OLD = {"config.json": b'{"d_model": 64}', "model.safetensors": b"old" * 100}
NEW = {"config.json": b'{"d_model": 128}', "model.safetensors": b"new" * 200, "sub/x": b"x"}


def test_atomic_write_dir_creates_and_replaces_as_a_unit(tmp_path, synced):
    target = tmp_path / "model"
    assert atomic_write_dir(target, _write_model(OLD)) == target
    assert _tree(target) == OLD
    synced.clear()
    atomic_write_dir(target, _write_model(NEW))
    assert _tree(target) == NEW  # no file of the old one survives beside the new ones
    assert _names(tmp_path) == ["model"]
    # every file and directory of the new one, then the parent, were flushed
    flushed = {Path(p).name for p in synced}
    assert {"config.json", "model.safetensors", "x", "sub"} <= flushed
    assert Path(synced[-1]) == tmp_path
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~_io.current_umask()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_replace_dir_exchanges_in_one_step_on_linux(tmp_path, monkeypatch):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "a").write_text("old")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "b").write_text("new")
    renames = []
    monkeypatch.setattr(os, "replace", lambda *a: renames.append(a))  # must not be needed
    replace_dir(tmp_path / "new", tmp_path / "old")
    assert renames == []
    assert _tree(tmp_path / "old") == {"b": b"new"}
    assert _names(tmp_path) == ["old"]


def test_replace_dir_without_an_atomic_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "_exchange", lambda a, b: False)  # macOS, old glibc
    atomic_write_dir(tmp_path / "model", _write_model(OLD))
    atomic_write_dir(tmp_path / "model", _write_model(NEW))
    assert _tree(tmp_path / "model") == NEW
    assert _names(tmp_path) == ["model"]


@pytest.mark.parametrize("where", ["write", "fsync", "replace", "exchange"])
def test_a_full_disk_keeps_the_old_directory(tmp_path, monkeypatch, where):
    target = tmp_path / "model"
    atomic_write_dir(target, _write_model(OLD))
    write = _write_model(NEW)
    if where == "write":

        def write(temp: Path) -> None:
            (temp / "config.json").write_bytes(NEW["config.json"])
            atomic_write(temp / "model.safetensors", _half_then_full(NEW["model.safetensors"]))

    elif where == "fsync":
        monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(ENOSPC))
    elif where == "replace":
        monkeypatch.setattr(_io, "_exchange", lambda a, b: False)
        monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(ENOSPC))
    else:
        monkeypatch.setattr(_io, "_exchange", lambda a, b: (_ for _ in ()).throw(ENOSPC))
    with pytest.raises(OSError) as raised:
        atomic_write_dir(target, write)
    assert raised.value.errno == errno.ENOSPC
    message = str(raised.value)
    assert "not written (No space left on device)" in message and "intact" in message
    assert message.count("not written") == 1  # an inner file's error is not wrapped twice
    assert _tree(target) == OLD
    assert _names(tmp_path) == ["model"]  # the temporary directory is gone


def test_a_failing_directory_writer_leaves_nothing(tmp_path):
    def write(temp: Path) -> None:
        (temp / "config.json").write_text("{}")
        raise KeyboardInterrupt  # Ctrl-C half-way

    with pytest.raises(KeyboardInterrupt):
        atomic_write_dir(tmp_path / "model", write)
    assert _names(tmp_path) == []

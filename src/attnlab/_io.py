"""File writing shared by the modules that save things (models, pictures, reports)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Call ``write(temp_path)``, then rename the temporary file over ``path``."""
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        write(temp)
        os.chmod(temp, 0o666 & ~current_umask())  # mkstemp makes 0600 files; give what open() would
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


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


def write_json(path: Path, data: object) -> None:
    """``data`` as indented JSON (UTF-8, a final newline), written atomically."""
    text = json.dumps(data, indent=2) + "\n"
    atomic_write(Path(path), lambda temp: Path(temp).write_text(text, encoding="utf-8"))

"""Text files as the commands read them: one line at a time, in binary, each line decoded as
UTF-8 on its own, so that a bad byte is named by its line (``--errors strict``, the default)
or read as U+FFFD (``--errors replace``, Python's ``errors="replace"``), and never costs the
other lines.

A line ends at ``\\n`` (a ``\\r`` before it is dropped too), as ``wc -l`` counts them: other
characters that Python's ``str.splitlines`` breaks at (U+2028, form feed, ...) stay inside a
line, so that the N-th output line is always the translation of the N-th input line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path


def decode_line(raw: bytes, name: str, number: int, errors: str = "strict") -> str:
    """``raw`` (one line, its end removed) as text. ``errors="strict"``: ValueError naming
    ``name``, the line ``number`` (from 1) and the first bad byte; ``"replace"``: U+FFFD for
    each bad sequence."""
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{name} line {number:,}: not UTF-8 (byte 0x{raw[error.start]:02x} at byte "
            f"{error.start + 1:,} of the line); fix the file, or pass --errors replace to read "
            f"bad bytes as U+FFFD"
        ) from None


def _ends_removed(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    return raw[:-1] if raw.endswith(b"\r") else raw


def lines_of(
    stream: Iterable[bytes] | Iterable[str], name: str, errors: str = "strict"
) -> Iterator[str]:
    """The lines of ``stream`` (binary: decoded one by one, see :func:`decode_line`; a text
    stream, as a test's ``io.StringIO`` for stdin, is taken as it is), without their ends."""
    for number, raw in enumerate(stream, 1):
        if isinstance(raw, str):
            yield raw.rstrip("\r\n")
        else:
            yield decode_line(_ends_removed(raw), name, number, errors)


def read_lines(path: str, flag: str, errors: str = "strict") -> Iterator[str]:
    """The lines of the file ``path`` that ``flag`` names, read and decoded one at a time
    (memory: one line). FileNotFoundError naming ``flag`` when there is no such file."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{flag}: {path}: no such file")
    return _lines_of_file(path, f"{flag} {path}", errors)


def _lines_of_file(path: str, name: str, errors: str) -> Iterator[str]:
    with open(path, "rb") as stream:
        yield from lines_of(stream, name, errors)


def check_utf8(path: str, flag: str) -> None:
    """Read the whole of ``path`` once, line by line, and raise the error of the first line
    that is not UTF-8: a check before any work is sized or started."""
    for _ in read_lines(path, flag, "strict"):
        pass

"""Files downloaded over HTTP(S) and checked against published SHA-256 digests before they are
written (atomically): what :func:`attnlab.data.corpora.multi30k` fetches its files with.

One deadline bounds all the connections of a call (a server that drips bytes cannot hold it),
``timeout`` each connect and read; a redirect from https to http (or to another scheme) is
refused; an answer shorter than its Content-Length is refused as truncated. A local copy is
checked against its digest once per process, and again after any change (:func:`verify_cached`).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .._io import atomic_write
from .textfiles import sha256_file

__all__ = ["Deadline", "Progress", "download", "fetch", "verify_cached"]

#: A download's progress: ``(file name, bytes received, bytes expected)``, called as bytes arrive.
Progress = Callable[[str, int, int], object]


class Deadline:
    """One deadline for every connection of a download: when it passes, the sockets still open
    are shut down, which wakes a read blocked on a server that drips bytes (a per-read timeout
    alone never fires while a byte arrives now and then)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._timers: list[threading.Timer] = []

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        timer = threading.Timer(self.remaining(), self._expire, args=(sock,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _expire(self, sock: socket.socket) -> None:
        self.expired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        for timer in self._timers:
            timer.cancel()


class _DowngradeError(urllib.error.URLError):
    """A redirect to a weaker scheme (https -> http) or to anything but http(s)."""


def _opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """A urllib opener whose connections are shut when ``deadline`` passes, and whose redirects
    never leave https for http (nor http(s) for another scheme)."""

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class SecureConnection(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class Handler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(Connection, req)

    class SecureHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(SecureConnection, req, context=self._context)

    class Redirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            old = urllib.parse.urlsplit(req.full_url).scheme.lower()
            new = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, newurl)).scheme.lower()
            if new not in ("http", "https") or (old == "https" and new != "https"):
                raise _DowngradeError(
                    f"refused a redirect from {old} to {new} ({_clip(newurl)}): a download never "
                    f"moves to a weaker scheme"
                )
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    return urllib.request.build_opener(Handler, SecureHandler, Redirects)


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _content_length(answer: http.client.HTTPResponse) -> int | None:
    """The answer's Content-Length, or None when it gives none (or none that is a number)."""
    value = answer.headers.get("Content-Length")
    try:
        length = int(value) if value is not None else None
    except ValueError:
        return None
    return length if length is not None and length >= 0 else None


def download(
    url: str,
    destination: Path,
    expected: tuple[str, int],
    timeout: float,
    deadline: Deadline,
    progress: Progress | None = None,
) -> None:
    """Fetch ``url`` into ``destination`` if its SHA-256 is ``expected``'s (digest, size in
    bytes); write it atomically, so no partial or unverified file is ever left behind.
    ``timeout``: seconds for any one connect or read; ``deadline``: for the whole download;
    ``progress(name, received, expected)`` as bytes arrive (expected: the Content-Length, else
    the published size). An answer shorter than its Content-Length is refused as truncated."""
    name = destination.name
    expected_digest, expected_size = expected
    request = urllib.request.Request(url, headers={"User-Agent": "attnlab"})
    limit = 2 * expected_size  # a wrong URL serving something huge is cut off, then refused
    chunks, received = [], 0
    length: int | None = None
    late = (
        f"could not download {name} from {url}: not complete within {deadline.seconds:g} s "
        f"(the download deadline)"
    )

    def truncated(got: int, announced: int) -> str:
        return (
            f"could not download {name} from {url}: the connection closed after {got:,} of "
            f"{announced:,} bytes (a truncated download); nothing was saved"
        )

    try:
        if deadline.remaining() <= 0:
            raise OSError(late)
        with _opener(deadline).open(request, timeout=min(timeout, deadline.remaining())) as answer:
            length = _content_length(answer)
            total = length if length is not None else expected_size
            if progress is not None:
                progress(name, 0, total)
            while received <= limit:
                chunk = answer.read1(1 << 16)  # what has arrived: a drip cannot hold it
                if not chunk:
                    break
                chunks.append(chunk)
                received += len(chunk)
                if progress is not None:
                    progress(name, received, total)
                if deadline.remaining() <= 0:
                    raise OSError(late)
        if deadline.expired:  # the shut socket read as the end of the answer
            raise OSError(late)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the error response open
        raise OSError(
            f"could not download {name} from {url}: HTTP {exc.code} {exc.reason}"
        ) from exc
    except http.client.IncompleteRead as exc:  # a chunked answer that stopped early
        if deadline.expired or deadline.remaining() <= 0:
            raise OSError(late) from exc
        got = received + len(exc.partial)
        raise OSError(truncated(got, got + (exc.expected or 0))) from exc
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        if deadline.expired or deadline.remaining() <= 0:
            raise OSError(late) from exc
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise OSError(f"could not download {name} from {url}: {reason}") from exc
    if length is not None and received < length:
        raise OSError(truncated(received, length))
    data = b"".join(chunks)
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_digest:
        raise ValueError(
            f"{name} downloaded from {url} has sha256 {digest} ({len(data)} bytes), expected "
            f"{expected_digest} ({expected_size} bytes); it was not saved"
        )
    destination.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(destination, lambda temp: Path(temp).write_bytes(data))
    _VERIFIED.add(_identity(destination))


#: Files checked against their digests in this process, by (path, size, mtime): a cached file is
#: hashed again on its first use in each process, and after any change.
_VERIFIED: set[tuple[str, int, int]] = set()


def _identity(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


def verify_cached(path: Path, expected: tuple[str, int]) -> None:
    """Check a local copy of a downloaded file against ``expected`` (its SHA-256 and size), once
    per process and again after any change: ValueError for a damaged or different copy."""
    identity = _identity(path)
    if identity in _VERIFIED:
        return
    expected_digest, expected_size = expected
    digest = sha256_file(path)
    if digest != expected_digest:
        raise ValueError(
            f"{path}: sha256 {digest} ({identity[1]} bytes), expected "
            f"{expected_digest} ({expected_size} bytes): a damaged or different copy; delete it "
            f"to download it again"
        )
    _VERIFIED.add(identity)


def fetch(
    directory: Path,
    names: Sequence[str],
    base_url: str,
    digests: Mapping[str, tuple[str, int]],
    timeout: float,
    deadline: float,
    progress: Progress | None = None,
) -> None:
    """Download ``names`` from ``base_url`` into ``directory``, each checked against its
    ``digests`` entry before it is written; ``deadline`` seconds for them all."""
    clock = Deadline(deadline)
    try:
        for name in names:
            url = base_url.rstrip("/") + "/" + name
            download(url, directory / name, digests[name], timeout, clock, progress)
    finally:
        clock.cancel()

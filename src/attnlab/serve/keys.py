"""Who may use the translation service, and how much (docs/serve.md, "Keys and limits"):
:func:`read_keys` reads the ``--api-keys`` file, :class:`Gate` admits a model request (its key,
then its limits a minute). No key is ever logged, shown or put in a message."""

from __future__ import annotations

import asyncio
import collections
import hmac
import ipaddress
import logging
import math
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import Scope

from .libre import BadRequest
from .metrics import Counter

__all__ = ["HOLD", "KEY_LINE", "WINDOW", "Gate", "Key", "read_keys"]

log = logging.getLogger("attnlab.serve")

#: A client's window in seconds, from its first request in it (the limits are a minute's); the
#: most clients kept (windows open; beyond, the oldest go first); the most addresses counted by
#: name in /metrics (without keys; further ones count as ``other``).
WINDOW, MAX_CLIENTS, MAX_SERIES = 60.0, 100_000, 1_000
#: The most seconds a 429 is held before it is sent (its Retry-After, at most this): a client
#: that asks again at once, one request after another on its connection, asks once a second
#: instead of as fast as the server can refuse it (a refusal costs the server's one event loop
#: about what a translation's parsing and answer cost; docs/serve.md, "Keys and limits").
HOLD = 1.0
#: What a line of the keys file holds (``#`` starts a comment).
KEY_LINE = "KEY [requests=N] [characters=N] [name=NAME]"
_LINE = re.compile(
    r"\s*(?P<key>[!-~]{1,256})(?:\s+requests=([1-9]\d{0,8}))?(?:\s+characters=([1-9]\d{0,8}))?"
    r"(?:\s+name=(?P<name>[\w.-]{1,64}))?\s*",
    re.ASCII,
)


@dataclass(frozen=True)
class Key:
    """A key: its ``secret`` (never shown), its ``name`` (``name=`` or ``key-LINE``: what
    /metrics says) and its own limits a minute (None: the server's)."""

    secret: bytes = field(repr=False)
    name: str
    requests: int | None = None
    characters: int | None = None


def read_keys(path: str | os.PathLike) -> list[Key]:
    """The keys of the file ``path``, one a line: :data:`KEY_LINE` (a key: 1 to 256 printable
    ASCII characters, no space or ``#``). ValueError: the file cannot be read, holds no key,
    or a line is malformed (naming the file, the line and what was expected; never a key)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError) as error:
        why = getattr(error, "strerror", None) or error
        raise ValueError(f"{path}: cannot read it ({why})") from None
    keys: list[Key] = []
    for number, line in enumerate(lines, 1):
        text, where = line.split("#", 1)[0], f"{path}: line {number}"
        if not text.strip():
            continue
        if (found := _LINE.fullmatch(text)) is None:
            raise ValueError(f"{where}: expected {KEY_LINE} in this order (N: a positive "
                             f"integer, a minute's; NAME: letters, digits, '_.-')")  # fmt: skip
        limits = (int(n) if n else None for n in found.group(2, 3))
        key = Key(found["key"].encode(), found["name"] or f"key-{number}", *limits)
        if any(k.secret == key.secret or k.name == key.name for k in keys):
            raise ValueError(f"{where}: the key or name of an earlier line; expected each once")
        keys.append(key)
    if not keys:
        raise ValueError(f"{path}: no key; expected one a line, {KEY_LINE}")
    return keys


class Gate:
    """The keys of ``path`` (None: none; clients are told apart by address), the requests and
    characters (of ``q``) a client may send a minute (None: no limit; a key's own come first),
    and ``trusted``: proxies whose ``X-Forwarded-For`` names the client. Thread-safe; it keeps
    the clients whose window is open (at most :data:`MAX_CLIENTS`)."""

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        requests: int | None = None,
        characters: int | None = None,
        trusted: Sequence[str] = (),
    ) -> None:
        self.path, self.requests, self.characters = path, requests, characters
        self.keys = None if path is None else read_keys(path)
        self.trusted = {str(ipaddress.ip_address(t)) for t in trusted}
        what = "model requests by client (a key's name, else its address) and outcome"
        self.counts = Counter("attnlab_client_requests_total", what, ("client", "outcome"))
        self.clock = time.monotonic
        self.hold = HOLD  # seconds a 429 is held at most (:meth:`admit`)
        self._windows: collections.OrderedDict[str, list[float]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._series: set[str] = set()

    def reload(self) -> None:
        """Read the keys file again (SIGHUP): the next request sees the new keys; a file that
        cannot be used keeps the old ones, and one log line says why."""
        try:
            self.keys = read_keys(self.path)  # type: ignore[arg-type]
            log.warning("%d keys read again from %s", len(self.keys), self.path)
        except ValueError as error:
            log.error("the keys are not read again, the old ones stay: %s", error)

    def key_of(self, given: object) -> Key | None:
        """The known key equal to ``given``: compared with every key, in constant time."""
        secret, found = given.encode("utf-8", "replace") if isinstance(given, str) else b"", None
        for key in self.keys or ():
            found = key if hmac.compare_digest(key.secret, secret) else found
        return found

    async def admit(self, scope: Scope, fields: Mapping[str, object]) -> None:
        """:meth:`check` a model request; a 429 is raised after its ``Retry-After`` or
        :attr:`hold` (:data:`HOLD`) seconds, whichever is shorter (nothing else waits
        meanwhile)."""
        try:
            self.check(scope, fields)
        except HTTPException as refused:
            if refused.status_code == 429:
                told = (refused.headers or {}).get("Retry-After", "1")
                await asyncio.sleep(min(float(told), self.hold))
            raise

    def check(self, scope: Scope, fields: Mapping[str, object], limited: bool = True) -> None:
        """Admit a request (its ASGI ``scope``; ``fields``: its body's): its key (a ``Bearer``
        header, else ``api_key``) and, where ``limited``, its limits (``q`` or ``text`` counts).
        Raises HTTPException (403 without a known key; 429 past a limit, with Retry-After) or
        BadRequest (``q`` alone over a minute's characters)."""
        key = None
        if self.keys is not None:
            bearer = Headers(scope=scope).get("authorization", "")
            given = bearer[7:].strip() if bearer[:7].lower() == "bearer " else fields.get("api_key")
            if (key := self.key_of(given)) is None:
                what = "missing" if given is None else "not a key of this server"
                raise HTTPException(403, f"api_key: {what}; send one as api_key or a Bearer header")
        requests = key.requests if key and key.requests else self.requests
        most = key.characters if key and key.characters else self.characters
        if not limited or (key is None and requests is None and most is None):
            return
        q = fields.get("q", fields.get("text"))
        size = sum(len(t) for t in (q if isinstance(q, list) else [q]) if isinstance(t, str))
        if most is not None and size > most:
            raise BadRequest(f"q: {size:,} characters; this client may send {most:,} a minute")
        peer = (scope.get("client") or ("unknown",))[0]  # a trusted proxy's: what it added
        hops = ",".join(Headers(scope=scope).getlist("x-forwarded-for")).split(",")
        client = hops[-1].strip()[:64] or peer if peer in self.trusted else peer
        client = key.name if key else client
        with self._lock:
            now, windows = self.clock(), self._windows
            while windows and (
                len(windows) >= MAX_CLIENTS or next(iter(windows.values()))[0] <= now - WINDOW
            ):  # the oldest first: windows open in the order they are kept
                windows.popitem(last=False)
            window = windows.setdefault(client, [now, 0, 0])
            uses = (("requests", window[1] + 1, requests), ("characters", window[2] + size, most))
            over = [name for name, used, limit in uses if limit is not None and used > limit]
            if not over:
                window[1:] = [window[1] + 1, window[2] + size]
            if key is None and client not in self._series:  # a bounded number of series
                client = client if len(self._series) < MAX_SERIES else "other"
                self._series.add(client)
        self.counts.inc(client=client, outcome=over[0] if over else "admitted")
        if over:
            wait = max(1, math.ceil(window[0] + WINDOW - now))
            limit = requests if over[0] == "requests" else most
            text = f"too many {over[0]}: this client may send {limit:,} a minute; try in {wait} s"
            raise HTTPException(429, text, {"Retry-After": str(wait)})

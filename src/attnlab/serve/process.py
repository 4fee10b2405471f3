"""The server's process: binding the socket, serving the app with uvicorn, and stopping on
Ctrl-C or SIGTERM after the requests in flight are answered (:func:`run`, what ``attnlab
serve`` calls). The app itself is :func:`~attnlab.serve.app.create_app`'s."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence

import torch
from fastapi import FastAPI

from .._checks import is_int
from ..decode.options import DecodingOptions
from .app import create_app
from .keys import Gate
from .limits import LOOPBACK_NAMES, Limits, server_config

__all__ = ["allowed_hosts_for", "bind", "make_server", "run", "url_of"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (port 0: the OS picks a free one)."""
    if not (is_int(port) and 0 <= port <= 65535):
        raise ValueError(f"port: expected 0 to 65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:  # a name that is not this machine's: bad input
        raise ValueError(f"host: cannot resolve {host!r} ({error.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port/`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def make_server(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, log_level="warning"):
    """A uvicorn server for ``app`` and its bound socket: ``(server, sock)``; start it with
    ``server.run(sockets=[sock])`` (in a thread, stop it with ``server.should_exit = True``).
    The server keeps ``app``'s limits (timeouts, connections: see :func:`server_config`)."""
    sock = bind(host, port)
    return _server(app, log_level), sock


def _server(app: FastAPI, log_level: str):
    """A uvicorn server for ``app`` that, on Ctrl-C or SIGTERM, marks the app as draining
    (new requests get a 503, ``/health`` says not ready) before it shuts down gracefully."""
    import uvicorn

    limits = getattr(app.state, "limits", None) or Limits()
    draining = getattr(app.state, "draining", None)

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # type: ignore[override]
            if draining is not None:
                draining.set()
            super().handle_exit(sig, frame)

    return DrainingServer(server_config(app, limits, log_level))


class _Terminated(Exception):
    """SIGTERM, raised once the server has drained (as Ctrl-C raises KeyboardInterrupt)."""


def _terminated(signum, frame) -> None:
    raise _Terminated()


def allowed_hosts_for(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The Host names a server bound to ``host`` answers: the loopback names, ``host``
    itself (unless it is the any-address ``0.0.0.0`` or ``::``, which no client names), and
    ``extra``."""
    names = list(LOOPBACK_NAMES)
    if host not in ("0.0.0.0", "::", ""):
        names.append(host)
    return [*names, *extra]


def run(
    model_dir: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    limits: Limits | None = None,
    allow_hosts: Sequence[str] = (),
    device: str | torch.device | None = None,
    notice: str | None = None,
    decoding: DecodingOptions | None = None,
    api_only: bool = False,
    languages_served: tuple[str, str] | None = None,
    engine: str = "torch",
    quantize: str | None = None,
    gate: Gate | None = None,
) -> None:
    """Serve the explorer and the translation service of ``model_dir`` until Ctrl-C or
    SIGTERM; prints its URL. ``port`` 0 picks a free port (the printed URL has the real one).
    The Host header must be a loopback name, ``host``, or one of ``allow_hosts`` (``"*"``:
    any). ``decoding``, ``device``, ``api_only``, ``engine``, ``quantize``,
    ``languages_served``, ``gate``: as :func:`create_app`'s (SIGHUP reads its keys again).
    ``notice``: a line for stderr once the model has loaded (the decoding it uses, say).

    Ctrl-C or SIGTERM drains: the listening socket closes, requests that arrive meanwhile get a
    503, the requests in flight are answered, then it returns (a second Ctrl-C stops at once).
    """
    sock = bind(host, port)  # first: a busy port fails before the model loads
    allowed = allowed_hosts_for(host, allow_hosts)
    try:
        app = create_app(
            model_dir,
            device=device,
            limits=limits,
            allowed_hosts=allowed,
            decoding=decoding,
            api_only=api_only,
            languages_served=languages_served,
            engine=engine,
            quantize=quantize,
            gate=gate,
        )
    except BaseException:
        sock.close()
        raise
    if notice:
        print(notice, file=sys.stderr, flush=True)
    server = _server(app, log_level)
    if not _is_loopback(host):
        who = "a key's holder" if gate and gate.keys else "anyone (no authentication: --api-keys)"
        print(
            f"attnlab serve: warning: listening on {host}, beyond this machine, in plain HTTP: "
            f"{who} can use the API (Host names answered: {', '.join(allowed)}; add more with "
            f"--allow-host)",
            file=sys.stderr,
            flush=True,
        )
    what = "the translation API" if api_only else "the attention explorer"
    print(f"attnlab serve: {what} is at {url_of(sock)} (Ctrl-C stops it)")
    sys.stdout.flush()
    installed = threading.current_thread() is threading.main_thread()  # signals: main only
    previous = signal.signal(signal.SIGTERM, _terminated) if installed else None
    keyed, hup = installed and gate is not None and gate.path is not None, None
    if keyed:  # the keys read again in a thread: no request waits for them
        reload = gate.reload  # type: ignore[union-attr]
        hup = signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reload).start())
    try:
        # uvicorn drains on Ctrl-C or SIGTERM, then raises the signal again: KeyboardInterrupt
        # or _Terminated here, once every request in flight is answered.
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):
        print("attnlab serve: stopped", flush=True)
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            if keyed:
                signal.signal(signal.SIGHUP, hup or signal.SIG_DFL)
        sock.close()
        # The requests the service admitted are answered by now.
        app.state.service.close(wait=app.state.limits.request_timeout)
        app.state.queue.close()

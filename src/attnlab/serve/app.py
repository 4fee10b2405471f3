"""The attention explorer's web server: FastAPI routes over :class:`Explorer` (docs/serve.md).

:func:`create_app` loads the model once and returns the ASGI app; :func:`run` serves it with
uvicorn. Every client error is a 4xx answer ``{"error": message, "status": code}``, where the
message names the field and what was expected; bad input never gets a 500, and a bug's 500
says nothing of the server's insides (its details go to one log line).

Request bodies are checked before any route sees them (:class:`~attnlab.serve.errors.BodyGuard`;
the error answers are in :mod:`attnlab.serve.errors`): at most 64 KiB (read in chunks, never
more than that, within ``Limits.body_timeout``), ``application/json``, UTF-8, valid JSON.
Then pydantic checks the shape strictly (``"text": 5`` is an error, not ``"5"``). The routes
that run the model (translate, attention) wait in the model's bounded queue
(:class:`~attnlab.serve.limits.ModelQueue`) without holding a thread, and are checked and
tokenized before they queue; the others (model, positional, masks, the page) never wait
for the model. The limits and the HTTP guards are in :mod:`attnlab.serve.limits`.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._checks import is_int
from ..decode.options import DecodingOptions
from .errors import MAX_BODY_BYTES as MAX_BODY_BYTES
from .errors import BodyGuard, clip, install_error_handlers
from .explorer import ATTENTION_DECIMALS, Explorer
from .limits import (
    LOOPBACK_NAMES,
    HeadAsGet,
    HostGuard,
    InternalErrors,
    Limits,
    ModelQueue,
    server_config,
)

__all__ = ["MAX_BODY_BYTES", "STATIC_DIR", "Limits", "create_app", "make_server", "run"]

#: The page's files: index.html, its script and stylesheet.
STATIC_DIR = Path(__file__).with_name("static")
MAX_BEAM = 16
#: The longest name under /static/ (a longer one is a 404 before the file system is asked).
MAX_STATIC_NAME = 64

log = logging.getLogger("attnlab.serve")

# -- request and response bodies ---------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Strict):
    text: str = Field(description="the source sentence", examples=["three hundred and twelve"])
    beam_size: int | None = Field(
        None, ge=1, le=MAX_BEAM, description="beam width, 1 is greedy (default: the server's)"
    )
    constraints: list[str] | None = Field(
        None,
        max_length=MAX_BEAM,
        description="target phrases the translation must contain (at most beam_size; "
        "constrained beam search)",
    )
    prefix: str | None = Field(
        None, description="target text the translation must start with (null or blank: none)"
    )


class AttentionRequest(TranslateRequest):
    target: str | None = Field(
        None, description="a target sentence to teacher-force (null or blank: the model's own)"
    )
    layers: list[int] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="layer indices to return (encoder and decoder alike), null for all",
    )
    heads: list[int] | None = Field(
        None, min_length=1, max_length=256, description="head indices to return, null for all"
    )


class MasksRequest(_Strict):
    texts: list[str] = Field(min_length=1, max_length=8, description="one batch of sentences")


class ModelInfo(BaseModel):
    model_type: str
    name: str
    num_parameters: int
    d_model: int
    num_heads: int
    encoder_layers: int
    decoder_layers: int
    max_len: int
    positional: str
    norm_first: bool
    beam_size: int
    vocab_size: int
    tgt_vocab_size: int
    positional_max_length: int


class TranslateResponse(BaseModel):
    translation: str
    source_tokens: list[str]
    output_tokens: list[str]
    token_log_probs: list[float] = Field(
        description="each output token's log-probability under the model (EOS's included)"
    )
    log_prob: float = Field(description="their sum: log P(output | source)")
    score: float = Field(description="log_prob / ((5 + tokens) / 6)^0.6, what the beam ranks by")
    constraints: list[str] = Field(description="the phrases the translation contains, as asked")
    truncated: bool
    source_length: int
    max_len: int


class AttentionMaps(BaseModel):
    layers: list[int] = Field(description="the layers returned, in increasing order")
    heads: list[int] = Field(description="the heads returned, in increasing order")
    queries: int = Field(description="rows of each map")
    keys: int = Field(description="columns of each map")
    weights: list[float] = Field(
        description="every map, flat in [layer][head][query][key] order, rounded to "
        f"{ATTENTION_DECIMALS} decimals"
    )


class AttentionResponse(TranslateResponse):
    teacher_forced: bool
    target_tokens: list[str]
    encoder: AttentionMaps = Field(description="queries and keys: source_tokens")
    decoder: AttentionMaps = Field(description="queries and keys: target_tokens")
    cross: AttentionMaps = Field(description="queries: target_tokens, keys: source_tokens")
    elements: int = Field(description="attention weights in this answer")
    max_elements: int = Field(description="the most the server returns in one answer")
    capped: bool = Field(description="true when some asked-for layers were left out")


class PositionalResponse(BaseModel):
    kind: str
    length: int
    d_model: int
    matrix: list[list[float]] | None
    similarity: list[list[float]] | None
    note: str


class MasksResponse(BaseModel):
    tokens: list[list[str]]
    padding: list[list[bool]]
    look_ahead: list[list[bool]]
    combined: list[list[list[bool]]]
    truncated: list[bool]


class ErrorResponse(BaseModel):
    error: str
    status: int


#: POST routes and their request bodies (the guard checks these routes' bodies).
BODIES: dict[str, type[BaseModel]] = {
    "/api/translate": TranslateRequest,
    "/api/attention": AttentionRequest,
    "/api/masks": MasksRequest,
}
#: Every route, as an unknown route's 404 lists them.
ROUTES = (
    "GET /api/model, POST /api/translate, POST /api/attention, GET /api/positional, "
    "POST /api/masks, GET /, GET /static/<file>"
)

# -- the app -----------------------------------------------------------------------------------

_STATIC_NAME = re.compile(rf"[A-Za-z0-9_-][A-Za-z0-9_.-]{{0,{MAX_STATIC_NAME - 1}}}")
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
}


def create_app(
    model_dir: str | os.PathLike,
    *,
    beam_size: int | None = None,
    alpha: float | None = None,
    device: str | torch.device | None = None,
    static_dir: str | os.PathLike | None = None,
    limits: Limits | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
    decoding: DecodingOptions | None = None,
) -> FastAPI:
    """The explorer's ASGI app for the encoder-decoder model in ``model_dir`` (loaded now,
    once). ``decoding``: how it decodes (default: what the model directory carries,
    :meth:`~attnlab.decode.options.DecodingOptions.carried_by`); ``beam_size``, the default
    beam (1-16), and ``alpha``, the length penalty, replace its fields where not None;
    ``device``: default CUDA when available;
    ``static_dir``: the page's files (default the package's ``static/``); ``limits``: queue,
    timeouts, connection and answer sizes (:class:`Limits`' defaults); ``allowed_hosts``: the
    names the Host header may carry (default the loopback names; ``"*"``: any).

    Raises:
        FileNotFoundError: ``model_dir`` is not a directory.
        ValueError: it holds no encoder-decoder Transformer; ``beam_size`` out of range.
    """
    if beam_size is not None and not is_int(beam_size):
        raise TypeError(f"beam_size: expected an int, got {type(beam_size).__name__}")
    asked = beam_size if beam_size is not None or decoding is None else decoding.beam_size
    if asked is not None and not 1 <= asked <= MAX_BEAM:  # before the model loads
        raise ValueError(f"beam_size: expected 1 to {MAX_BEAM}, got {asked}")
    limits = limits if limits is not None else Limits()
    explorer = Explorer(
        model_dir, beam_size=beam_size, alpha=alpha, device=device, decoding=decoding
    )
    if explorer.beam_size > MAX_BEAM:
        raise ValueError(
            f"beam_size: the model carries {explorer.beam_size}; the explorer takes 1 to "
            f"{MAX_BEAM}: pass one"
        )
    queue = ModelQueue(waiting=limits.queue, timeout=limits.request_timeout)
    static = Path(static_dir) if static_dir is not None else STATIC_DIR
    app = FastAPI(
        title="attnlab attention explorer",
        description="Attention, positional information and masks of an attnlab Transformer.",
        docs_url=None,  # the interactive docs load scripts from a CDN: the page must not
        redoc_url=None,
        openapi_url="/api/openapi.json",
        redirect_slashes=False,  # "/api/model/" is an unknown route (404), not a redirect
        responses={"4XX": {"model": ErrorResponse, "description": "a client error"}},
    )
    app.state.explorer = explorer
    app.state.queue = queue
    app.state.limits = limits
    # Starlette runs the last added outermost: errors, then Host, then HEAD, then bodies.
    app.add_middleware(BodyGuard, bodies=BODIES, timeout=limits.body_timeout)
    app.add_middleware(HeadAsGet)
    app.add_middleware(HostGuard, allowed=allowed_hosts)
    app.add_middleware(InternalErrors)
    install_error_handlers(app, BODIES, ROUTES)
    busy = {503: {"model": ErrorResponse, "description": "the model is busy: try again later"}}

    @app.get("/api/model", response_model=ModelInfo)
    async def model_info() -> dict:
        """What the page needs to know about the model."""
        return explorer.info()

    @app.post("/api/translate", response_model=TranslateResponse, responses=busy)
    async def translate(body: TranslateRequest, request: Request) -> dict:
        """Translate one sentence (beam search; beam_size 1 is greedy)."""
        job = await run_in_threadpool(
            explorer.prepare_translate, body.text, body.beam_size, body.constraints, body.prefix
        )
        return await queue.run(lambda: explorer.run_translate(job), request.receive)

    @app.post("/api/attention", response_model=AttentionResponse, responses=busy)
    async def attention(body: AttentionRequest, request: Request) -> Response:
        """Translate, and return the attention weights of the asked-for layers and heads
        (all by default), at most ``max_elements`` of them."""
        job = await run_in_threadpool(
            explorer.prepare_attention,
            body.text,
            body.beam_size,
            body.target,
            body.layers,
            body.heads,
            body.constraints,
            body.prefix,
        )
        result = await queue.run(lambda: explorer.run_attention(job), request.receive)

        def encode() -> bytes:  # in a worker thread, with the model free for the next request
            answer = explorer.attention_answer(result, job, limits.attention_elements)
            return json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()

        return Response(await run_in_threadpool(encode), media_type="application/json")

    @app.get("/api/positional", response_model=PositionalResponse)
    def positional(
        length: int | None = Query(
            None, description="positions, 1 to positional_max_length (default 64)"
        ),
    ) -> dict:
        """The model's positional encoding, its similarity, or its bias."""
        return explorer.positional(length)

    @app.post("/api/masks", response_model=MasksResponse)
    def masks(request: MasksRequest) -> dict:
        """Padding, look-ahead and combined masks of a batch of sentences."""
        return explorer.masks(request.texts)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return _static_file(static, "index.html")

    @app.get("/static/{name}", include_in_schema=False)
    def static_file(name: str) -> FileResponse:
        return _static_file(static, name)

    return app


def _static_file(directory: Path, name: str) -> FileResponse:
    """The file ``name`` directly in ``directory`` (no sub-directories, no hidden files, no
    links out, at most :data:`MAX_STATIC_NAME` characters), else a 404."""
    if _STATIC_NAME.fullmatch(name) is None or ".." in name:
        raise StarletteHTTPException(404, f"not found: /static/{clip(name, 80)}")
    path = directory / name
    try:
        found = not path.is_symlink() and path.is_file()
    except OSError:  # a name the file system refuses: nothing of that name is here
        found = False
    if not found:
        what = "the page (index.html)" if name == "index.html" else f"/static/{name}"
        raise StarletteHTTPException(404, f"not found: {what} is not in {directory.name}/")
    media = _MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream")
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    return FileResponse(path, media_type=media, headers=headers)


# -- serving -----------------------------------------------------------------------------------


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
    import uvicorn

    limits = getattr(app.state, "limits", None) or Limits()
    return uvicorn.Server(server_config(app, limits, log_level))


def allowed_hosts_for(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The Host names a server bound to ``host`` answers: the loopback names, ``host``
    itself (unless it is the any-address ``0.0.0.0`` or ``::``, which no client names), and
    ``extra``."""
    names = list(LOOPBACK_NAMES)
    if host not in ("0.0.0.0", "::", ""):
        names.append(host)
    return [*names, *extra]


def run(
    model_dir: str | os.PathLike,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    beam_size: int | None = None,
    alpha: float | None = None,
    log_level: str = "warning",
    limits: Limits | None = None,
    allow_hosts: Sequence[str] = (),
    device: str | torch.device | None = None,
    notice: str | None = None,
    decoding: DecodingOptions | None = None,
) -> None:
    """Serve the explorer of ``model_dir`` until interrupted; prints its URL. ``port`` 0
    picks a free port (the printed URL has the real one). The Host header must be a loopback
    name, ``host``, or one of ``allow_hosts`` (``"*"``: any). ``decoding``, ``beam_size``,
    ``alpha``, ``device``: as :func:`create_app`'s. ``notice``: a line for stderr once the
    model has loaded (the decoding it uses, say)."""
    sock = bind(host, port)  # first: a busy port fails before the model loads
    allowed = allowed_hosts_for(host, allow_hosts)
    try:
        app = create_app(
            model_dir,
            beam_size=beam_size,
            alpha=alpha,
            device=device,
            limits=limits,
            allowed_hosts=allowed,
            decoding=decoding,
        )
    except BaseException:
        sock.close()
        raise
    if notice:
        print(notice, file=sys.stderr, flush=True)
    server = _server(app, log_level)
    if not _is_loopback(host):
        print(
            f"attnlab serve: warning: listening on {host}, beyond this machine; the API has no "
            f"authentication: anyone who can reach the port can use it (Host names answered: "
            f"{', '.join(allowed)}; add more with --allow-host)",
            file=sys.stderr,
            flush=True,
        )
    print(f"attnlab serve: the attention explorer is at {url_of(sock)} (Ctrl-C stops it)")
    sys.stdout.flush()
    try:
        server.run(sockets=[sock])  # shuts down gracefully on Ctrl-C, then re-raises it
    except KeyboardInterrupt:
        print("attnlab serve: stopped", flush=True)
    finally:
        sock.close()
        app.state.queue.close()

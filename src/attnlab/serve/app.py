"""The attention explorer's web server: FastAPI routes over :class:`Explorer` (docs/serve.md).

:func:`create_app` loads the model once and returns the ASGI app; :func:`run` serves it with
uvicorn. Every client error is a 4xx answer ``{"error": message, "status": code}``, where the
message names the field and what was expected; bad input never gets a 500.

Request bodies are checked before any route sees them (:class:`BodyGuard`): at most 64 KiB
(read in chunks, never more than that), ``application/json``, UTF-8, valid JSON. Then pydantic
checks the shape strictly (``"text": 5`` is an error, not ``"5"``), and the model work runs in
a sync endpoint, in uvicorn's thread pool, under the explorer's lock.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .explorer import Explorer, InputError

__all__ = ["MAX_BODY_BYTES", "STATIC_DIR", "create_app", "make_server", "run"]

#: The largest request body accepted (413 above it).
MAX_BODY_BYTES = 64 * 1024
#: The page's files: index.html, its script and stylesheet.
STATIC_DIR = Path(__file__).with_name("static")
MAX_BEAM = 16

log = logging.getLogger("attnlab.serve")

# -- request and response bodies ---------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Strict):
    text: str = Field(description="the source sentence", examples=["three hundred and twelve"])
    beam_size: int | None = Field(
        None, ge=1, le=MAX_BEAM, description="beam width, 1 is greedy (default: the server's)"
    )


class AttentionRequest(TranslateRequest):
    target: str | None = Field(
        None, description="a target sentence to teacher-force (null or blank: the model's own)"
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


class TranslateResponse(BaseModel):
    translation: str
    source_tokens: list[str]
    output_tokens: list[str]
    truncated: bool
    source_length: int
    max_len: int


class AttentionResponse(TranslateResponse):
    teacher_forced: bool
    target_tokens: list[str]
    encoder: list[list[list[list[float]]]] = Field(description="[layer][head][source][source]")
    decoder: list[list[list[list[float]]]] = Field(description="[layer][head][target][target]")
    cross: list[list[list[list[float]]]] = Field(description="[layer][head][target][source]")


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

# -- errors ------------------------------------------------------------------------------------


def error_response(status: int, message: str, headers: dict[str, str] | None = None):
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    list: "array",
    dict: "object",
}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: object, limit: int = 40) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _field_name(loc: tuple) -> str:
    """``('body', 'texts', 1)`` -> ``texts[1]``; ``('query', 'length')`` -> ``length``."""
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path") else list(loc)
    if not parts:
        return "body"
    name = str(parts[0])
    for part in parts[1:]:
        name += f"[{part}]" if isinstance(part, int) else f".{part}"
    return name


def _describe(error: dict[str, Any], body: type[BaseModel] | None) -> str:
    """One pydantic error as ``field: what was expected, what came``."""
    kind, ctx, value = error.get("type", ""), error.get("ctx") or {}, error.get("input")
    field = _field_name(tuple(error.get("loc", ())))
    got = _json_type(value)
    if kind == "missing" and field == "body":
        return "body: missing; expected a JSON object"
    if kind == "missing":
        return f"{field}: missing (required)"
    if kind == "extra_forbidden":
        allowed = ", ".join(body.model_fields) if body is not None else ""
        return f"{field}: unknown field" + (f"; expected only {allowed}" if allowed else "")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{field}: expected a JSON object, got {got}"
    if kind == "string_type":
        return f"{field}: expected a string, got {got}"
    if kind == "int_type":
        return f"{field}: expected an integer, got {got}"
    if kind in ("int_parsing", "int_from_float"):
        return f"{field}: expected an integer, got {_short(value)}"
    if kind == "list_type":
        return f"{field}: expected an array, got {got}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.items()), ("", ""))
        words = {"ge": "at least", "gt": "more than", "le": "at most", "lt": "less than"}
        return f"{field}: expected {words.get(bound[0], bound[0])} {bound[1]}, got {_short(value)}"
    if kind in ("too_short", "too_long"):
        low = "min_length" in ctx
        limit = ctx.get("min_length" if low else "max_length")
        many = ctx.get("actual_length")
        items = "item" if limit == 1 else "items"
        return f"{field}: expected {'at least' if low else 'at most'} {limit} {items}, got {many}"
    return f"{field}: {error.get('msg', 'invalid')}"


def _validation_message(errors: list[dict[str, Any]], body: type[BaseModel] | None) -> str:
    messages = list(dict.fromkeys(_describe(e, body) for e in errors))
    text = "; ".join(messages[:3])
    if len(messages) > 3:
        text += f" (and {len(messages) - 3} more)"
    return text


def _content_type_problem(value: str | None) -> str | None:
    if value is None:
        return "content-type: missing; expected application/json"
    media = value.split(";", 1)[0].strip().lower()
    if media != "application/json":
        return f"content-type: expected application/json, got {_short(media)}"
    return None


def _json_problem(body: bytes) -> str | None:
    """Why ``body`` is not one UTF-8 JSON document, or None."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"body: not UTF-8 (byte 0x{body[error.start]:02x} at offset {error.start})"
    if not text.strip():
        return "body: empty; expected a JSON object"
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"body: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
    except RecursionError:
        return "body: invalid JSON: nested too deeply"
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        return f"body: unreadable JSON: {error}"
    return None


class BodyGuard:
    """ASGI middleware for the POST routes of :data:`BODIES`: 413 for a body over
    ``limit`` bytes (by Content-Length, or counted while reading: never more than ``limit`` + 1
    bytes are held), 415 unless ``application/json``, 400 unless UTF-8 JSON. A body that
    passes is handed on to the app as it came."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in BODIES:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        too_big = f"body: over {self.limit // 1024} KiB ({self.limit:,} bytes)"
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            status, message = (413, too_big) if declared.isdigit() else (400, "bad content-length")
            await error_response(status, message)(scope, receive, send)
            return
        problem = _content_type_problem(headers.get("content-type"))
        if problem is not None:
            await error_response(415, problem)(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await error_response(413, too_big)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = _json_problem(body)
        if problem is not None:
            await error_response(400, problem)(scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# -- the app -----------------------------------------------------------------------------------

_STATIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
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
    beam_size: int = 4,
    device: str | torch.device | None = None,
    static_dir: str | os.PathLike | None = None,
) -> FastAPI:
    """The explorer's ASGI app for the encoder-decoder model in ``model_dir`` (loaded now,
    once). ``beam_size``: the default beam (1-16); ``device``: default CUDA when available;
    ``static_dir``: the page's files (default the package's ``static/``).

    Raises:
        FileNotFoundError: ``model_dir`` is not a directory.
        ValueError: it holds no encoder-decoder Transformer; ``beam_size`` out of range.
    """
    if isinstance(beam_size, bool) or not isinstance(beam_size, int):
        raise TypeError(f"beam_size: expected an int, got {type(beam_size).__name__}")
    if not 1 <= beam_size <= MAX_BEAM:
        raise ValueError(f"beam_size: expected 1 to {MAX_BEAM}, got {beam_size}")
    explorer = Explorer(model_dir, beam_size=beam_size, device=device)
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
    app.add_middleware(BodyGuard)
    _install_error_handlers(app)

    @app.get("/api/model", response_model=ModelInfo)
    def model_info() -> dict:
        """What the page needs to know about the model."""
        return explorer.info()

    @app.post("/api/translate", response_model=TranslateResponse)
    def translate(request: TranslateRequest) -> dict:
        """Translate one sentence (beam search; beam_size 1 is greedy)."""
        return explorer.translate(request.text, request.beam_size)

    @app.post("/api/attention", response_model=AttentionResponse)
    def attention(request: AttentionRequest) -> dict:
        """Translate, and return every layer's and head's attention weights."""
        return explorer.attention(request.text, request.beam_size, request.target)

    @app.get("/api/positional", response_model=PositionalResponse)
    def positional(
        length: int | None = Query(None, description="positions, 1 to max_len (default 64)"),
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
    links out), else a 404."""
    if _STATIC_NAME.fullmatch(name) is None or ".." in name:
        raise StarletteHTTPException(404, f"not found: /static/{_clip(name, 80)}")
    path = directory / name
    if path.is_symlink() or not path.is_file():
        what = "the page (index.html)" if name == "index.html" else f"/static/{name}"
        raise StarletteHTTPException(404, f"not found: {what} is not in {directory.name}/")
    media = _MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream")
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    return FileResponse(path, media_type=media, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    routes = "GET /api/model, POST /api/translate, POST /api/attention, GET /api/positional, "
    routes += "POST /api/masks, GET /, GET /static/<file>"

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):  # BodyGuard catches these
            return error_response(400, "body: invalid JSON")
        body = BODIES.get(request.url.path)
        return error_response(422, _validation_message(errors, body))

    @app.exception_handler(InputError)
    async def unusable(request: Request, exc: InputError) -> JSONResponse:
        return error_response(422, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        where = f"{request.method} {_clip(request.url.path)}"
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 404 and exc.detail == "Not Found":
            message = f"not found: {where}; the routes are {routes}"
        elif exc.status_code == 405:
            allow = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow", "")
            message = f"method not allowed: {where}; use {allow or 'another method'}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, headers)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


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
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port: expected 0 to 65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise OSError(f"host: cannot resolve {host!r} ({error.strerror})") from None
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
    ``server.run(sockets=[sock])`` (in a thread, stop it with ``server.should_exit = True``)."""
    sock = bind(host, port)
    return _server(app, log_level), sock


def _server(app: FastAPI, log_level: str):
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off"))


def run(
    model_dir: str | os.PathLike,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    beam_size: int = 4,
    log_level: str = "warning",
) -> None:
    """Serve the explorer of ``model_dir`` until interrupted; prints its URL. ``port`` 0
    picks a free port (the printed URL has the real one)."""
    sock = bind(host, port)  # first: a busy port fails before the model loads
    try:
        app = create_app(model_dir, beam_size=beam_size)
    except BaseException:
        sock.close()
        raise
    server = _server(app, log_level)
    if not _is_loopback(host):
        print(
            f"attnlab serve: warning: listening on {host}, beyond this machine; the API has no "
            f"authentication: anyone who can reach the port can use it",
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

"""How the explorer's API answers a bad request: one line that names the field and what was
expected, as ``{"error": message, "status": code}`` (docs/serve.md).

* :class:`BodyGuard`: the POST bodies' size, read time, content type and JSON, checked before
  any route (413, 408, 415, 400).
* :func:`validation_message`: pydantic's errors as ``field: expected ..., got ...`` (422).
* :func:`install_error_handlers`: the app's answers to validation errors, unusable input, a
  busy model, a client that left, unknown routes and methods.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .explorer import InputError
from .libre import BadRequest
from .limits import Busy, ClientGone, Limits, error_response

#: The largest request body accepted (413 above it).
MAX_BODY_BYTES = 64 * 1024
#: The form type that the routes in ``BodyGuard(forms=...)`` take besides JSON.
FORM_TYPE = "application/x-www-form-urlencoded"


# -- messages ----------------------------------------------------------------------------------


JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    list: "array",
    dict: "object",
}


def json_type(value: object) -> str:
    return JSON_TYPES.get(type(value), type(value).__name__)


def short(value: object, limit: int = 40) -> str:
    return clip(repr(value) if isinstance(value, str) else str(value), limit)


def clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_name(loc: tuple[object, ...]) -> str:
    """``('body', 'texts', 1)`` -> ``texts[1]``; ``('query', 'length')`` -> ``length``."""
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path") else list(loc)
    if not parts:
        return "body"
    name = str(parts[0])
    for part in parts[1:]:
        name += f"[{part}]" if isinstance(part, int) else f".{part}"
    return name


def describe(error: dict[str, Any], body: type[BaseModel] | None) -> str:
    """One pydantic error as ``field: what was expected, what came``."""
    kind, ctx, value = error.get("type", ""), error.get("ctx") or {}, error.get("input")
    field = field_name(tuple(error.get("loc", ())))
    got = json_type(value)
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
        return f"{field}: expected an integer, got {short(value)}"
    if kind == "list_type":
        return f"{field}: expected an array, got {got}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.items()), ("", ""))
        words = {"ge": "at least", "gt": "more than", "le": "at most", "lt": "less than"}
        return f"{field}: expected {words.get(bound[0], bound[0])} {bound[1]}, got {short(value)}"
    if kind in ("too_short", "too_long"):
        low = "min_length" in ctx
        limit = ctx.get("min_length" if low else "max_length")
        many = ctx.get("actual_length")
        items = "item" if limit == 1 else "items"
        return f"{field}: expected {'at least' if low else 'at most'} {limit} {items}, got {many}"
    return f"{field}: {error.get('msg', 'invalid')}"


def validation_message(errors: list[dict[str, Any]], body: type[BaseModel] | None) -> str:
    messages = list(dict.fromkeys(describe(e, body) for e in errors))
    text = "; ".join(messages[:3])
    if len(messages) > 3:
        text += f" (and {len(messages) - 3} more)"
    return text


def media_type(value: str | None) -> str:
    """The media type of a Content-Type header, lower case, without parameters."""
    return (value or "").split(";", 1)[0].strip().lower()


def content_type_problem(value: str | None, form: bool = False) -> str | None:
    """Why a body of Content-Type ``value`` is refused, or None: ``application/json``, and
    with ``form`` also :data:`FORM_TYPE`."""
    expected = f"application/json or {FORM_TYPE}" if form else "application/json"
    if value is None:
        return f"content-type: missing; expected {expected}"
    media = media_type(value)
    if media != "application/json" and not (form and media == FORM_TYPE):
        return f"content-type: expected {expected}, got {short(media)}"
    return None


def body_problem(body: bytes, form: bool = False) -> str | None:
    """Why ``body`` is not one UTF-8 JSON document (with ``form``: not UTF-8; the route
    checks a URL-encoded form's fields), or None."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"body: not UTF-8 (byte 0x{body[error.start]:02x} at offset {error.start})"
    if form:
        return None
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
    """ASGI middleware for the POST routes of ``bodies`` (path -> request model): 413 for a
    body over ``limit`` bytes (by Content-Length, or counted while reading: never more than
    ``limit`` + 1 bytes are held), 408 for one not received within ``timeout`` seconds, 415
    unless ``application/json`` (or, on the paths of ``forms``, :data:`FORM_TYPE`), 400 unless
    UTF-8 JSON (or a UTF-8 form). A body that passes is handed on to the app as it came."""

    def __init__(
        self,
        app: ASGIApp,
        bodies: Mapping[str, type[BaseModel] | None],
        limit: int = MAX_BODY_BYTES,
        timeout: float = Limits.body_timeout,
        forms: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.paths = frozenset(bodies) | forms
        self.forms = forms
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        too_big = f"body: over {self.limit // 1024} KiB ({self.limit:,} bytes)"
        declared = headers.get("content-length")
        digits = declared is not None and declared.isascii() and declared.isdigit()
        if declared is not None and (not digits or len(declared) > 9 or int(declared) > self.limit):
            status, text = (413, too_big) if digits else (400, "bad content-length")
            await error_response(status, text)(scope, receive, send)
            return
        form = scope["path"] in self.forms
        problem = content_type_problem(headers.get("content-type"), form)
        if problem is not None:
            await error_response(415, problem)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            try:  # a client that sends its body a byte at a time is cut off
                left = deadline - asyncio.get_running_loop().time()
                message = await asyncio.wait_for(receive(), timeout=max(left, 0))
            except asyncio.TimeoutError:
                late = f"body: not received within {self.timeout:g} s"
                await error_response(408, late, {"Connection": "close"})(scope, receive, send)
                return
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
        is_form = form and media_type(headers.get("content-type")) == FORM_TYPE
        problem = body_problem(body, is_form)
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


def install_error_handlers(
    app: FastAPI, bodies: Mapping[str, type[BaseModel] | None], routes: str
) -> None:
    """Answer every error of ``app`` as one JSON line: pydantic's (422, naming the field of
    the route's model in ``bodies``), :class:`InputError` (422), :class:`BadRequest` (400,
    the LibreTranslate routes), :class:`Busy` (503 with
    Retry-After), a client gone, and Starlette's HTTP errors (an unknown route lists
    ``routes``)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):  # BodyGuard catches these
            return error_response(400, "body: invalid JSON")
        body = bodies.get(request.url.path)
        return error_response(422, validation_message(errors, body))

    @app.exception_handler(InputError)
    async def unusable(request: Request, exc: InputError) -> JSONResponse:
        return error_response(422, str(exc))

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        return error_response(400, str(exc))  # LibreTranslate's status for a bad field

    @app.exception_handler(Busy)
    async def busy(request: Request, exc: Busy) -> JSONResponse:
        return error_response(503, str(exc), {"Retry-After": str(exc.retry_after)})

    @app.exception_handler(ClientGone)
    async def gone(request: Request, exc: ClientGone) -> JSONResponse:
        return error_response(503, "the client closed the connection")  # read by nobody

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        where = f"{request.method} {clip(request.url.path)}"
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 404 and exc.detail == "Not Found":
            message = f"not found: {where}; the routes are {routes}"
        elif exc.status_code == 405:
            allow = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow", "")
            message = f"method not allowed: {where}; use {allow or 'another method'}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, headers)

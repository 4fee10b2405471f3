"""The web server: the attention explorer's FastAPI routes over :class:`Explorer`, and the
translation service's (LibreTranslate's ``/translate`` and ``/languages``, ``/health``,
``/metrics``) over :class:`~attnlab.serve.service.TranslationService` (docs/serve.md).

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

import asyncio
import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import parse_qs

import torch
from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..decode.options import DecodingOptions
from .errors import FORM_TYPE, BodyGuard, clip, install_error_handlers, json_type, media_type
from .explorer import Explorer
from .keys import Gate
from .libre import BadRequest, languages, parse_translate
from .limits import (
    LOOPBACK_NAMES,
    MAX_BEAM,
    Draining,
    HeadAsGet,
    HostGuard,
    InternalErrors,
    Limits,
    ModelQueue,
)
from .metrics import RequestMetrics, ServeMetrics
from .schemas import (
    BODIES,
    AttentionRequest,
    AttentionResponse,
    ErrorResponse,
    Health,
    Language,
    LibreTranslateAnswer,
    MasksRequest,
    MasksResponse,
    ModelInfo,
    PositionalResponse,
    TranslateRequest,
    TranslateResponse,
    libre_body,
)
from .service import TranslationService, model_languages

__all__ = ["STATIC_DIR", "Limits", "create_app", "explorer_routes"]

#: The page's files: index.html, its script and stylesheet.
STATIC_DIR = Path(__file__).with_name("static")
#: The longest name under /static/ (a longer one is a 404 before the file system is asked).
MAX_STATIC_NAME = 64

log = logging.getLogger("attnlab.serve")

#: The translation service's routes, as an unknown route's 404 lists them (the explorer's
#: come first, unless ``--api-only``).
API_ROUTES = "POST /translate, GET /languages, GET /health, GET /metrics"
EXPLORER_ROUTES = (
    "GET /api/model, POST /api/translate, POST /api/attention, GET /api/positional, "
    "POST /api/masks, GET /, GET /static/<file>"
)
ROUTES = f"{EXPLORER_ROUTES}, {API_ROUTES}"
#: The model routes' answer when it is busy, in the OpenAPI schema.
BUSY = {503: {"model": ErrorResponse, "description": "the model is busy: try again later"}}
#: Paths counted by name in /metrics.
METRIC_ROUTES = (
    "/api/model", "/api/translate", "/api/attention", "/api/positional", "/api/masks",
    "/translate", "/languages", "/health", "/metrics", "/",
)  # fmt: skip

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
    model_dir: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    device: str | torch.device | None = None,
    static_dir: str | os.PathLike | None = None,
    limits: Limits | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
    decoding: DecodingOptions | None = None,
    api_only: bool = False,
    languages_served: tuple[str, str] | None = None,
    warm_up: bool = True,
    engine: str = "torch",
    quantize: str | None = None,
    gate: Gate | None = None,
) -> FastAPI:
    """The server's ASGI app for the encoder-decoder model in ``model_dir`` (loaded now,
    once, into the model host, :class:`~attnlab.serve.service.TranslationService`; a list of
    directories: their ensemble): the translation service and, unless ``api_only``, the
    explorer's page and API over the same loaded model. ``decoding``: how it decodes (default:
    what the model directory carries,
    :meth:`~attnlab.decode.options.DecodingOptions.carried_by`; its beam 1 to 16);
    ``engine``, ``quantize``: as :meth:`~attnlab.inference.translator.Translator.load`'s (the
    explorer needs one model on the torch engine); ``device``: default CUDA when available;
    ``static_dir``: the page's files (default the package's ``static/``); ``limits``: queue,
    timeouts, connection and answer sizes (:class:`Limits`' defaults); ``allowed_hosts``: the
    names the Host header may carry (default the loopback names; ``"*"``: any);
    ``api_only``: no explorer (its page and ``/api/`` routes are 404s); ``languages_served``:
    the model's ``(source, target)`` codes for ``/translate`` (default: its job.json's task,
    else ``("src", "tgt")``); ``warm_up``: start the warm-up now, in a thread (else
    ``/health`` says not ready until ``app.state.service.warm_up()`` has run). The app's
    lifespan drains the host when the server stops (the admitted requests are answered).
    ``gate``: the keys and limits of the model routes (default none; ``/metrics`` too with keys).

    Raises:
        FileNotFoundError: ``model_dir`` is not a directory.
        ValueError: it holds no encoder-decoder Transformer; a beam out of range; what the
            engine or the explorer cannot do.
    """
    from ..inference.translator import Translator

    if decoding is not None and decoding.beam_size > MAX_BEAM:  # before the model loads
        raise ValueError(f"beam_size: expected 1 to {MAX_BEAM}, got {decoding.beam_size}")
    dirs = [model_dir] if isinstance(model_dir, (str, os.PathLike)) else list(model_dir)
    for d in dirs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"model_dir: {d}: no such directory")
    limits = limits if limits is not None else Limits()
    translator = Translator.load(
        dirs if len(dirs) > 1 else dirs[0],
        device=device,
        decoding=decoding,
        engine=engine,
        quantize=quantize,
    )
    if translator.decoding.beam_size > MAX_BEAM:
        raise ValueError(
            f"beam_size: the model carries {translator.decoding.beam_size}; the server takes "
            f"1 to {MAX_BEAM}: pass one"
        )
    draining = threading.Event()
    pair = languages_served if languages_served is not None else model_languages(dirs[0])
    metrics = ServeMetrics()
    gate = gate if gate is not None else Gate()
    metrics.registry.add(gate.counts)
    service = TranslationService(
        translator,
        pair,
        metrics,
        max_tokens=limits.batch_tokens,
        max_delay=limits.batch_delay,
        waiting=limits.translate_waiting,
        timeout=limits.request_timeout,
        streams=limits.batching == "stream",
    )
    explorer = None if api_only else Explorer(translator, dirs[0], service.lock)
    queue = ModelQueue(waiting=limits.queue, timeout=limits.request_timeout)
    metrics.queue_depth.read = lambda: service.batcher.sentences_waiting
    metrics.explorer_depth.read = lambda: queue.pending
    metrics.ready.read = lambda: float(service.ready.is_set())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        draining.clear()  # (an app served again after a drain)
        yield
        # Under any ASGI server: from here /health says draining and a new request gets a
        # 503, and the shutdown waits (at most the request timeout) for the requests the
        # batcher admitted. The threads stay: run() closes them once its server has stopped.
        draining.set()
        deadline = time.monotonic() + limits.request_timeout
        while service.batcher.sentences_waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    app = FastAPI(
        title="attnlab attention explorer and translation service",
        description="Attention, positional information and masks of an attnlab Transformer, "
        "and its translations through a LibreTranslate-compatible route.",
        docs_url=None,  # the interactive docs load scripts from a CDN: the page must not
        redoc_url=None,
        openapi_url="/api/openapi.json",
        redirect_slashes=False,  # "/api/model/" is an unknown route (404), not a redirect
        responses={"4XX": {"model": ErrorResponse, "description": "a client error"}},
        lifespan=lifespan,
    )
    app.state.explorer = explorer
    app.state.queue = queue
    app.state.limits = limits
    app.state.service = service
    app.state.metrics = metrics
    app.state.draining = draining
    app.state.gate = gate
    # Starlette runs the last added outermost: metrics, errors, Host, draining, HEAD, bodies.
    app.add_middleware(
        BodyGuard, bodies=BODIES, timeout=limits.body_timeout, forms=frozenset({"/translate"})
    )
    app.add_middleware(HeadAsGet)
    app.add_middleware(Draining, draining=draining.is_set, exempt=("/health", "/metrics"))
    app.add_middleware(HostGuard, allowed=allowed_hosts)
    app.add_middleware(InternalErrors)
    app.add_middleware(RequestMetrics, metrics=metrics, routes=METRIC_ROUTES)
    install_error_handlers(app, BODIES, API_ROUTES if api_only else ROUTES)

    @app.post(
        "/translate",
        responses={200: {"model": LibreTranslateAnswer}, **BUSY},
        openapi_extra={"requestBody": libre_body(pair)},
    )
    async def libre_translate(request: Request) -> dict:
        """LibreTranslate's translate: ``q`` (a string or a list), ``source``, ``target``,
        ``format`` (text), ``alternatives``; as JSON or a URL-encoded form (docs/serve.md)."""
        fields = _fields(await request.body(), request.headers.get("content-type"))
        await gate.admit(request.scope, fields)
        call = parse_translate(
            fields, service.languages, service.translator.decoding, max_beam=MAX_BEAM
        )
        return await service.translate(call, request.receive)

    @app.get("/languages", response_model=list[Language])
    def libre_languages() -> list[dict]:
        """LibreTranslate's languages: the model's pair."""
        return languages(*service.languages)

    @app.get(
        "/health",
        responses={200: {"model": Health}, 503: {"model": Health, "description": "not ready"}},
    )
    def health() -> JSONResponse:
        """Live (it answers) and ready (the model is loaded and warmed up, and the server is
        not shutting down): 200 when ready, else 503."""
        ready = service.ready.is_set() and not draining.is_set()
        answer = {"live": True, "ready": ready, "draining": draining.is_set()}
        return JSONResponse(answer, status_code=200 if ready else 503)

    @app.get("/metrics", include_in_schema=False)
    def metrics_text(request: Request) -> Response:
        """Prometheus' text format: requests, batches, queue depth, latency."""
        gate.check(request.scope, {}, limited=False)  # with keys, a known key
        return Response(metrics.exposition(), media_type=ServeMetrics.CONTENT_TYPE)

    if explorer is not None:
        static = Path(static_dir) if static_dir is not None else STATIC_DIR
        explorer_routes(app, explorer, queue, limits, static)
    if warm_up:
        service.start_warm_up()
    return app


def explorer_routes(
    app: FastAPI, explorer: Explorer, queue: ModelQueue, limits: Limits, static: Path
) -> None:
    """The explorer's page (``/``, ``/static/``) and API (``/api/``) on ``app``: its model
    routes pass ``app.state.gate`` (if any: a key in an Authorization header), then wait in
    ``queue``, the model's bounded line."""
    gate: Gate = getattr(app.state, "gate", None) or Gate()

    @app.get("/api/model", response_model=ModelInfo)
    async def model_info() -> dict:
        """What the page needs to know about the model."""
        return explorer.info()

    async def model_work(request: Request, body: TranslateRequest, prepare, run, *options):
        """``(job, result)``: ``body``'s client through the gate, ``job = prepare(text,
        decoding, *options)`` in a worker thread (no model work), then ``run(job)`` in the
        model's queue."""
        await gate.admit(request.scope, {"text": body.text})
        decoding = body.decoding(explorer.decoding)
        job = await run_in_threadpool(prepare, body.text, decoding, *options)
        return job, await queue.run(lambda: run(job), request.receive)

    @app.post("/api/translate", response_model=TranslateResponse, responses=BUSY)
    async def translate(body: TranslateRequest, request: Request) -> dict:
        """Translate one sentence (beam search; beam_size 1 is greedy)."""
        steps = explorer.prepare_translate, explorer.run_translate
        _, answer = await model_work(request, body, *steps, body.constraints, body.prefix)
        return answer

    @app.post("/api/attention", response_model=AttentionResponse, responses=BUSY)
    async def attention(body: AttentionRequest, request: Request) -> Response:
        """Translate, and return the attention weights of the asked-for layers and heads
        (all by default), at most ``max_elements`` of them."""
        steps = explorer.prepare_attention, explorer.run_attention
        options = body.target, body.layers, body.heads, body.constraints, body.prefix
        job, result = await model_work(request, body, *steps, *options)

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


def _fields(body: bytes, content_type: str | None) -> dict[str, object]:
    """A ``/translate`` body's fields: a JSON object, or a URL-encoded form (each field once;
    the guard has checked the type, the size and the encoding; a percent-escape's bytes that
    are not UTF-8 are refused, not replaced)."""
    if media_type(content_type) == FORM_TYPE:
        try:  # a percent-escaped byte that is not UTF-8 comes back as a lone surrogate
            pairs = parse_qs(
                body.decode(), keep_blank_values=True, max_num_fields=64, errors="surrogateescape"
            )
        except ValueError as error:  # more fields than that
            raise BadRequest(f"body: {error}") from None
        for name, values in pairs.items():
            shown = clip(name.encode("utf-8", "replace").decode(), 40)  # "?" for a bad byte
            try:
                "".join([name, *values]).encode("utf-8")
            except UnicodeEncodeError:
                message = "percent-escapes of bytes that are not UTF-8; expected UTF-8 text"
                raise BadRequest(f"{shown}: {message}") from None
            if len(values) > 1:
                raise BadRequest(
                    f"{shown}: given {len(values)} times in the form; expected once "
                    f"(send a list of sentences as JSON)"
                )
        return {name: values[0] for name, values in pairs.items()}
    fields = json.loads(body)
    if not isinstance(fields, dict):
        raise BadRequest(f"body: expected a JSON object, got {json_type(fields)}")
    return fields


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

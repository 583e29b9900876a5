"""The server's HTTP routes (FastAPI): LibreTranslate's `POST /translate` and `GET /languages`, the native
`POST /v1/translate`, `GET /health`, `GET /ready`, `GET /metrics`, the OpenAPI page at `/docs`, and the web page
at `/` (`page`).

Every refusal is JSON, `{"error": "..."}` as LibreTranslate answers, never a traceback. No route reads or
writes a file named by a request.
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from ..card_text import LANGUAGE_NAMES
from ..decoding.engine import Engine
from ..decoding.sentences import Sentence, join_sentences, split_sentences
from ..decoding.translate import decoding_workers
from ..values import check_length_penalty
from .batcher import Batcher, Options, QueueFull, SentenceTooLong
from .limits import ApiError, ApiKeys, RateLimiter
from .metrics import ServerMetrics
from .page import add_page
from .parsing import NativeRequest, libretranslate_fields, native_request
from .scores import sentence_scores
from .settings import ServeSettings

logger = logging.getLogger(__name__)
ENDPOINTS = (
    "/",
    "/translate",
    "/languages",
    "/v1/translate",
    "/v1/attention",
    "/health",
    "/ready",
    "/metrics",
)
WARM_UP = "Hello."
ALWAYS_ANSWERED = ("/health", "/ready", "/metrics")  # also while the server drains


@dataclass
class ServerState:
    """What the routes and the shutdown share: ready once warmed, draining once a signal came, requests open, and
    `out_of_time` once --shutdown_timeout has run out (the requests still open are then answered 503)."""

    ready: bool = False
    draining: bool = False
    open_requests: int = 0
    out_of_time: asyncio.Event = field(default_factory=asyncio.Event)


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)


class Guard:
    """ASGI middleware: 503 once the server drains (a signal came), and each request counted and timed."""

    def __init__(self, app: Callable, state: ServerState, metrics: ServerMetrics) -> None:
        self.app, self.state, self.metrics = app, state, metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
        started, status = time.monotonic(), 500
        if self.state.draining and endpoint not in ALWAYS_ANSWERED:
            refusal = ApiError(503, "The server is shutting down: retry on another.", {"Connection": "close"})
            await error_response(refusal)(scope, receive, send)
            self.metrics.answered(endpoint, 503, time.monotonic() - started)
            return None

        async def send_counted(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.state.open_requests += 1
        try:
            await self.app(scope, receive, send_counted)
        finally:
            self.state.open_requests -= 1
            self.metrics.answered(endpoint, status, time.monotonic() - started)


class Translation:
    """Texts through the batcher: split into sentences where asked, with the limits, the timeout and a client
    that goes away handled; each text's translation joined back, and each sentence's score."""

    def __init__(self, batcher: Batcher, settings: ServeSettings, state: ServerState) -> None:
        self.batcher, self.settings, self.state = batcher, settings, state

    async def run(
        self, request: Request, texts: list[str], split: bool, options: Options, scores: bool = False
    ) -> list[tuple[list[Sentence], list[str], list[float | None]]]:
        paragraphs = [
            split_sentences(text, self.settings.source) if split else [Sentence(text)] for text in texts
        ]
        self.settings.limits.check_text(texts, sum(len(sentences) for sentences in paragraphs))
        flat = [sentence.text for sentences in paragraphs for sentence in sentences]
        translations, flat_scores = await self._translate(request, flat, options, scores)
        results, start = [], 0
        for sentences in paragraphs:
            end = start + len(sentences)
            results.append((sentences, translations[start:end], flat_scores[start:end]))
            start = end
        return results

    async def _translate(
        self, request: Request, sentences: list[str], options: Options, scores: bool
    ) -> tuple[list[str], list[float | None]]:
        timeout = self.settings.limits.request_timeout
        work = asyncio.ensure_future(self.batcher.translate(sentences, options, scores))
        gone = asyncio.ensure_future(_disconnected(request))
        out_of_time = asyncio.ensure_future(self.state.out_of_time.wait())
        try:
            done, _ = await asyncio.wait(
                {work, gone, out_of_time}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            gone.cancel()
            out_of_time.cancel()
            if not work.done():  # a timeout, a client gone, the end of the server: its sentences are dropped
                work.cancel()
        if work in done:
            try:
                return work.result()
            except SentenceTooLong as error:
                raise ApiError(
                    413,
                    f"Sentence {error.index + 1} of the request holds {error.tokens:,} tokens; this model translates "
                    f"at most {error.limit:,} tokens a sentence whole (its position table), and cuts none: split "
                    "it into shorter sentences (the native API's split_sentences, or LibreTranslate's /translate, "
                    "splits at sentence ends).",
                ) from None
            except QueueFull:
                raise ApiError(
                    503,
                    f"The server is busy: more than {self.settings.limits.max_queue:,} sentences are waiting "
                    "(vaswani-serve --max_queue). Retry shortly.",
                    {"Retry-After": "1"},
                ) from None
        if gone in done:
            raise ApiError(499, "The client closed the request.")
        if out_of_time in done:
            raise ApiError(
                503,
                "The server shut down before this request was done (vaswani-serve --shutdown_timeout): retry on "
                "another, or shortly.",
                {"Retry-After": "1", "Connection": "close"},
            )
        raise ApiError(
            504,
            f"The translation took longer than {timeout:g} s (vaswani-serve --request_timeout): send less text, "
            "or retry when the server is less busy.",
        )


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (its body is read by then, so the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def default_workers(engine: Engine) -> int:
    """Batches that decode at once unless told: as many as `translate()` decodes at once on the engine's device
    (two on a multi-core CPU, one on a GPU)."""
    if engine.name == "ctranslate2":
        on_cpu = engine.translator.translator.device == "cpu"
    else:
        on_cpu = engine.model.device.type == "cpu"
    return decoding_workers(torch.device("cpu" if on_cpu else "cuda"), batches=2)


def create_app(engine: Engine, settings: ServeSettings, model_name: str = "model") -> FastAPI:
    """The server for `engine`, which translates `settings.source` into `settings.target`."""
    state, metrics = ServerState(), ServerMetrics()
    batcher = Batcher(
        engine,
        lambda text: len(engine.tokenizer(text)["input_ids"]),
        max_batch_tokens=settings.max_batch_tokens,
        max_batch_sentences=settings.max_batch_sentences,
        max_wait=settings.max_wait,
        max_queue=settings.limits.max_queue,
        observer=metrics,
        scorer=lambda sources, translations: sentence_scores(engine, sources, translations),
        workers=settings.decoding_workers or default_workers(engine),
        max_source_tokens=engine.max_source_tokens,
    )
    translation = Translation(batcher, settings, state)
    keys = ApiKeys(settings.api_keys) if settings.api_keys else None
    limiter = RateLimiter()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        await batcher.translate([WARM_UP], _options(settings.defaults))
        state.ready = True
        yield
        state.ready = False
        # past --shutdown_timeout, a batch still decoding (every request of it answered 503) does not hold the exit
        await asyncio.to_thread(batcher.stop, 0 if state.out_of_time.is_set() else None)

    app = FastAPI(
        title="vaswani-serve",
        summary=f"{model_name}: {settings.source}→{settings.target} translation",
        lifespan=lifespan,
    )
    app.state.server = state
    app.state.batcher = batcher

    @app.exception_handler(ApiError)
    async def refused(request: Request, error: ApiError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": str(error.detail)}, status_code=error.status_code, headers=error.headers
        )

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        logger.exception("request failed")
        return JSONResponse({"error": f"The translation failed: {error}"}, status_code=500)

    def admit(request: Request, presented: str | None) -> None:
        """403 without a valid key (when the server has keys), 429 over the client's rate."""
        header = request.headers.get("authorization", "")
        presented = presented or (header[7:].strip() if header.lower().startswith("bearer ") else None)
        if keys is not None:
            key, rate = keys.match(presented)
            limiter.check(f"key:{key}", rate or settings.requests_per_minute)
        else:
            limiter.check(
                f"address:{request.client.host if request.client else ''}", settings.requests_per_minute
            )

    def check_pair(source: Any, target: Any) -> None:
        for name, value in (("source", source), ("target", target)):
            if value is not None and not isinstance(value, str):
                raise ApiError(
                    400, f"Invalid request: {name} must be a language code, got {type(value).__name__}."
                )
        if source not in (None, "auto", settings.source) or target not in (None, settings.target):
            raise ApiError(
                400,
                f"This model translates {settings.source} to {settings.target} only (source "
                f"{settings.source!r}, target {settings.target!r}); got source {source!r}, target {target!r}.",
            )

    @app.post("/translate", summary="Translate (LibreTranslate's API)")
    async def libretranslate(request: Request) -> JSONResponse:
        """LibreTranslate's `POST /translate`: `q` (a text or a list), `source`, `target`, `format` "text",
        `api_key`; as JSON, a form or the query string. Paragraphs are translated sentence by sentence."""
        fields = await libretranslate_fields(request, settings.limits)
        admit(request, _optional_text(fields, "api_key"))
        texts = _texts(fields.get("q"), "q")
        check_pair(fields.get("source"), fields.get("target"))
        if fields.get("format", "text") != "text":
            raise ApiError(
                400, f'format {fields["format"]!r}: this server translates text only (format "text").'
            )
        results = await translation.run(request, texts, True, _options(settings.defaults))
        joined = [join_sentences(sentences, translations) for sentences, translations, _ in results]
        return JSONResponse({"translatedText": joined if isinstance(fields["q"], list) else joined[0]})

    @app.get("/languages", summary="The model's language pair (LibreTranslate's API)")
    async def languages() -> list[dict[str, Any]]:
        name = LANGUAGE_NAMES.get(settings.source, settings.source)
        return [{"code": settings.source, "name": name, "targets": [settings.target]}]

    @app.post(
        "/v1/translate",
        summary="Translate with decoding options and per-sentence scores",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": NativeRequest.model_json_schema()}},
            }
        },
    )
    async def native(request: Request) -> JSONResponse:
        """Texts (`q`), decoding options as `vaswani-translate`'s, and `split_sentences`; each translation comes
        with its sentences, each with its score (mean token log-probability)."""
        body = await native_request(request, settings.limits)
        admit(request, body.api_key)
        check_pair(body.source, body.target)
        options = _native_options(body, settings, engine.max_source_tokens)
        texts = [body.q] if isinstance(body.q, str) else body.q
        results = await translation.run(request, texts, body.split_sentences, options, body.scores)
        return JSONResponse(
            {
                "translations": [
                    {
                        "translation": join_sentences(sentences, translations),
                        "sentences": [
                            {
                                "source": sentence.text,
                                "translation": text,
                                **({"score": score} if body.scores else {}),
                            }
                            for sentence, text, score in zip(sentences, translations, scores, strict=True)
                        ],
                    }
                    for sentences, translations, scores in results
                ],
                "decoding": engine.decoding_settings(**dict(options)),
            }
        )

    @app.api_route("/health", methods=["GET", "HEAD"], summary="Live: the process answers")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", summary="Ready: the model is loaded and warmed, and the server is not shutting down")
    async def ready() -> JSONResponse:
        if state.ready and not state.draining:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"error": "not ready"}, status_code=503)

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    add_page(app, engine, batcher, settings.limits, admit)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"]
        )
    app.add_middleware(Guard, state=state, metrics=metrics)
    return app


def _options(overrides: dict[str, Any]) -> Options:
    return tuple(sorted(overrides.items()))


def _optional_text(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a string, got {type(value).__name__}.")
    return value


def _texts(q: Any, name: str) -> list[str]:
    """`q` as a list of texts: a string or a list of strings."""
    if q is None:
        raise ApiError(400, f"Invalid request: missing {name} parameter.")
    texts = q if isinstance(q, list) else [q]
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, f"Invalid request: {name} must be a string or a list of strings.")
    return texts


def _native_options(body: NativeRequest, settings: ServeSettings, longest: int) -> Options:
    """The server's decoding defaults with the request's options over them, checked: no output longer than
    `longest` tokens (the engine's position table)."""
    if body.num_beams is not None and body.num_beams > settings.limits.max_beams:
        raise ApiError(
            422,
            f"num_beams {body.num_beams} is more than this server decodes with, {settings.limits.max_beams} "
            "(vaswani-serve --max_beams).",
        )
    if body.max_new_tokens is not None and body.max_new_tokens > longest:
        raise ApiError(
            422,
            f"max_new_tokens {body.max_new_tokens:,} is longer than this model translates: at most {longest:,} "
            "tokens (its position table). Ask for fewer, or leave it out (the source + 50, §6.1).",
        )
    try:
        check_length_penalty("length_penalty", body.length_penalty)
    except ValueError as error:
        raise ApiError(400, f"Invalid request: {error}") from None
    requested = {
        name: value
        for name in ("num_beams", "length_penalty", "max_new_tokens")
        if (value := getattr(body, name)) is not None
    }
    return _options({**settings.defaults, **requested})

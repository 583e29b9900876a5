"""The server's HTTP routes (FastAPI): LibreTranslate's (`libretranslate`), the native `POST /v1/translate`,
`GET /health`, `GET /ready`, `GET /metrics`, the OpenAPI pages at `/docs` (their assets from the installed package,
no CDN), and the web page at `/` (`page`). The decoding happens in the decoding process (`decoder.Decoder`).

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

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from ..decoding.sentences import Sentence, join_sentences, split_sentences
from ..values import check_length_penalty
from .decoder import Decoder
from .languages import detect_languages
from .libretranslate import add_libretranslate
from .limits import Access, ApiError
from .messages import DecodingFailed, Options, QueueFull, SentenceTooLong, options_of
from .metrics import ServerMetrics
from .page import add_page
from .parsing import NativeRequest, check_pair, native_request
from .settings import ServeSettings

logger = logging.getLogger(__name__)
ENDPOINTS = (
    "/",
    "/translate",
    "/detect",
    "/languages",
    "/frontend/settings",
    "/v1/translate",
    "/v1/attention",
    "/health",
    "/ready",
    "/metrics",
)
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


@dataclass
class Paragraph:
    """A text as translated: its sentences, each sentence's hypotheses (best first) and score."""

    sentences: list[Sentence]
    hypotheses: list[list[str]]
    scores: list[float | None]

    @property
    def translation(self) -> str:
        """The best translation, joined back with the text's own spacing."""
        return join_sentences(self.sentences, [found[0] for found in self.hypotheses])

    def alternatives(self, count: int) -> list[str]:
        """Up to `count` other translations, best first: the sentences' next hypotheses, joined (a sentence with
        fewer keeps its best), each unlike the translation and the others, as LibreTranslate answers."""
        best, found = self.translation, []
        for rank in range(1, 1 + count):
            text = join_sentences(
                self.sentences, [hypotheses[min(rank, len(hypotheses) - 1)] for hypotheses in self.hypotheses]
            )
            if text != best and text not in found:
                found.append(text)
        return found


class Translation:
    """Texts through the decoding process: split into sentences where asked, with the limits, the timeout and a
    client that goes away handled; each text's translation joined back, with its sentences' hypotheses and scores."""

    def __init__(self, decoder: Decoder, settings: ServeSettings, state: ServerState) -> None:
        self.decoder, self.settings, self.state = decoder, settings, state

    async def run(
        self,
        request: Request,
        texts: list[str],
        split: bool,
        options: Options,
        *,
        scores: bool = False,
        n_best: int = 1,
        want_settings: bool = False,
    ) -> tuple[list[Paragraph], dict[str, Any] | None]:
        paragraphs = [
            split_sentences(text, self.settings.source) if split else [Sentence(text)] for text in texts
        ]
        self.settings.limits.check_text(texts, sum(len(sentences) for sentences in paragraphs))
        flat = [sentence.text for sentences in paragraphs for sentence in sentences]
        work = self.decoder.translate(flat, options, scores, n_best, want_settings)
        translated = await self._within_limits(request, work)
        results, start = [], 0
        for sentences in paragraphs:
            end = start + len(sentences)
            results.append(
                Paragraph(sentences, translated.hypotheses[start:end], translated.scores[start:end])
            )
            start = end
        return results, translated.settings

    async def _within_limits(self, request: Request, work: Awaitable[Any]) -> Any:
        """`work`'s result; 504 past --request_timeout, 499 for a client gone, 503 when the server's shutdown
        timeout runs out first (the work is abandoned in all three)."""
        timeout = self.settings.limits.request_timeout
        work = asyncio.ensure_future(work)
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


def create_app(
    decoder: Decoder, settings: ServeSettings, metrics: ServerMetrics, model_name: str = "model"
) -> FastAPI:
    """The server in front of `decoder` (started: its engine loaded), which translates `settings.source` into
    `settings.target`."""
    state = ServerState()
    translation = Translation(decoder, settings, state)
    access = Access(settings.api_keys, settings.requests_per_minute)
    ready = decoder.ready

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the first request must not pay for loading the sentence splitter and the language identifier
        split_sentences("Hello. Goodbye.", settings.source)
        detect_languages(["Hello."])
        state.ready = True
        yield
        state.ready = False
        # past --shutdown_timeout, a batch still decoding (every request of it answered 503) does not hold the exit
        await asyncio.to_thread(decoder.stop, 0 if state.out_of_time.is_set() else None)

    app = FastAPIOffline(
        title="vaswani-serve",
        summary=f"{model_name}: {settings.source}→{settings.target} translation",
        lifespan=lifespan,
    )
    app.state.server = state
    app.state.decoder = decoder

    @app.exception_handler(ApiError)
    async def refused(request: Request, error: ApiError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": str(error.detail)}, status_code=error.status_code, headers=error.headers
        )

    @app.exception_handler(DecodingFailed)
    async def decoding_failed(request: Request, error: DecodingFailed) -> JSONResponse:
        if decoder.ended is not None:
            return JSONResponse({"error": f"The server cannot translate: {error}."}, status_code=503)
        return JSONResponse({"error": f"The translation failed: {error}"}, status_code=500)

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        logger.exception("request failed")
        return JSONResponse({"error": f"The translation failed: {error}"}, status_code=500)

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
        access.admit(request, body.api_key)
        check_pair(settings, body.source, body.target)
        options = _native_options(body, settings, ready.max_source_tokens)
        texts = [body.q] if isinstance(body.q, str) else body.q
        results, used = await translation.run(
            request, texts, body.split_sentences, options, scores=body.scores, want_settings=True
        )
        return JSONResponse(
            {
                "translations": [
                    {
                        "translation": paragraph.translation,
                        "sentences": [
                            {
                                "source": sentence.text,
                                "translation": hypotheses[0],
                                **({"score": score} if body.scores else {}),
                            }
                            for sentence, hypotheses, score in zip(
                                paragraph.sentences, paragraph.hypotheses, paragraph.scores, strict=True
                            )
                        ],
                    }
                    for paragraph in results
                ],
                "decoding": used,
            }
        )

    @app.api_route("/health", methods=["GET", "HEAD"], summary="Live: the process answers")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", summary="Ready: the model is loaded and warmed, and the server is not shutting down")
    async def is_ready() -> JSONResponse:
        if state.ready and not state.draining and decoder.ended is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"error": "not ready"}, status_code=503)

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    add_libretranslate(app, translation, access)
    add_page(app, decoder, settings.limits, access.admit)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"]
        )
    app.add_middleware(Guard, state=state, metrics=metrics)
    return app


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
    return options_of({**settings.defaults, **requested})

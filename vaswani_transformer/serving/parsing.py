"""Request bodies as the server reads them: LibreTranslate's fields from the query string, a form (urlencoded or
multipart) or JSON, as LibreTranslate accepts them, and the native API's JSON checked against its model. Each
problem is an `ApiError` (400) naming it: malformed JSON, text that is not UTF-8, a field of the wrong type."""

import asyncio
import json
import re
from contextlib import suppress
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect, Request

from .limits import ApiError, ServerLimits, body_too_large
from .settings import ServeSettings

LIBRETRANSLATE_FIELDS = ("q", "source", "target", "format", "api_key", "alternatives")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
JSON_NAMES = {
    "list": "an array",
    "NoneType": "null",
    "str": "a string",
    "int": "a number",
    "float": "a number",
}


class NativeRequest(BaseModel):
    """`POST /v1/translate`: texts and the decoding options of `vaswani-translate` (unset: the server's)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    q: str | list[str] = Field(description="a text, or a list of texts, to translate")
    source: str | None = Field(None, description="source language code (default: the model's)")
    target: str | None = Field(None, description="target language code (default: the model's)")
    split_sentences: bool = Field(
        False, description="translate each sentence apart, joined back with its spacing"
    )
    num_beams: int | None = Field(
        None, ge=1, description="beam size (default: the server's, else the model's)"
    )
    length_penalty: float | None = Field(
        None, description="length penalty α (default: the server's or model's)"
    )
    max_new_tokens: int | None = Field(None, ge=1, description="longest translation in tokens")
    scores: bool = Field(True, description="return each sentence's mean token log-probability")
    api_key: str | None = Field(None, description="the API key, when the server has keys")


DRAINED_AT_MOST = 64 << 20  # bytes of a refused body read and dropped before the 413


async def read_body(request: Request, limits: ServerLimits) -> bytes:
    """The body, refused (413) as soon as it passes --max_body_bytes, whether or not Content-Length said so (its
    rest dropped first where the connection closes after the answer: `drain`); 408 when it has not arrived whole
    within --request_timeout (a Content-Length longer than the body, a chunked body without its end), 499 when the
    client leaves in the middle of it."""
    limit, seconds = limits.max_body_bytes, limits.request_timeout
    declared = request.headers.get("content-length", "")
    too_large = declared.isdigit() and int(declared) > limit
    chunks, size = [], 0
    try:
        async with asyncio.timeout(seconds):
            if not too_large:
                async for chunk in request.stream():
                    size += len(chunk)
                    if too_large := size > limit:
                        break
                    chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            f"The request body did not arrive within {seconds:g} s (vaswani-serve --request_timeout; a Content-Length "
            "longer than the body, or a chunked body without its end): send it whole.",
            {"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise ApiError(499, "The client closed the request before its body was sent.") from None
    if too_large:
        if closes_after_the_answer(request):
            await drain(request, seconds)
        raise body_too_large(limit)
    return b"".join(chunks)


def closes_after_the_answer(request: Request) -> bool:
    """Whether uvicorn closes the connection once it has answered (Connection: close, HTTP/1.0), with what the
    client sent still unread; a kept-alive connection reads and drops the rest of a body itself, and a client that
    waits for 100 Continue sends none."""
    headers = request.headers
    if headers.get("expect", "").lower() == "100-continue":
        return False
    return headers.get("connection", "").lower() == "close" or request.scope["http_version"] == "1.0"


async def drain(request: Request, seconds: float) -> None:
    """Read and drop the rest of a refused body (at most DRAINED_AT_MOST bytes, for at most `seconds`): a client
    that sends its whole body before reading (Python's urllib) then reads the refusal, where a connection closed
    with unread bytes is reset and the refusal lost with it."""
    dropped = 0
    with suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while dropped <= DRAINED_AT_MOST:
                message = await request.receive()
                if message["type"] == "http.disconnect" or not message.get("more_body", False):
                    return
                dropped += len(message.get("body", b""))


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"The request body is not UTF-8 (byte {error.start}): send UTF-8 text.") from None


def _check_unicode(value: Any, name: str) -> None:
    """Text holds no lone surrogate (JSON's "\\ud800", which is no character and cannot be encoded)."""
    if isinstance(value, str) and (found := LONE_SURROGATE.search(value)):
        raise ApiError(
            400,
            f"Invalid request: {name} holds a lone surrogate (\\u{ord(found[0]):04x}), which is not a character: "
            "send valid Unicode text.",
        )
    if isinstance(value, list):
        for item in value:
            _check_unicode(item, name)


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object whose texts are valid Unicode; an ApiError (400) naming what it is instead."""
    try:
        fields = json.loads(_text(body))
    except json.JSONDecodeError as error:
        raise ApiError(400, f"The request body is not valid JSON ({error}).") from None
    except RecursionError:
        raise ApiError(400, "The request body is JSON nested too deeply: send an object of fields.") from None
    if not isinstance(fields, dict):
        kind = JSON_NAMES.get(type(fields).__name__, type(fields).__name__)
        raise ApiError(400, f"The request body must be a JSON object of fields, got {kind}.")
    for name, value in fields.items():
        _check_unicode(name, "a field name")
        _check_unicode(value, name)
    return fields


def _form_fields(text: str, where: str, strict: bool = True) -> dict[str, str]:
    """A urlencoded form's fields, each percent-encoded byte decoded as UTF-8 (never replaced by U+FFFD); `strict`:
    a field without "=" is refused (a body that is not a form)."""
    try:
        return dict(parse_qsl(text, keep_blank_values=True, strict_parsing=strict, errors="strict"))
    except UnicodeDecodeError:
        raise ApiError(
            400,
            f"The {where} holds percent-encoded bytes that are not UTF-8 (e.g. %E9): encode text as UTF-8.",
        ) from None
    except ValueError:
        raise ApiError(400, f"The {where} is neither JSON nor a form: send one of them.") from None


async def libretranslate_fields(request: Request, limits: ServerLimits) -> dict[str, Any]:
    """LibreTranslate's fields: the query string's, overridden by the body's (JSON, a urlencoded or a multipart
    form)."""
    body = await read_body(request, limits)
    query = request.scope.get("query_string", b"").decode("latin-1")
    fields: dict[str, Any] = _form_fields(query, "query string", strict=False) if query else {}
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" or (not kind and body.lstrip()[:1] == b"{"):
        fields |= json_object(body)
    elif kind == "multipart/form-data":
        request._body = body  # starlette's form parser reads the body it was given
        form = await request.form()
        fields |= {name: value for name, value in form.items() if isinstance(value, str)}
    elif body:
        fields |= _form_fields(_text(body), "request body")
    for name, value in fields.items():
        _check_unicode(value, name)
    return fields


async def native_request(request: Request, limits: ServerLimits) -> NativeRequest:
    """The native API's request, checked field by field."""
    fields = json_object(await read_body(request, limits))
    try:
        return NativeRequest.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'body'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise ApiError(400, f"Invalid request: {problems}.") from None


def check_pair(settings: ServeSettings, source: Any, target: Any) -> None:
    """400 for a source or target that is not a language code, or not the model's pair (None: the model's)."""
    for name, value in (("source", source), ("target", target)):
        if value is not None and not isinstance(value, str):
            raise ApiError(
                400, f"Invalid request: {name} must be a language code, got {type(value).__name__}."
            )
    if source not in (None, settings.source) or target not in (None, settings.target):
        raise ApiError(
            400,
            f"This model translates {settings.source} to {settings.target} only (source {settings.source!r}, "
            f"target {settings.target!r}); got source {source!r}, target {target!r}.",
        )


def optional_text(fields: dict[str, Any], name: str) -> str | None:
    """A field that may be missing, else a string."""
    value = fields.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a string, got {type(value).__name__}.")
    return value


def texts_of(q: Any, name: str = "q") -> list[str]:
    """`q` as a list of texts: a string or a list of strings."""
    if q is None:
        raise ApiError(400, f"Invalid request: missing {name} parameter.")
    texts = q if isinstance(q, list) else [q]
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, f"Invalid request: {name} must be a string or a list of strings.")
    return texts

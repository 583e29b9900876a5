"""Request bodies as the server reads them: LibreTranslate's fields from the query string, a form (urlencoded or
multipart) or JSON, as LibreTranslate accepts them, and the native API's JSON checked against its model. Each
problem is an `ApiError` (400) naming it: malformed JSON, text that is not UTF-8, a field of the wrong type."""

import json
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from .limits import ApiError, body_too_large

LIBRETRANSLATE_FIELDS = ("q", "source", "target", "format", "api_key", "alternatives")


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


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it passes `limit` bytes, whether or not Content-Length said so."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise body_too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"The request body is not UTF-8 (byte {error.start}): send UTF-8 text.") from None


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        fields = json.loads(_text(body))
    except json.JSONDecodeError as error:
        raise ApiError(400, f"The request body is not valid JSON ({error}).") from None
    if not isinstance(fields, dict):
        raise ApiError(400, f"The request body must be a JSON object, got {type(fields).__name__}.")
    return fields


async def libretranslate_fields(request: Request, limit: int) -> dict[str, Any]:
    """LibreTranslate's fields: the query string's, overridden by the body's (JSON, a urlencoded or a multipart
    form)."""
    body = await read_body(request, limit)
    fields: dict[str, Any] = dict(request.query_params)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" or (not kind and body.lstrip()[:1] == b"{"):
        fields |= _json_object(body)
    elif kind == "multipart/form-data":
        request._body = body  # starlette's form parser reads the body it was given
        form = await request.form()
        fields |= {name: value for name, value in form.items() if isinstance(value, str)}
    elif body:
        try:
            fields |= dict(parse_qsl(_text(body), keep_blank_values=True, strict_parsing=True))
        except ValueError:
            raise ApiError(400, "The request body is neither JSON nor a form: send one of them.") from None
    return fields


async def native_request(request: Request, limit: int) -> NativeRequest:
    """The native API's request, checked field by field."""
    fields = _json_object(await read_body(request, limit))
    try:
        return NativeRequest.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'body'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise ApiError(400, f"Invalid request: {problems}.") from None

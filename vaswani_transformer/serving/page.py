"""The web page at `/`: a translate box that translates as `/translate` does (sentence by sentence) and shows each
sentence's encoder-decoder attention as a heat-map (layer and head selectable), and `POST /v1/attention`, which it
draws from (the PyTorch engine; under another the page says so in one line). Its assets ship in the package
(serving/page/), served by name from a fixed list: no CDN, and no path a request names."""

from collections.abc import Callable
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError

from .decoder import Decoder
from .limits import ApiError, ServerLimits
from .parsing import json_object, read_body

ASSETS = {"page.js": "text/javascript", "page.css": "text/css"}
Admit = Callable[[Request, str | None], None]  # the server's key and rate check (`limits.Access.admit`)


class AttentionRequest(BaseModel):
    """`POST /v1/attention`: a source and its translation."""

    model_config = ConfigDict(extra="forbid", strict=True)
    q: str
    translation: str
    api_key: str | None = None


def _asset(name: str) -> str:
    return resources.files("vaswani_transformer.serving").joinpath("page", name).read_text(encoding="utf-8")


def add_page(app: FastAPI, decoder: Decoder, limits: ServerLimits, admit: Admit) -> None:
    """The page's routes on `app`; `POST /v1/attention` asks `admit` as the translation routes do."""
    ready = decoder.ready
    attention_note = (
        ""
        if ready.attention
        else f"Attention maps need the PyTorch model: this server decodes with {ready.engine} (--engine torch)."
    )
    page = _asset("index.html").replace("{attention_note}", attention_note)
    assets = {name: _asset(name) for name in ASSETS}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    for name, media_type in ASSETS.items():
        app.add_api_route(
            f"/page/{name}",
            lambda name=name, media_type=media_type: Response(assets[name], media_type=media_type),
            include_in_schema=False,
        )

    @app.post("/v1/attention", summary="The encoder-decoder attention of a translation (the page's heat-map)")
    async def attention(request: Request) -> JSONResponse:
        """`{"q": source, "translation": its translation}` → the source's and the translation's tokens and the
        cross-attention weights, `cross[layer][head][target token][source token]` (--engine torch only; each side
        at most `decoding_process.ATTENTION_TOKENS` tokens; an API key where the server has keys)."""
        if not ready.attention:
            raise ApiError(
                400, f"Attention needs the PyTorch model: serve with --engine torch, not {ready.engine}."
            )
        body = await read_body(request, limits)
        try:
            asked = AttentionRequest.model_validate(json_object(body))
        except ValidationError as error:
            raise ApiError(400, f"Invalid request: {error.errors()[0]['msg']}.") from None
        admit(request, asked.api_key)
        limits.check_text([asked.q, asked.translation], 1)
        return JSONResponse(await decoder.attention(asked.q, asked.translation))

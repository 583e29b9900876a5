"""The web page at `/`: a translate box that shows the translation and its encoder-decoder attention as a heat-map
(layer and head selectable), and `POST /v1/attention`, which it draws from. Its assets ship in the package
(serving/page/), served by name from a fixed list: no CDN, and no path a request names."""

import asyncio
from collections.abc import Callable
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError

from ..decoding.engine import Engine
from ..plotting import attention_maps
from .batcher import Batcher
from .limits import ApiError, ServerLimits
from .parsing import json_object, read_body

ASSETS = {"page.js": "text/javascript", "page.css": "text/css"}
# The longest source and translation, in tokens, whose attention is sent: the answer holds layers × heads × target
# × source weights (a base model's 6 × 8 × 200 × 200 is 1.9 million), for a page that draws one sentence.
ATTENTION_TOKENS = 200
Admit = Callable[[Request, str | None], None]  # the server's key and rate check (`create_app`)


class AttentionRequest(BaseModel):
    """`POST /v1/attention`: a source and its translation."""

    model_config = ConfigDict(extra="forbid", strict=True)
    q: str
    translation: str
    api_key: str | None = None


def _asset(name: str) -> str:
    return resources.files("vaswani_transformer.serving").joinpath("page", name).read_text(encoding="utf-8")


def add_page(app: FastAPI, engine: Engine, batcher: Batcher, limits: ServerLimits, admit: Admit) -> None:
    """The page's routes on `app`; `POST /v1/attention` asks `admit` as the translation routes do."""
    page = _asset("index.html")
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
        at most ATTENTION_TOKENS tokens; an API key where the server has keys)."""
        model = getattr(engine, "model", None)
        if engine.name != "torch" or model is None:
            raise ApiError(
                400, f"Attention needs the PyTorch model: serve with --engine torch, not {engine.name}."
            )
        body = await read_body(request, limits)
        try:
            asked = AttentionRequest.model_validate(json_object(body))
        except ValidationError as error:
            raise ApiError(400, f"Invalid request: {error.errors()[0]['msg']}.") from None
        admit(request, asked.api_key)
        limits.check_text([asked.q, asked.translation], 1)
        for name, text in (("q", asked.q), ("translation", asked.translation)):
            if (tokens := len(engine.tokenizer(text, verbose=False)["input_ids"])) > ATTENTION_TOKENS:
                raise ApiError(
                    413,
                    f"{name} holds {tokens:,} tokens; the attention of at most {ATTENTION_TOKENS} tokens a side is "
                    "sent (the page draws one sentence): send a shorter sentence.",
                )

        def maps() -> dict[str, Any]:
            # between batches: attention_maps switches the model to eager attention
            with batcher.model_idle():
                (found,) = attention_maps(model, engine.tokenizer, [asked.q], [asked.translation])
            return {
                "source_tokens": found.source_tokens,
                "target_tokens": found.target_tokens,
                "cross": [layer.tolist() for layer in found.cross],
            }

        return JSONResponse(await asyncio.to_thread(maps))

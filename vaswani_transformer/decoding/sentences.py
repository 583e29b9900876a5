"""Sentence splitting: a paragraph cut into sentences that translate one by one and join back with the paragraph's
own spacing (docs/decisions/sentence-splitting.md: sentencex, whose pieces keep the text between sentences), and
the language pair a saved model records, whose source language the splitting follows unless told.

`translate(..., split_sentences=True)`, the server (`vaswani-serve`) and `vaswani-translate --split_sentences` split
alike. sentencex (the serve extra) is imported only when splitting is asked for.
"""

import importlib
import importlib.util
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers.utils import cached_file

from ..extras import install_command

SPLIT_EXTRA = install_command("serve")


@dataclass(frozen=True)
class Sentence:
    """One sentence of a paragraph: its text without surrounding white space, and that white space."""

    text: str
    before: str = ""
    after: str = ""


def check_splitter() -> None:
    """A ValueError saying how to install sentencex where it is missing, before any work starts."""
    if importlib.util.find_spec("sentencex") is None:
        raise ValueError(f"Splitting sentences needs sentencex: {SPLIT_EXTRA}.")


def _segment(language: str, text: str) -> list[str]:
    check_splitter()
    return list(importlib.import_module("sentencex").segment(language, text))


def split_sentences(text: str, language: str) -> list[Sentence]:
    """The sentences of `text` in `language` (an ISO 639 code; sentencex falls back to a related language's rules
    for one it does not know), each with the white space around it, so that `join_sentences` of their own texts
    gives `text` back exactly (`sentence_pieces`, which the folder's pipeline splits with too). Blank text is at
    most one sentence with no words, which translates to nothing."""
    from ..modeling.pipeline_vaswani_transformer import sentence_pieces  # torch: not for --help

    pieces = sentence_pieces(text, lambda paragraph: _segment(language, paragraph))
    return [Sentence(sentence, before, after) for before, sentence, after in pieces]


def join_sentences(sentences: Sequence[Sentence], translations: Sequence[str]) -> str:
    """The paragraph's translation: each sentence's translation in its place, with the paragraph's white space."""
    return "".join(
        f"{sentence.before}{translation}{sentence.after}"
        for sentence, translation in zip(sentences, translations, strict=True)
    )


def translate_by_sentences(
    texts: Sequence[str], language: str, translate: Callable[[list[str]], list[str]]
) -> list[str]:
    """Each text's translation sentence by sentence: the sentences of all `texts` (split by `language`'s rules) go
    to `translate` in one call, and each text's translations are joined back with its own spacing."""
    paragraphs = [split_sentences(text, language) for text in texts]
    translated = iter(translate([sentence.text for sentences in paragraphs for sentence in sentences]))
    return [join_sentences(sentences, [next(translated) for _ in sentences]) for sentences in paragraphs]


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
    """(source, target) as the model's folder or Hub repo records them: what `vaswani-train` recorded
    (train_options.json), or the config's `langs` (written by the training job, a conversion and `vaswani-push
    --source_lang/--target_lang`; the folder's pipeline splits by it); None where it does not."""
    options = _read(model, "train_options.json")
    if isinstance(options.get("source_lang"), str) and isinstance(options.get("target_lang"), str):
        return options["source_lang"], options["target_lang"]
    langs = _read(model, "config.json").get("langs")
    if isinstance(langs, list) and len(langs) == 2 and all(isinstance(code, str) for code in langs):
        return langs[0], langs[1]
    return None


def splitting_language(split: bool | str, model_name: str | Path) -> str:
    """The language `translate(..., split_sentences=split)` splits by: the code `split` names, or for True the
    source language the model's folder (`model_name`) records; a ValueError naming the fix where it records none.
    sentencex is checked for here, before any decoding."""
    check_splitter()
    if isinstance(split, str):
        return split
    if (pair := recorded_languages(model_name)) is None:
        raise ValueError(
            f"The model {str(model_name) or '(not loaded from a folder)'} does not record its source language: "
            "name it, split_sentences='en'."
        )
    return pair[0]

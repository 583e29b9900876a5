"""Sentence splitting: a paragraph cut into sentences that translate one by one and join back with the paragraph's
own spacing (docs/decisions/sentence-splitting.md: sentencex, whose pieces keep the text between sentences).

The server (`vaswani-serve`) and `vaswani-translate --split_sentences` split alike; sentencex (the serve extra) is
imported only when splitting is asked for.
"""

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass

SPLIT_EXTRA = "pip install sentencex (or 'vaswani_transformer[serve]')"


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
    try:
        from sentencex import segment
    except ImportError:
        raise ImportError(f"Splitting sentences needs sentencex: {SPLIT_EXTRA}.") from None
    return list(segment(language, text))


def split_sentences(text: str, language: str) -> list[Sentence]:
    """The sentences of `text` in `language` (an ISO 639 code; sentencex falls back to a related language's rules
    for one it does not know), each with the white space around it, so that `join_sentences` of their own texts
    gives `text` back exactly. Blank text is at most one sentence with no words, which translates to nothing."""
    pieces = [piece for piece in _segment(language, text) if piece] if text.strip() else []
    if (
        "".join(pieces) != text
    ):  # a splitter that dropped characters: keep the paragraph whole rather than lose them
        pieces = [text]
    sentences = []
    for piece in pieces:
        stripped = piece.strip()
        start = piece.find(stripped) if stripped else len(piece)
        sentences.append(Sentence(stripped, piece[:start], piece[start + len(stripped) :]))
    return sentences


def join_sentences(sentences: Sequence[Sentence], translations: Sequence[str]) -> str:
    """The paragraph's translation: each sentence's translation in its place, with the paragraph's white space."""
    return "".join(
        f"{sentence.before}{translation}{sentence.after}"
        for sentence, translation in zip(sentences, translations, strict=True)
    )

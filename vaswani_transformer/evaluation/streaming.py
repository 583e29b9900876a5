"""Translating lines in buffers of bounded size, as `vaswani-translate` and `vaswani-evaluate` do with every engine.

A buffer of lines is read, decoded in length-sorted batches, and handed on in input order before the next one is
read (as fairseq-interactive's --buffer-size and CTranslate2's translate_file read theirs): the first translations
come out after one buffer, and memory does not grow with the input. Blank lines stay blank. Any engine
(`decoding.engine.Engine`: `engines.load_engine`'s) translates them; streaming calls only its `translate`.
"""

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from ..decoding import BATCH_SIZE
from ..decoding.engine import Engine
from ..decoding.sentences import translate_by_sentences

# Batches per buffer by default: enough for the length sort to find similar lengths and for two decoding workers
# (a CPU's) to stay busy, few enough that memory stays small. The first buffer is one batch, so that the first
# translations come out as soon as one batch has decoded.
BUFFER_BATCHES = 8


def default_buffer_lines(batch_size: int | None) -> int:
    """Lines per buffer unless told: `BUFFER_BATCHES` batches of `batch_size` sentences (None: `BATCH_SIZE`)."""
    return BUFFER_BATCHES * (batch_size or BATCH_SIZE)


def buffer_sizes(buffer_lines: int | None, batch_size: int | None) -> Iterator[int]:
    """Lines in each buffer: `buffer_lines` each when given; else one batch first, then `default_buffer_lines`."""
    if buffer_lines is not None:
        if buffer_lines < 1:
            raise ValueError(f"buffer_lines must be at least 1, got {buffer_lines}.")
        return itertools.repeat(buffer_lines)
    return itertools.chain([batch_size or BATCH_SIZE], itertools.repeat(default_buffer_lines(batch_size)))


def translate_lines(
    lines: Sequence[str], engine: Engine, *, split_language: str | None = None, **options: Any
) -> list[str]:
    """Translations of the non-blank lines, with blank lines kept blank, in input order (one per line). With
    `split_language`, each line is translated sentence by sentence (`translate_by_sentences`, the server's
    splitter) and joined back with its own spacing."""
    if split_language is not None:
        return translate_by_sentences(
            lines, split_language, lambda sentences: translate_lines(sentences, engine, **options)
        )
    filled = [index for index, line in enumerate(lines) if line.strip()]
    translations = engine.translate([lines[index] for index in filled], **options)
    output = [""] * len(lines)
    for index, translation in zip(filled, translations, strict=True):
        output[index] = translation
    return output


def translate_in_buffers(
    lines: Iterable[str],
    engine: Engine,
    *,
    buffer_lines: int | None = None,
    batch_size: int | None = None,
    total: int | None = None,
    show_progress: bool = False,
    split_language: str | None = None,
    **overrides: Any,
) -> Iterator[list[str]]:
    """The translations of `lines` (`translate_lines`), one list per buffer of `buffer_lines` lines (None: one
    batch, then `default_buffer_lines`), in input order.

    A buffer is taken from `lines` only once the one before has been handed on, so a lazy `lines` (standard input)
    is read at most one buffer ahead of what the caller has. Each buffer's batches are checked against the free
    memory before they decode (`translate`'s budget). Progress on standard error: lines done, of `total` if known.
    With `split_language`, lines are translated sentence by sentence (`translate_lines`).
    """
    sizes = buffer_sizes(buffer_lines, batch_size)
    remaining = iter(lines)
    with tqdm(total=total, desc="translating", unit=" lines", disable=not show_progress) as progress:
        while buffer := list(itertools.islice(remaining, next(sizes))):
            progress.update(sum(not line.strip() for line in buffer))  # blank lines are done at once
            on_batch = None if split_language else progress.update  # batches count sentences, not lines
            yield translate_lines(
                buffer,
                engine,
                split_language=split_language,
                batch_size=batch_size,
                on_batch=on_batch,
                **overrides,
            )
            if split_language:
                progress.update(sum(bool(line.strip()) for line in buffer))

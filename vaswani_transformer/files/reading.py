"""JSON and UTF-8 text read with errors that name the file and the fix.

Text is split into lines at "\\n" only, as Python's readlines() (which fairseq, subword-nmt and FSMTTokenizer use)
and the corpus loaders split it: str.splitlines() would also split at characters a sentence or a BPE piece may
hold (U+2028, U+0085, a form feed). "\\r\\n" (Windows) endings lose their "\\r"; "\\r" (old Mac) endings are
refused, since split at "\\n" such a file is one line.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

LINE_ENDING_HEAD = 1 << 16  # bytes read to tell a file's line endings
CONVERT_TO_UTF8 = (
    "convert it first, e.g. with `iconv -f latin1 -t utf-8`"  # the fix for text that is not UTF-8
)


def read_json(path: Path, fix: str) -> Any:
    """The JSON in `path`; one that is missing or not JSON is an error naming it and `fix`."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing; {fix}.") from None
    except ValueError as error:  # not UTF-8, not JSON, empty
        raise ValueError(f"{path} is damaged, not valid JSON ({error}): {fix}.") from None
    except RecursionError:
        raise ValueError(f"{path} is damaged, JSON nested too deeply: {fix}.") from None


def split_lines(text: str) -> list[str]:
    r"""Lines of a text, split at "\n" only: a U+2028 or form feed inside a sentence stays in it, a final newline
    ends the last line, "\r\n" endings lose their "\r"."""
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []


def check_text_head(head: bytes, name: str) -> None:
    r"""Refuse, given its first bytes, a file that is not text (NUL bytes, which binary files hold and text never
    does, though they are valid UTF-8), or text with "\r" (old Mac) line endings: a "\r" and no "\n" in them. Split
    at "\n" only, such a file is one line, which would be one overlong sentence (a corpus then reports "raise
    --max_length"). "\r\n" (Windows) endings are fine: every reader drops the "\r"."""
    if b"\0" in head:
        raise ValueError(
            f"{name} is not text (it holds NUL bytes, as binary files do): give a text file, a line each."
        )
    if b"\r" in head and b"\n" not in head:
        raise ValueError(
            f"{name} uses \\r (old Mac) line endings: convert them to \\n, e.g. `tr '\\r' '\\n' < {name}`."
        )


def _not_utf8(name: str, byte: int, line: int, fix: str) -> ValueError:
    return ValueError(f"{name} is not UTF-8 text (byte 0x{byte:02x} on line {line:,}): {fix}.")


def decode_text(raw: bytes, name: str, fix: str = CONVERT_TO_UTF8) -> str:
    r"""UTF-8 text (a leading BOM dropped) with "\n" or "\r\n" line endings; other bytes or "\r" endings are a
    ValueError naming `name` and the fix (for bytes: the line, and `fix`)."""
    check_text_head(raw[:LINE_ENDING_HEAD], name)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _not_utf8(name, raw[error.start], raw[: error.start].count(b"\n") + 1, fix) from None


def read_text_lines(path: str | Path, fix: str = CONVERT_TO_UTF8) -> list[str]:
    """Lines of a UTF-8 text file, split as `split_lines` does; one that is not UTF-8 is a ValueError naming the
    file, the byte and its line, and `fix` (what to do instead: convert it, or copy the model's own file)."""
    return split_lines(decode_text(Path(path).read_bytes(), str(path), fix))


def stream_text_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    r"""The lines of a UTF-8 byte stream, one at a time as they arrive (a pipe's line as soon as it ends), split as
    `split_lines` splits; a line that is not UTF-8, or "\r" (old Mac) line endings, are a ValueError naming `name`,
    raised only when the reader reaches them."""
    for number, raw in enumerate(stream, start=1):
        if number == 1:
            check_text_head(raw[:LINE_ENDING_HEAD], name)  # "\r" endings make the whole stream one line
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a BOM can only start the stream
        except UnicodeDecodeError as error:
            raise _not_utf8(name, raw[error.start], number, CONVERT_TO_UTF8) from None
        yield text.removesuffix("\n").removesuffix("\r")

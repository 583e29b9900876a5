"""fairseq's vocabulary and subword-nmt's BPE codes as FSMTTokenizer's files.

fairseq's Dictionary numbers `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, then its dict file's symbols in order, padded
to a multiple of 8; its symbols mark a piece that a word continues after with `@@`. FSMTTokenizer's vocabulary marks
a word's last piece with `</w>` instead, and it reads the BPE codes as "left right" merges, one a line.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from ..files.reading import read_text_lines

SPECIAL_SYMBOLS = (
    "<s>",
    "<pad>",
    "</s>",
    "<unk>",
)  # fairseq's Dictionary: ids 0 to 3, before the file's lines
OVERWRITE_FLAG = "#fairseq:overwrite"
PADDING_SYMBOL = "madeupword{:04d}"  # fairseq's Dictionary.finalize pads the vocabulary to a multiple of 8
PADDING_MULTIPLE = 8
CONTINUATION = "@@"  # subword-nmt's mark on a piece that a word continues after
WORD_END = "</w>"  # FSMTTokenizer's mark on a word's last piece instead
VERSION_HEADER = re.compile(r"#version: (\d+)\.(\d+)")


@dataclass(frozen=True)
class Vocabulary:
    """fairseq's Dictionary as loaded from its file: the symbol at each id, and the id of each symbol."""

    symbols: list[str]
    ids: dict[str, int]


def text_lines(path: Path) -> list[str]:
    """A file of the fairseq archive as lines (`read_text_lines`)."""
    return read_text_lines(path, "use the archive's own file")


def read_dictionary(path: Path) -> Vocabulary:
    """A fairseq dict file as fairseq's Dictionary.add_from_file reads it: the four special symbols first, then
    one `symbol count [#fairseq:overwrite]` per line, in order; an overwriting line gives its symbol a new id."""
    symbols = list(SPECIAL_SYMBOLS)
    ids = {symbol: index for index, symbol in enumerate(symbols)}
    for number, line in enumerate(text_lines(path), start=1):
        symbol, _, count = line.rstrip().rpartition(" ")
        overwrite = count == OVERWRITE_FLAG
        if overwrite:
            symbol, _, count = symbol.rpartition(" ")
        if not symbol or not count.isdigit():
            raise ValueError(
                f"{path} line {number} is not 'symbol count': {line!r}. Use the archive's own file."
            )
        if symbol in ids and not overwrite:
            raise ValueError(f"{path} line {number} repeats {symbol!r}. Use the archive's own file.")
        ids[symbol] = len(symbols)
        symbols.append(symbol)
    return Vocabulary(symbols, ids)


def padded_to(vocabulary: Vocabulary, rows: int, path: Path) -> Vocabulary:
    """The vocabulary as the model's embedding has it: fairseq pads a dictionary with `madeupwordNNNN` symbols to
    a multiple of 8 when it builds the model, and those rows are not in every dict file."""
    missing = rows - len(vocabulary.symbols)
    if missing < 0 or missing >= PADDING_MULTIPLE or rows % PADDING_MULTIPLE and missing:
        raise ValueError(
            f"{path} has {len(vocabulary.symbols)} symbols with fairseq's four special ones, but the model's "
            f"embedding has {rows} rows: the dictionary is not the one this model was trained with."
        )
    padding = [PADDING_SYMBOL.format(number) for number in range(missing)]
    symbols = vocabulary.symbols + padding
    return Vocabulary(symbols, {**vocabulary.ids, **{symbol: symbols.index(symbol) for symbol in padding}})


def fsmt_vocabulary(vocabulary: Vocabulary, path: Path) -> dict[str, int]:
    """The FSMTTokenizer's vocabulary for fairseq's (transformers' `rewrite_dict_keys`): a piece that a word
    continues after loses its `@@`, a word's last piece gains `</w>`; the special symbols stay as they are."""
    rewritten: dict[str, int] = {}
    for symbol, index in vocabulary.ids.items():
        if symbol in SPECIAL_SYMBOLS:
            key = symbol
        elif symbol.endswith(CONTINUATION):
            key = symbol.removesuffix(CONTINUATION)
        else:
            key = symbol + WORD_END
        if key in rewritten:
            raise ValueError(f"{path}: {symbol!r} and another symbol are both {key!r} for FSMTTokenizer.")
        rewritten[key] = index
    return rewritten


def merge_pair(line: str, path: Path, number: int) -> str:
    """One line of BPE codes as "left right": subword-nmt's pair, or fastBPE's pair and count. A piece holding
    other whitespace is refused: FSMTTokenizer splits its merges at any whitespace, subword-nmt at spaces only."""
    fields = line.strip("\r\n ").split(" ")
    if len(fields) == 3 and fields[2].isdigit():
        fields = fields[:2]
    if len(fields) != 2 or fields != line.split()[:2]:
        raise ValueError(f"{path} line {number} is not a BPE merge 'left right [count]': {line!r}.")
    if WORD_END in fields:  # version 0.1's end of word, a symbol of its own
        raise ValueError(
            f"{path} line {number} merges a separate {WORD_END}, as subword-nmt's codes of version 0.1 do; "
            f"FSMTTokenizer applies version 0.2's rules (a word's last character carries {WORD_END}), which give "
            f"other pieces."
        )
    return " ".join(fields)


def read_merges(path: Path) -> list[str]:
    """subword-nmt's (or fastBPE's) BPE codes as FSMTTokenizer's merges: one "left right" pair per line, the
    version header and fastBPE's counts dropped, a repeated pair kept at its first rank (subword-nmt's rule)."""
    lines = text_lines(path)
    header = VERSION_HEADER.fullmatch(lines[0].strip()) if lines else None
    if header is not None and (int(header[1]), int(header[2])) != (0, 2):
        raise ValueError(
            f"{path} holds subword-nmt codes of version {header[1]}.{header[2]}; FSMTTokenizer applies version "
            f"0.2's rules (a word's last character carries {WORD_END}), which give other pieces."
        )
    first = 2 if header else 1
    merges = dict.fromkeys(
        merge_pair(line, path, number) for number, line in enumerate(lines[first - 1 :], start=first)
    )
    return list(merges)

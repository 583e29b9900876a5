r"""Translate text with a trained model: one sentence a line, from files or standard input, to standard output.

Decoding is the model's own (the paper's §6.1: beam 4, length penalty α = 0.6, input length + 50) unless
--num_beams or --length_penalty say otherwise; batches are sorted by length; progress goes to standard error.
Blank lines stay blank, so the output has exactly one line per input line (lines end at "\n" only). The same
holds for every engine: PyTorch (default; --quantize int8 for dynamic int8 linear layers on a CPU) or the
model's CTranslate2 export (--engine ctranslate2, converted once and cached; --quantize int8 is its fast CPU path).

    echo "Where is the train station?" | vaswani-translate runs/tatoeba-en-de/final
    vaswani-translate runs/tatoeba-en-de/final input.en > output.de
    vaswani-translate runs/tatoeba-en-de/final --engine ctranslate2 --quantize int8 < input.en
    vaswani-translate you/tatoeba-en-de --num_beams 1 --device cuda --dtype bfloat16 < input.en
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..data import split_lines
from ..engines import EngineOptions, load_engine, translate_lines
from .decoding import add_decoding_arguments, engine_options, generate_overrides


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, EngineOptions]:
    """Command-line arguments and the engine they name, checked before anything is loaded."""
    parser = argparse.ArgumentParser(
        prog="vaswani-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="trained model folder (e.g. runs/tatoeba-en-de/final) or Hub id")
    parser.add_argument("files", nargs="*", type=Path, help="input files (default: standard input)")
    add_decoding_arguments(parser, batch_size=64)
    args = parser.parse_args(argv)
    for path in args.files:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    return args, engine_options(parser, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Read, translate, write; returns the exit status (2 for bad arguments or a missing model)."""
    args, options = parse_args(argv)
    try:
        engine = load_engine(args.model, options)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    inputs = [path.read_text(encoding="utf-8") for path in args.files] or [sys.stdin.read()]
    lines = [line for text in inputs for line in split_lines(text)]
    translations = translate_lines(
        lines, engine, batch_size=args.batch_size, show_progress=True, **generate_overrides(args)
    )
    for translation in translations:
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())

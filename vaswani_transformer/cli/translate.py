r"""Translate text with a trained model: one sentence a line, from files or standard input, to standard output.

Decoding is the model's own (the paper's §6.1: beam 4, length penalty α = 0.6, input length + 50) unless
--num_beams or --length_penalty say otherwise; batches are sorted by length; progress goes to standard error.
Blank lines stay blank, so the output has exactly one line per input line (lines end at "\n" only). The same
holds for every engine: PyTorch (default; --quantize int8 for dynamic int8 linear layers on a CPU), the model's
ONNX export in ONNX Runtime (--engine onnxruntime, exported once and cached; float32 on the CPU, the same search),
or its CTranslate2 export (--engine ctranslate2, converted once and cached; --quantize int8 is its fast CPU path).

    echo "Where is the train station?" | vaswani-translate runs/tatoeba-en-de/final
    vaswani-translate runs/tatoeba-en-de/final input.en > output.de
    vaswani-translate runs/tatoeba-en-de/final --engine ctranslate2 --quantize int8 < input.en
    vaswani-translate you/tatoeba-en-de --num_beams 1 --device cuda --dtype bfloat16 < input.en

Exit status: 0 when every line is translated, 2 for bad options or input, a missing model, or a batch that
would not fit in memory (found before it decodes).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..data.corpora import decode_text, read_text_lines, split_lines
from ..engines.load import load_engine, translate_lines
from ..engines.options import EngineOptions
from ..files import check_input_file
from ..modeling.pipeline_vaswani_transformer import DecodingBudgetError
from .command import command
from .decoding import add_decoding_arguments, engine_options, generate_overrides


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, EngineOptions]:
    """Command-line arguments and the engine they name, checked before anything is loaded."""
    parser = argparse.ArgumentParser(
        prog="vaswani-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="trained model folder (e.g. runs/tatoeba-en-de/final) or Hub id")
    parser.add_argument("files", nargs="*", type=Path, help="input files (default: standard input)")
    add_decoding_arguments(parser)
    args = parser.parse_intermixed_args(argv)  # files may follow options: MODEL --num_beams 1 FILE
    for path in args.files:
        try:
            check_input_file(path)
        except OSError as error:
            parser.error(str(error))
    return args, engine_options(parser, args)


def read_stdin_lines() -> list[str]:
    """The lines of standard input, read as bytes so that input that is not UTF-8 is a ValueError naming it."""
    stdin_bytes = getattr(sys.stdin, "buffer", None)
    return split_lines(decode_text(stdin_bytes.read(), "standard input") if stdin_bytes else sys.stdin.read())


@command
def main(argv: Sequence[str] | None = None) -> int:
    """Read, translate, write; returns the exit status (2 for bad arguments or input, or a missing model)."""
    args, options = parse_args(argv)
    try:
        # files before the model loads, so that bad input fails at once; standard input after it, as it is typed
        lines = [line for path in args.files for line in read_text_lines(path)]
        engine = load_engine(args.model, options)
        lines = lines if args.files else read_stdin_lines()
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        translations = translate_lines(
            lines, engine, batch_size=args.batch_size, show_progress=True, **generate_overrides(args)
        )
    except DecodingBudgetError as error:  # found before the first batch decodes
        print(f"error: {error}", file=sys.stderr)
        return 2
    for translation in translations:
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())

r"""Translate text with a trained model: one sentence a line, from files or standard input, to standard output.

Decoding is the model's own (the paper's §6.1: beam 4, length penalty α = 0.6, input length + 50; the main job's
CPU model keeps the α 1.4 it was tuned with) unless
--num_beams or --length_penalty say otherwise; batches are sorted by length; progress goes to standard error.
Blank lines stay blank, so the output has exactly one line per input line (lines end at "\n" only). The same
holds for every engine: PyTorch (default; --quantize int8 for dynamic int8 linear layers on a CPU), the model's
ONNX export in ONNX Runtime (--engine onnxruntime, exported once and cached; float32 on the CPU, the same search),
or its CTranslate2 export (--engine ctranslate2, converted once and cached; --quantize int8 is its fast CPU path).
Input is translated as it is read, a buffer of --buffer_lines lines at a time: each buffer's translations are
written (and flushed) before the next buffer is read, so they start at once and memory does not grow with the
input; --buffer_lines 1 translates each line as soon as it ends, as the command does by itself when standard input
is a terminal (typing). --split_sentences translates each line sentence by sentence (the splitter of vaswani-serve,
sentencex: pip install -e '.[serve]') and joins the translations with the line's own spacing.
Standard input is only ever text to translate: a model folder whose files name code of their own is refused, never
asked about (--trust_remote_code).

    echo "Where is the train station?" | vaswani-translate runs/tatoeba-en-de/final
    vaswani-translate runs/tatoeba-en-de/final input.en > output.de
    vaswani-translate runs/tatoeba-en-de/final --engine ctranslate2 --quantize int8 < input.en
    vaswani-translate you/tatoeba-en-de --num_beams 1 --device cuda --dtype bfloat16 < input.en

Exit status: 0 when every line is translated, 2 for bad options or input, a missing model, or a batch that
would not fit in memory (found before it decodes). Files are checked whole before the model loads; standard input
only as it is read, so a line of it that is not UTF-8 (or a later buffer that would not fit in memory) ends the
command with 2 after the earlier buffers' translations were written: the message says how many lines those are.
So does a file behind standard output that fills up (a full disk): the message names it and the free space there.
"""

import argparse
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import closing, suppress
from pathlib import Path

from tqdm import tqdm

from ..decoding.sentences import check_splitter, recorded_languages
from ..engines.options import EngineOptions
from ..evaluation.streaming import BUFFER_BATCHES, default_buffer_lines, translate_in_buffers
from ..files.paths import check_input_file
from ..files.reading import split_lines, stream_text_lines
from ..files.writing import WriteError, describe_write_failure, machine_write_failure
from .command import parse_intermixed_args
from .decoding import add_decoding_arguments, engine_options, generate_overrides


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, EngineOptions]:
    """Command-line arguments and the engine they name, checked before anything is loaded."""
    parser = argparse.ArgumentParser(
        prog="vaswani-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="trained model folder (e.g. runs/tatoeba-en-de/final) or Hub id")
    parser.add_argument("files", nargs="*", type=Path, help="input files (default: standard input)")
    add_decoding_arguments(parser)
    parser.add_argument(
        "--buffer_lines",
        "--buffer-lines",
        type=int,
        help=f"lines read and decoded together (sorted by length) before their translations are written "
        f"(default: one batch first, then {BUFFER_BATCHES} batches: {default_buffer_lines(None):,} lines at the "
        "default --batch_size); "
        "1 translates each line as soon as it ends (the default when standard input is a terminal)",
    )
    parser.add_argument(
        "--split_sentences",
        "--split-sentences",
        nargs="?",
        const="",
        metavar="LANGUAGE",
        help="translate each line sentence by sentence, split by the rules of LANGUAGE (default: the source "
        "language the model records), and join the translations with the line's spacing",
    )
    args = parse_intermixed_args(parser, argv)  # files may follow options: MODEL --num_beams 1 FILE
    if args.buffer_lines is not None and args.buffer_lines < 1:
        parser.error(f"--buffer_lines must be at least 1, got {args.buffer_lines}")
    for path in args.files:
        try:
            check_input_file(path)
        except OSError as error:
            parser.error(str(error))
    if not args.files and sys.stdin is None:
        parser.error("standard input is closed: give input files, or pipe the text in")
    if (same := output_onto_input(args.files)) is not None:
        parser.error(
            f"standard output is {same}, which is also the input: the translations would be read as input "
            "(>> never ends) or the shell has already emptied it (>). Write to another file."
        )
    return args, engine_options(parser, args)


def output_onto_input(files: Sequence[Path]) -> str | None:
    """The input (a file, or standard input) that standard output writes into, as `cat` tells them apart: the same
    regular file. None when they differ, or standard output is no regular file (a terminal, a pipe)."""
    try:
        output = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor
        return None
    if not stat.S_ISREG(output.st_mode):
        return None
    inputs: list[tuple[str, os.stat_result]] = [(str(path), path.stat()) for path in files]
    if not files and sys.stdin is not None:
        with suppress(OSError, ValueError, AttributeError):
            inputs.append(("standard input", os.fstat(sys.stdin.fileno())))
    for name, status in inputs:
        if (status.st_dev, status.st_ino) == (output.st_dev, output.st_ino):
            return name
    return None


def input_lines(files: Sequence[Path]) -> Iterator[str]:
    """The lines of `files`, one file after another, or of standard input, each read only when it is wanted;
    read as bytes, so that a line that is not UTF-8 is a ValueError naming it."""
    for path in files:
        with path.open("rb") as stream:
            yield from stream_text_lines(stream, str(path))
    if not files:
        stdin_bytes = getattr(sys.stdin, "buffer", None)
        # a text stream put in place of standard input has no bytes to check: its text is taken whole
        yield from (
            stream_text_lines(stdin_bytes, "standard input") if stdin_bytes else split_lines(sys.stdin.read())
        )


def write_lines(lines: Sequence[str]) -> None:
    """Lines on standard output, flushed: a pipe's reader gets a buffer's translations now, not when 8 KiB gather;
    on a terminal that also shows the progress bar, on lines of their own.
    A write the machine refuses (a full disk, a size limit) is a WriteError naming the file standard output goes
    to, the free space there and the fix; standard output then points at /dev/null, so that nothing is tried
    again at exit."""
    try:
        # the progress bar leaves a terminal's line while the lines are written, then comes back
        with tqdm.external_write_mode(file=sys.stdout):
            sys.stdout.write("".join(f"{line}\n" for line in lines))
            sys.stdout.flush()
    except OSError as error:
        failure = machine_write_failure(error)
        if failure is None:  # a reader that went away (BrokenPipeError): `command` ends quietly
            raise
        target = standard_output_file()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise WriteError(
            f"standard output: {describe_write_failure(failure, target, 'file for standard output (> FILE)')}"
        ) from None


def standard_output_file() -> Path:
    """The file standard output writes to, where the system says (/proc/self/fd), else /dev/stdout."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}"))
    except (OSError, ValueError):  # no /proc, or a stream without a descriptor
        return Path("/dev/stdout")


def buffer_lines(args: argparse.Namespace) -> int | None:
    """--buffer_lines, or 1 when standard input is a terminal: a typed line is answered as soon as it ends."""
    if args.buffer_lines is None and not args.files and sys.stdin is not None and sys.stdin.isatty():
        return 1
    return args.buffer_lines


def split_language(args: argparse.Namespace) -> str | None:
    """The language --split_sentences splits by: the one it names, else the model's recorded source language."""
    if args.split_sentences is None:
        return None
    check_splitter()
    if args.split_sentences:
        return args.split_sentences
    if (pair := recorded_languages(args.model)) is None:
        raise ValueError(f"{args.model} does not record its source language: give it, --split_sentences en.")
    return pair[0]


def written_before(count: int) -> str:
    """What an error after the first translations adds: how much of the output is there."""
    return f" The translations of the first {count:,} line(s) were written before it." if count else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Read, translate, write, a buffer at a time; returns the exit status (2 for bad arguments or input, or a
    missing model)."""
    args, options = parse_args(argv)
    from ..engines.load import load_engine

    try:
        # files are read through before the model loads, so that bad input fails at once and progress has a total
        total = sum(1 for _ in input_lines(args.files)) if args.files else None
        language = split_language(args)
        engine = load_engine(args.model, options)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    buffers = translate_in_buffers(
        input_lines(args.files),
        engine,
        buffer_lines=buffer_lines(args),
        batch_size=args.batch_size,
        total=total,
        show_progress=True,
        split_language=language,
        **generate_overrides(args),
    )
    written = 0
    try:
        # closed here, so that a signal while a buffer is written ends the progress line before "interrupted"
        with closing(buffers):
            for translations in buffers:
                write_lines(translations)
                written += len(translations)
    except BrokenPipeError:  # the reader went away: `command` ends quietly
        raise
    except (
        OSError,
        ValueError,
    ) as error:  # input not UTF-8, a batch too big for memory, a full disk (WriteError)
        print(f"error: {error}{written_before(written)}", file=sys.stderr)
        return 2
    return 0

r"""Translate text with a trained model: one sentence a line, from files or standard input, to standard output.

Decoding is the model's own (the paper's §6.1: beam 4, length penalty α = 0.6, input length + 50) unless
--num_beams says otherwise; batches are sorted by length; progress goes to standard error. Blank lines stay
blank, so the output has exactly one line per input line (lines end at "\n" only).

    echo "Where is the train station?" | vaswani-translate runs/tatoeba-en-de/final
    vaswani-translate runs/tatoeba-en-de/final input.en > output.de
    vaswani-translate you/tatoeba-en-de --num_beams 1 --device cuda --dtype bfloat16 < input.en
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..data import split_lines
from ..evaluation import decoding_dtype, load_for_decoding
from ..translate import translate

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments (`--num_beams` and `--num-beams` both work)."""
    parser = argparse.ArgumentParser(
        prog="vaswani-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="trained model folder (e.g. runs/tatoeba-en-de/final) or Hub id")
    parser.add_argument("files", nargs="*", type=Path, help="input files (default: standard input)")
    parser.add_argument("--num_beams", "--num-beams", type=int, help="beam size (default: the model's, 4)")
    parser.add_argument("--batch_size", "--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument(
        "--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when there is one)"
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", *DTYPES],
        default="auto",
        help="weights and activations (auto: bfloat16 on a GPU that has it, else float32)",
    )
    args = parser.parse_args(argv)
    for name in ("num_beams", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    for path in args.files:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this machine has no CUDA GPU (use --device cpu)")
    return args


def _device_and_dtype(device: str, dtype: str) -> tuple[str, torch.dtype]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        return device, decoding_dtype(device)
    return device, DTYPES[dtype]


def translate_lines(
    lines: Sequence[str], model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, **options: Any
) -> list[str]:
    """Translations of the non-blank lines, with blank lines kept blank, in input order."""
    filled = [index for index, line in enumerate(lines) if line.strip()]
    translations = translate([lines[index] for index in filled], model, tokenizer, **options)
    output = [""] * len(lines)
    for index, translation in zip(filled, translations, strict=True):
        output[index] = translation
    return output


def main(argv: Sequence[str] | None = None) -> int:
    """Read, translate, write; returns the exit status (2 for bad arguments or a missing model)."""
    args = parse_args(argv)
    device, dtype = _device_and_dtype(args.device, args.dtype)
    try:
        model, tokenizer = load_for_decoding(args.model, device=device, dtype=dtype)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    inputs = [path.read_text(encoding="utf-8") for path in args.files] or [sys.stdin.read()]
    overrides = {} if args.num_beams is None else {"num_beams": args.num_beams}
    lines = [line for text in inputs for line in split_lines(text)]
    for translation in translate_lines(
        lines, model, tokenizer, batch_size=args.batch_size, show_progress=True, **overrides
    ):
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())

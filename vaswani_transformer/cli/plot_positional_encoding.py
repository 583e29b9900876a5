"""Draw the §3.5 sinusoidal positional encoding PE(pos, i) as a heat map (sin on even, cos on odd channels).

vaswani-plot-positional-encoding --d_model 512 --length 100 --output positional_encoding.png

Exit status: 0 when the figure is written, 2 for bad options or an --output that cannot be written.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..files.writing import WriteError, check_writable
from .command import add_verbose_option


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(
        prog="vaswani-plot-positional-encoding",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--d_model", "--d-model", type=int, default=512, help="model width (even)")
    parser.add_argument(
        "--length",
        type=int,
        default=100,
        help="number of positions (--length × --d_model values at most: the picture is 960 × 480 pixels; a "
        "larger table is refused, naming the limit)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("positional_encoding.png"),
        help="the figure's file, never one of a model folder's; its suffix is the format (.png, .pdf, .svg, …)",
    )
    add_verbose_option(parser)
    args = parser.parse_args(argv)
    if args.d_model < 2 or args.d_model % 2:
        parser.error(f"--d_model must be even and at least 2, got {args.d_model}")
    if args.length < 1:
        parser.error(f"--length must be at least 1, got {args.length}")
    from ..plotting import check_figure_file, check_positional_encoding_size  # matplotlib: not for --help

    try:
        check_positional_encoding_size(args.d_model, args.length)
    except ValueError as error:
        parser.error(str(error))
    try:
        check_figure_file(args.output)
    except ValueError as error:
        parser.error(f"--output {error}")
    if args.output.is_file() and (args.output.parent / "config.json").is_file():  # a saved model's folder
        parser.error(
            f"--output {args.output} is a file of the model folder {args.output.parent}: choose a path apart from it"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Draw and print where the figure was written; returns the exit status."""
    args = parse_args(argv)
    from ..plotting import plot_positional_encoding

    try:
        check_writable(args.output, "--output")
        print(f"wrote {plot_positional_encoding(args.d_model, args.length, args.output, choose='--output')}")
    except WriteError as error:  # a read-only folder, a full disk: no half-written picture is left
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0

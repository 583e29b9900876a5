"""Draw the §3.5 sinusoidal positional encoding PE(pos, i) as a heat map (sin on even, cos on odd channels).

vaswani-plot-positional-encoding --d_model 512 --length 100 --output positional_encoding.png

Exit status: 0 when the figure is written, 2 for bad options.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..plotting import plot_positional_encoding
from .command import command


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(
        prog="vaswani-plot-positional-encoding",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--d_model", "--d-model", type=int, default=512, help="model width (even)")
    parser.add_argument("--length", type=int, default=100, help="number of positions")
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("positional_encoding.png"),
        help="PNG file (never one of a model folder's files)",
    )
    args = parser.parse_args(argv)
    if args.d_model < 2 or args.d_model % 2:
        parser.error(f"--d_model must be even and at least 2, got {args.d_model}")
    if args.length < 1:
        parser.error(f"--length must be at least 1, got {args.length}")
    if args.output.is_file() and (args.output.parent / "config.json").is_file():  # a saved model's folder
        parser.error(
            f"--output {args.output} is a file of the model folder {args.output.parent}: choose a path apart from it"
        )
    return args


@command
def main(argv: Sequence[str] | None = None) -> int:
    """Draw and print where the figure was written; returns the exit status."""
    args = parse_args(argv)
    print(f"wrote {plot_positional_encoding(args.d_model, args.length, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

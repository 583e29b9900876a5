"""Average the last N Trainer checkpoints of a run into one loadable model (paper: 5 for base, 20 for big).

vaswani-average runs/wmt14-base --last 5 --output runs/wmt14-base/averaged

Exit status: 0 when the averaged model is written, 2 for bad options, checkpoints that cannot be averaged, or an
--output that cannot be written (read-only, or full: the folder is left as it was).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..files import check_writable
from ..training.checkpoints import average_last
from .command import command


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="vaswani-average", description=__doc__, formatter_class=formatter)
    parser.add_argument("run_dir", type=Path, help="Trainer output_dir holding checkpoint-<step> folders")
    parser.add_argument("--last", type=int, default=5, help="how many of the latest checkpoints to average")
    parser.add_argument("--output", type=Path, default=None, help="output folder (default: RUN_DIR/averaged)")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}")
    if not args.run_dir.is_dir():
        parser.error(
            f"{args.run_dir}: no such run folder (give a training's --output_dir, with checkpoint-N folders)"
        )
    return args


@command
def main(argv: Sequence[str] | None = None) -> int:
    """Average the checkpoints and print where the averaged model was written; returns the exit status (2: bad
    arguments or a folder that cannot be read or written, with a message)."""
    args = parse_args(argv)
    output_dir = args.output if args.output is not None else args.run_dir / "averaged"
    try:
        check_writable(output_dir, "--output")  # before the checkpoints are read
        print(average_last(args.run_dir, args.last, output_dir))
    except (OSError, ValueError) as error:  # --last 0, too few checkpoints, a full disk, a read-only folder
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Average the last N Trainer checkpoints of a run into one loadable model (paper: 5 for base, 20 for big).

vaswani-average runs/wmt14-base --last 5 --output runs/wmt14-base/averaged

The output folder may lie inside the run (the default does), never on its checkpoints or its vocabulary, nor in a
model folder the training job wrote (its train_options.json would then describe other weights).

One writer at a time: a second vaswani-average into the same --output meanwhile exits 2 naming the first (its PID
and host), before reading any checkpoint.

Exit status: 0 when the averaged model is written, 2 for bad options, checkpoints that cannot be averaged, an
--output another command is writing, or an --output that cannot be written (read-only, or full: the folder is left
as it was).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..files.paths import check_apart
from ..files.writing import check_writable
from .command import add_verbose_option


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="vaswani-average", description=__doc__, formatter_class=formatter)
    parser.add_argument("run_dir", type=Path, help="Trainer output_dir holding checkpoint-<step> folders")
    parser.add_argument("--last", type=int, default=5, help="how many of the latest checkpoints to average")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="output folder, new or an earlier average (default: RUN_DIR/averaged)",
    )
    add_verbose_option(parser)
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}")
    if not args.run_dir.is_dir():
        parser.error(
            f"{args.run_dir}: no such run folder (give a training's --output_dir, with checkpoint-N folders)"
        )
    return args


def check_output(run_dir: Path, output_dir: Path) -> None:
    """The average goes apart from what it reads (the run's checkpoints and vocabulary; inside the run is
    documented), and never into a model folder the training job wrote (ValueError)."""
    from ..training.run_folder import OPTIONS_FILE

    inputs = {"the run folder": run_dir, "the run's vocabulary": run_dir / "tokenizer"}
    inputs |= {f"the run's {path.name}": path for path in sorted(run_dir.glob("*checkpoint-*"))}
    check_apart("--output", output_dir, inputs, may_lie_inside={"the run folder"})
    if (output_dir / OPTIONS_FILE).is_file():
        raise ValueError(
            f"--output {output_dir} holds a model the training job wrote ({OPTIONS_FILE} records how its weights "
            "were trained; an average would leave that record describing other weights): choose a new folder, "
            f"e.g. the default {run_dir / 'averaged'}."
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Average the checkpoints and print where the averaged model was written; returns the exit status (2: bad
    arguments or a folder that cannot be read or written, with a message)."""
    args = parse_args(argv)
    from ..training.checkpoints import average_last

    output_dir = args.output if args.output is not None else args.run_dir / "averaged"
    try:
        check_output(args.run_dir, output_dir)
        check_writable(output_dir, "--output")  # before the checkpoints are read
        print(average_last(args.run_dir, args.last, output_dir))
    except (OSError, ValueError) as error:  # --last 0, too few checkpoints, a full disk, a read-only folder
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
